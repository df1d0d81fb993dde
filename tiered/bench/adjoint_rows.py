"""The rows of ``tiered bench adjoint``: one way each of keeping the RTM history.

Each runner takes the run's :class:`AdjointBench` and the shot data, and returns its forward
and backward seconds, the image, its stall and what else it measured; :data:`RUNNERS` names
them. :mod:`tiered.bench.adjoint` runs each in a fresh process and compares them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tiered.bench import COLD_IO, rtm


def check_cold_io(cold_io: str) -> None:
    """Raise ``ValueError`` unless ``cold_io`` is one of :data:`COLD_IO`."""
    if cold_io not in COLD_IO:
        raise ValueError(f"cold_io must be one of {COLD_IO}, got {cold_io!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdjointBench:
    """One run's problem, budget and place."""

    cfg: rtm.RTMConfig
    regime: str
    workdir: Path
    budget_fraction: float = 0.25
    cold_io: str = "direct"  # or "fsync": how tiered and the bare ring bypass the page cache

    def __post_init__(self) -> None:
        check_cold_io(self.cold_io)

    @property
    def budget_bytes(self) -> int:
        """Bytes the fast level may hold."""
        return int(self.budget_fraction * self.cfg.nt * self.cfg.snapshot_bytes)

    @property
    def cold(self) -> bool:
        """Whether writes are dropped from the page cache (the beyond-memory regime)."""
        return self.regime == "beyond-memory"

    @property
    def direct(self) -> bool:
        """Whether tiered and the bare ring use direct I/O (beyond memory, by default)."""
        return self.cold and self.cold_io == "direct"


class Timer:
    """Accumulates seconds spent inside wrapped calls (the stall of a row)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Return ``fn`` timed into this timer."""
        def timed(*args: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.seconds += time.perf_counter() - started
        return timed


def save_npy(path: Path, value: np.ndarray, cold: bool) -> None:
    """``np.save`` one array (fsync'd and dropped from the page cache when ``cold``)."""
    with open(path, "wb") as fh:
        np.save(fh, value)
        if cold:
            drop_written(fh)


def drop_written(fh: Any) -> None:
    """Flush, fsync and drop from the page cache the file open as ``fh``."""
    fh.flush()
    os.fsync(fh.fileno())
    os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def cold_disk_storage(storage: Any) -> None:
    """Make a pyrevolve ``DiskStorage`` fsync and drop each checkpoint it saves."""
    save = storage.save

    def cold_save(key: int, data_pointers: list[np.ndarray]) -> None:
        save(key, data_pointers)
        if storage.singlefile:
            drop_written(storage.storage_w)
        else:
            with open(f"{storage.datFileName}.k{key}", "rb+") as fh:
                drop_written(fh)

    storage.save = cold_save


class NumpyLevel:
    """A plain storage level for checkpoint_schedules: a dict (RAM) or .npy files (DISK)."""

    def __init__(self, root: Path | None, cold: bool, timer: Timer) -> None:
        self.root, self.cold = root, cold
        self._ram: dict[tuple[str, int], rtm.State] = {}
        self.revisit = timer.wrap(self._revisit)
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: tuple[str, int], i: int) -> Path:
        assert self.root is not None
        return self.root / f"{key[0]}-{key[1]}-{i}.npy"

    def store(self, key: tuple[str, int], state: rtm.State) -> None:
        """Keep a copy of ``state``."""
        if self.root is None:
            self._ram[key] = tuple(a.copy() for a in state)
        else:
            for i, a in enumerate(state):
                save_npy(self._path(key, i), a, self.cold)

    def _revisit(self, key: tuple[str, int]) -> rtm.State:
        if self.root is None:
            return self._ram[key]
        return np.load(self._path(key, 0)), np.load(self._path(key, 1))

    def discard(self, key: tuple[str, int]) -> None:
        """Forget ``key``."""
        if self.root is None:
            self._ram.pop(key, None)
        else:
            for i in range(2):
                self._path(key, i).unlink(missing_ok=True)

    def hint(self, keys: Any) -> None:
        """Plain storage has nothing to prefetch with."""


# ---------------------------------------------------------------- rows
def _compute_only(b: AdjointBench, data: np.ndarray) -> dict[str, Any]:
    last: list[rtm.Array] = []
    ops = b.cfg.ops
    t0 = time.perf_counter()
    rtm.forward_pass(b.cfg, lambda n, u: last.append(u) if n == b.cfg.nt - 1 else None)
    ops.sync()
    t1 = time.perf_counter()
    fixed = last[0]
    image = rtm.backward_pass(b.cfg, data, lambda n: fixed)  # same arithmetic, no storage
    return {"forward_s": t1 - t0, "backward_s": time.perf_counter() - t1, "image": image}


def _store_load(b: AdjointBench, data: np.ndarray, store: Callable[[int, rtm.Array], object],
                load: Callable[[int], rtm.Array], timer: Timer) -> dict[str, Any]:
    calls = Timer()  # the solver's time inside the row's store and load calls
    t0 = time.perf_counter()
    rtm.forward_pass(b.cfg, calls.wrap(store))
    b.cfg.ops.sync()  # device work queued by the forward pass counts towards it
    t1 = time.perf_counter()
    image = rtm.backward_pass(b.cfg, data, calls.wrap(timer.wrap(load)))  # ends on the host
    return {"forward_s": t1 - t0, "backward_s": time.perf_counter() - t1, "image": image,
            "stall_s": timer.seconds, "calls_s": calls.seconds}


def _in_memory(b: AdjointBench, data: np.ndarray) -> dict[str, Any]:
    snaps: list[rtm.Array] = []
    return _store_load(b, data, lambda n, u: snaps.append(b.cfg.ops.clone(u)),
                       snaps.__getitem__, Timer())


def _host_memory(b: AdjointBench, data: np.ndarray) -> dict[str, Any]:
    snaps: list[rtm.Array] = []
    device = b.cfg.device
    return _store_load(b, data, lambda n, u: snaps.append(u.to("cpu", copy=True)),
                       lambda n: snaps[n].to(device), Timer())


def _numpy(b: AdjointBench, data: np.ndarray) -> dict[str, Any]:
    root = b.workdir / "npy"
    root.mkdir()
    ops = b.cfg.ops
    return _store_load(b, data, lambda n, u: save_npy(root / f"{n}.npy", ops.numpy(u), b.cold),
                       lambda n: ops.asarray(np.load(root / f"{n}.npy")), Timer())


def _tiered_cache(b: AdjointBench, sparse: bool = True, **kw: Any) -> Any:
    import tiered

    fast: list[tiered.MemoryTier] = [tiered.HostTier(b.budget_bytes)]
    if b.cfg.device is not None:
        fast.insert(0, tiered.DeviceTier(b.budget_bytes, device=b.cfg.device))
    return tiered.Cache([*fast,
                         # a history is scratch (no fsync: sync=False) and only what leaves
                         # memory is written; beyond memory with direct I/O, so the
                         # payloads never enter the page cache (or fsync + DONTNEED)
                         tiered.DirectoryTier(b.workdir / "bb", drop_pages=b.cold,
                                              direct=b.direct, sync=False, sparse=sparse)],
                        eviction="score", write_back="lazy", **kw)


def _tiered_reverse(b: AdjointBench, data: np.ndarray, sparse: bool = True) -> dict[str, Any]:
    from tiered.adapters.adjoint import Checkpointer

    cache = _tiered_cache(b, sparse, prefetch="reverse")
    ckpt = Checkpointer(cache, name="rtm")
    # read-only views of host memory, as the in-memory row hands its arrays over
    row = _store_load(b, data, ckpt.store, lambda n: ckpt.revisit(n, copy=False), Timer())
    row["stall_s"] = cache.stats().stall_s
    cache.close(drain=False)
    return row


def _bare_thread(b: AdjointBench, data: np.ndarray) -> dict[str, Any]:
    from tiered.bench.bare import BareRing

    slots = max(BareRing.DEPTH + 1, b.budget_bytes // b.cfg.snapshot_bytes)
    ring = BareRing(b.workdir / "bare", (b.cfg.nz, b.cfg.nx), np.dtype(np.float32), slots,
                    cold=b.cold, direct=b.direct)
    try:
        return _store_load(b, data, ring.store, ring.revisit, Timer())
    finally:
        ring.close()


def _snapshots(b: AdjointBench) -> tuple[int, int]:
    """Checkpoints a schedule may keep in RAM (within the budget) and on disk."""
    in_ram = max(1, b.budget_bytes // (2 * b.cfg.snapshot_bytes))  # a state is two arrays
    return in_ram, max(1, b.cfg.nt // 4)


def _schedule_row(b: AdjointBench, data: np.ndarray, storage: Any,
                  timer: Timer) -> dict[str, Any]:
    import checkpoint_schedules as cs

    from tiered.adapters.schedules import run_schedule

    src, receiver = rtm.Source(b.cfg), rtm.Receiver(b.cfg, data)

    def adjoint(adj: Any, state: rtm.State, n: int) -> Any:
        receiver.step(n, state[1])
        return adj

    in_ram, on_disk = _snapshots(b)
    res = run_schedule(cs.MultistageCheckpointSchedule(b.cfg.nt, in_ram, on_disk), storage,
                       n_steps=b.cfg.nt, state=src.initial(), forward=src.advance,
                       adjoint=adjoint, adjoint_state=None)
    return {"forward_s": res.forward_s, "backward_s": res.backward_s,
            "image": receiver.image, "stall_s": timer.seconds,
            "recomputed_steps": res.recomputed_steps}


def _schedules_numpy(b: AdjointBench, data: np.ndarray) -> dict[str, Any]:
    timer = Timer()
    levels = {"ram": NumpyLevel(None, b.cold, timer),
              "disk": NumpyLevel(b.workdir / "disk", b.cold, timer)}
    return _schedule_row(b, data, levels, timer)


def _tiered_multistage(b: AdjointBench, data: np.ndarray) -> dict[str, Any]:
    cache = _tiered_cache(b, prefetch="hinted")
    row = _schedule_row(b, data, cache, Timer())
    row["stall_s"] = cache.stats().stall_s
    cache.close(drain=False)
    return row


def _pyrevolve(b: AdjointBench, data: np.ndarray, disk: bool) -> dict[str, Any]:
    import pyrevolve

    src, receiver = rtm.Source(b.cfg), rtm.Receiver(b.cfg, data)
    live = dict(zip(("prev", "cur", "nxt", "start"),
                    (*src.initial(), *(np.zeros(src.shape, np.float32) for _ in range(2))),
                    strict=True))
    steps = [0]

    class Ckp(pyrevolve.Checkpoint):
        dtype = np.float32
        size = 2 * b.cfg.nz * b.cfg.nx

        def get_data(self, timestep: int) -> list[np.ndarray]:
            return [live["prev"], live["cur"]]

        get_data_location = get_data

    class Fwd(pyrevolve.Operator):
        def apply(self, t_start: int, t_end: int) -> None:
            for n in range(t_start, t_end):
                np.copyto(live["start"], live["cur"])  # the snapshot the adjoint step needs
                for t in range(n * b.cfg.substeps, (n + 1) * b.cfg.substeps):
                    src.advance_into(live["prev"], live["cur"], live["nxt"], t)
                    live["prev"], live["cur"], live["nxt"] = (live["cur"], live["nxt"],
                                                              live["prev"])
                steps[0] += 1

    class Rev(pyrevolve.Operator):
        def apply(self, t_start: int, t_end: int) -> None:
            receiver.step(t_start, live["start"])  # the forward just stepped past t_start

    in_ram, on_disk = _snapshots(b)
    if disk:
        rev = pyrevolve.DiskRevolver(Ckp(), Fwd(), Rev(), on_disk, b.cfg.nt,
                                     filedir=str(b.workdir) + "/")
    else:
        rev = pyrevolve.MemoryRevolver(Ckp(), Fwd(), Rev(), in_ram, b.cfg.nt)
    if disk and b.cold:
        cold_disk_storage(rev.storage_list[0])
    timer = Timer()
    rev.storage_list[0].load = timer.wrap(rev.storage_list[0].load)
    t0 = time.perf_counter()
    rev.apply_forward()
    t1 = time.perf_counter()
    rev.apply_reverse()
    return {"forward_s": t1 - t0, "backward_s": time.perf_counter() - t1,
            "image": receiver.image, "stall_s": timer.seconds,
            "recomputed_steps": steps[0] - b.cfg.nt}


RUNNERS: dict[str, Callable[[AdjointBench, np.ndarray], dict[str, Any]]] = {
    "compute-only": _compute_only, "in-memory": _in_memory, "np.save/np.load": _numpy,
    "pyrevolve-memory": lambda b, d: _pyrevolve(b, d, disk=False),
    "pyrevolve-disk": lambda b, d: _pyrevolve(b, d, disk=True),
    "schedules-multistage-numpy": _schedules_numpy, "tiered-reverse": _tiered_reverse,
    "host-memory": _host_memory,
    "tiered-reverse-dense": lambda b, d: _tiered_reverse(b, d, sparse=False),
    "tiered-multistage": _tiered_multistage, "bare-thread": _bare_thread,
}
