"""The adjoint adapter: Checkpointer, checkpoint_schedules runs, the pyrevolve storage."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import object_files, tier_combos
from tiered.adapters.adjoint import Checkpointer
from tiered.adapters.schedules import planned_reads, run_schedule

import tiered

cs = pytest.importorskip("checkpoint_schedules", reason="needs tiered[adjoint]")

N_STEPS = 23
SIZE = 2048


def forward(u: np.ndarray, n: int) -> np.ndarray:
    return np.sin(u) * 0.9 + 0.01 * n


def adjoint(adj: np.ndarray, u: np.ndarray, n: int) -> np.ndarray:
    return adj * 0.95 + np.cos(u) * (n + 1)


def initial() -> np.ndarray:
    return np.linspace(-1.0, 1.0, SIZE)


def reference(n_steps: int = N_STEPS) -> np.ndarray:
    """Keep every state in a list: the in-memory answer."""
    states = [initial()]
    for n in range(n_steps - 1):
        states.append(forward(states[-1], n))
    adj = np.zeros(SIZE)
    for n in reversed(range(n_steps)):
        adj = adjoint(adj, states[n], n)
    return adj


def host_dir(tmp_path: Path, **kw: Any) -> tiered.Cache:
    return tiered.Cache([tiered.HostTier(8 * (SIZE * 8 + 4096)),
                         tiered.DirectoryTier(tmp_path / "bb")], **kw)


def sweep(ckpt: Checkpointer, n_steps: int = N_STEPS) -> np.ndarray:
    u = initial()
    for n in range(n_steps):
        ckpt.store(n, u)
        u = forward(u, n)
    adj = np.zeros(SIZE)
    step = {"n": 0}

    def recompute(state: np.ndarray) -> np.ndarray:  # the checkpointer steps forward
        return forward(state, step["n"])

    for n in reversed(range(n_steps)):
        base = max(s for s in range(0, n + 1, ckpt.every))
        step["n"] = base  # recompute() is called for base, base + 1, ... in turn
        counter = iter(range(base, n))

        def rec(state: np.ndarray, counter: Any = counter) -> np.ndarray:
            return forward(state, next(counter))

        adj = adjoint(adj, ckpt.revisit(n, recompute=rec), n)
    return adj


# ---------------------------------------------------------------- Checkpointer
@pytest.mark.parametrize("combo", list(tier_combos()))
def test_checkpointer_over_every_tier_combination(tmp_path: Path, combo: str) -> None:
    with tiered.Cache(tier_combos()[combo](tmp_path), prefetch="reverse") as cache:
        ckpt = Checkpointer(cache)
        np.testing.assert_array_equal(sweep(ckpt), reference())
        assert ckpt.stored_steps == [] and len(cache) == 0  # consumed as read


@pytest.mark.parametrize("every", [2, 5, 23, 40])
def test_every_k_recomputes_each_segment_once(tmp_path: Path, every: int) -> None:
    with host_dir(tmp_path, prefetch="reverse") as cache:
        ckpt = Checkpointer(cache, every=every)
        np.testing.assert_array_equal(sweep(ckpt), reference())
        segments = [min(s + every, N_STEPS) - s for s in range(0, N_STEPS, every)]
        assert ckpt.recomputed_steps == sum(length - 1 for length in segments)


def test_several_sweeps_and_consumed_states_are_freed(tmp_path: Path) -> None:
    with host_dir(tmp_path, eviction="score", prefetch="reverse") as cache:
        ckpt = Checkpointer(cache, every=3)
        for _ in range(3):  # an optimisation loop: forward, backward, again
            np.testing.assert_array_equal(sweep(ckpt), reference())
        cache.flush()
        # a state discarded while its drain was writing is freed when that write ends
        deadline = time.monotonic() + 20
        def settled() -> bool:  # a deletion renames the file aside, then empties it
            return not (cache.stats().tiers["host"].used_bytes or object_files(tmp_path / "bb")
                        or any(p.stat().st_size for p in (tmp_path / "bb").iterdir()))

        while not settled() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cache.stats().tiers["host"].used_bytes == 0
        assert not object_files(tmp_path / "bb")  # discarded files are gone
        # or kept, emptied, to be written into again: their bytes are freed all the same
        assert all(p.stat().st_size == 0 for p in (tmp_path / "bb").iterdir())


def test_out_of_order_and_repeated_stores(tmp_path: Path) -> None:
    """Steps stored in any order, some twice, are held once each and found by position."""
    with host_dir(tmp_path, prefetch="reverse") as cache:
        ckpt = Checkpointer(cache, every=4)
        states = {n: np.full(SIZE, float(n)) for n in (12, 0, 8, 4)}
        for n, value in states.items():
            ckpt.store(n, value)
        ckpt.store(8, states[8] + 0.5)  # a re-store replaces, it is not held twice
        assert ckpt.stored_steps == [0, 4, 8, 12]
        plus_one = ckpt.revisit(10, recompute=lambda u: u + 1.0)  # from 8, the nearest below
        np.testing.assert_array_equal(plus_one, np.full(SIZE, 10.5))
        assert ckpt.recomputed_steps == 2 and ckpt.stored_steps == [0, 4, 8, 9, 12]
        np.testing.assert_array_equal(ckpt.revisit(12), states[12])
        ckpt.discard(4)
        ckpt.discard(5)  # never stored: nothing to do
        assert ckpt.stored_steps == [0, 8, 9]
        np.testing.assert_array_equal(ckpt.revisit(6, recompute=lambda u: u + 1.0),
                                      np.full(SIZE, 6.0))  # from 0 now that 4 is gone
        assert ckpt.stored_steps == [0, 1, 2, 3, 4, 5, 8, 9]


def test_revisit_of_a_step_never_stored(tmp_path: Path) -> None:
    with host_dir(tmp_path) as cache:
        ckpt = Checkpointer(cache, every=4)
        ckpt.store(4, initial())
        with pytest.raises(KeyError, match=r"step 2 is not held .* \(stored: \[4\]\)"):
            ckpt.revisit(2)
        with pytest.raises(KeyError, match="pass recompute="):
            ckpt.revisit(6)
        with pytest.raises(ValueError, match="every must be a positive integer"):
            Checkpointer(cache, every=0)
        with pytest.raises(ValueError, match="step must be a non-negative integer"):
            ckpt.store(-1, initial())
        many = Checkpointer(cache, name="many")
        for n in range(5, 16):
            many.store(n, initial())
        many.revisit(5)  # consumed: no longer held
        with pytest.raises(KeyError, match=r"step 5 is not held .*"
                                           r"\(stored: \[6, 7, 8, 9, 10, 11, 12, 13, \.\.\.\]\)"):
            many.revisit(5)


# ---------------------------------------------------------------- checkpoint_schedules
def schedules() -> dict[str, Any]:
    return {
        "revolve": lambda: cs.Revolve(N_STEPS, 3),
        "hrevolve": lambda: cs.HRevolve(N_STEPS, 2, 3),
        "multistage": lambda: cs.MultistageCheckpointSchedule(N_STEPS, 2, 3),
        "mixed": lambda: cs.MixedCheckpointSchedule(N_STEPS, 4),
        "disk-revolve": lambda: cs.DiskRevolve(N_STEPS, 3),
        "periodic-disk-revolve": lambda: cs.PeriodicDiskRevolve(N_STEPS, 3),
        "two-level": lambda: cs.TwoLevelCheckpointSchedule(5, 2),
        "single-memory": lambda: cs.SingleMemoryStorageSchedule(),
        "single-disk": lambda: cs.SingleDiskStorageSchedule(),
    }


@pytest.mark.filterwarnings("ignore:Numba not available")
@pytest.mark.parametrize("name", list(schedules()))
def test_every_schedule_matches_the_in_memory_run(tmp_path: Path, name: str) -> None:
    schedule = schedules()[name]()
    plan = planned_reads(schedule, N_STEPS)
    with host_dir(tmp_path, prefetch="hinted") as cache:
        res = run_schedule(schedule, cache, n_steps=N_STEPS, state=initial(),
                           forward=forward, adjoint=adjoint, adjoint_state=np.zeros(SIZE))
    np.testing.assert_array_equal(res.adjoint, reference())
    assert res.reads == plan  # the hints were the order the schedule really read
    assert res.forward_steps == N_STEPS + res.recomputed_steps


@pytest.mark.filterwarnings("ignore:Numba not available")
def test_levels_on_their_own_caches(tmp_path: Path) -> None:
    ram = tiered.Cache([tiered.HostTier("4MiB")])
    disk = tiered.Cache([tiered.HostTier("1MiB"), tiered.HDF5Tier(tmp_path / "pfs")])
    res = run_schedule(cs.MultistageCheckpointSchedule(N_STEPS, 2, 3),
                       {"ram": ram, "disk": disk}, n_steps=N_STEPS, state=initial(),
                       forward=forward, adjoint=adjoint, adjoint_state=np.zeros(SIZE))
    np.testing.assert_array_equal(res.adjoint, reference())
    assert {lvl for lvl, _ in res.reads} == {"ram", "disk"}
    assert disk.stats().stores > 0 and ram.stats().stores > 0  # each level in its cache
    assert disk.stats().tiers["hdf5"].capacity_bytes is None
    ram.close()
    disk.close()


def test_planned_reads_needs_a_fresh_schedule() -> None:
    schedule = cs.Revolve(N_STEPS, 3)
    next(iter(schedule))
    with pytest.raises(ValueError, match="already yielded"):
        planned_reads(schedule, N_STEPS)
    with pytest.raises(ValueError, match="lacks"):
        run_schedule(copy.deepcopy(cs.Revolve(N_STEPS, 3)), {"ram": None},  # type: ignore
                     n_steps=N_STEPS, state=initial(), forward=forward, adjoint=adjoint,
                     adjoint_state=np.zeros(SIZE))


# ---------------------------------------------------------------- pyrevolve
class _Live:
    """pyrevolve's view of the solver: the live state, the forward and reverse operators."""

    def __init__(self) -> None:
        self.u = initial()
        self.last = self.u.copy()
        self.adj = np.zeros(SIZE)


def _revolver(live: _Live, n_checkpoints: int) -> Any:
    pyrevolve = pytest.importorskip("pyrevolve", reason="needs tiered[adjoint]")

    class Ckp(pyrevolve.Checkpoint):
        dtype = np.float64
        size = SIZE

        def get_data(self, timestep: int) -> list[np.ndarray]:
            return [live.u]

        def get_data_location(self, timestep: int) -> list[np.ndarray]:
            return [live.u]

    class Fwd(pyrevolve.Operator):
        def apply(self, t_start: int, t_end: int) -> None:
            for n in range(t_start, t_end):
                live.last = live.u.copy()  # the state at the start of step n
                live.u[:] = forward(live.u, n)

    class Rev(pyrevolve.Operator):
        def apply(self, t_start: int, t_end: int) -> None:
            live.adj = adjoint(live.adj, live.last, t_start)

    return pyrevolve.Revolver(Ckp(), Fwd(), Rev(), n_checkpoints, N_STEPS)


def test_pyrevolve_storage_round_trip(tmp_path: Path) -> None:
    from tiered.adapters.revolve import use_tiered

    plain = _Live()
    rev = _revolver(plain, 4)
    rev.apply_forward()
    rev.apply_reverse()
    np.testing.assert_array_equal(plain.adj, reference())  # pyrevolve's own storage
    mine = _Live()
    rev = _revolver(mine, 4)
    with host_dir(tmp_path, prefetch="reverse") as cache:
        use_tiered(rev, cache)
        rev.apply_forward()
        rev.apply_reverse()
        stats = cache.stats()
    np.testing.assert_array_equal(mine.adj, plain.adj)
    assert stats.stores >= 4 and stats.revisits >= 4


class _FailingDirectory(tiered.DirectoryTier):
    """A real directory tier whose writes fail once ``fail`` is set (a full disk)."""

    fail = False

    def put(self, *args: Any, **kw: Any) -> Any:
        if self.fail:
            raise OSError(28, "No space left on device")
        return super().put(*args, **kw)


def test_a_background_error_leaves_the_checkpointer_and_cache_agreeing(
        tmp_path: Path) -> None:
    """The cache's discard raises first and does nothing: the adapter keeps the step too."""
    directory = _FailingDirectory(tmp_path / "bb")
    cache = tiered.Cache([tiered.HostTier("8MiB"), directory])
    ckpt = Checkpointer(cache)
    for s in range(4):
        ckpt.store(s, np.full(1000, float(s)))
    cache.flush()
    directory.fail = True
    ckpt.store(4, np.full(1000, 4.0))  # its drain fails in the background
    deadline = time.monotonic() + 10
    while cache.stats().background_errors == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(tiered.BackgroundError):
        ckpt.revisit(4)  # the hint raises it: nothing else happened
    assert ckpt.stored_steps == [0, 1, 2, 3, 4]
    value = ckpt.revisit(4)  # the hint goes through now; the revisit and discard too
    np.testing.assert_array_equal(value, np.full(1000, 4.0))
    assert ckpt.stored_steps == [0, 1, 2, 3] and len(cache) == 4
    ckpt.store(4, np.full(1000, 4.5))  # fails to drain again
    deadline = time.monotonic() + 10
    while cache.stats().background_errors < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(tiered.BackgroundError):
        ckpt.discard(3)  # raised by the cache's discard, which did nothing
    assert ckpt.stored_steps == [0, 1, 2, 3, 4] and len(cache) == 5
    ckpt.discard(3)
    assert ckpt.stored_steps == [0, 1, 2, 4] and len(cache) == 4
    cache.close(drain=False)


def test_use_tiered_keeps_a_compressors_own_metadata(tmp_path: Path) -> None:
    """A compressor that records more than shape and dtype (blosc: its chunk sizes)."""
    import zlib

    pyrevolve = pytest.importorskip("pyrevolve", reason="needs tiered[adjoint]")
    from adjoint_models import Solver
    from pyrevolve.compression import CompressedObject
    from tiered.adapters.revolve import use_tiered

    chunk = 1000

    def compress(params: Any, data: np.ndarray) -> Any:
        raw = np.ascontiguousarray(data).tobytes()
        parts = [zlib.compress(raw[i:i + chunk]) for i in range(0, len(raw), chunk)]
        return CompressedObject(b"".join(parts), metadata={
            "shape": data.shape, "dtype": data.dtype, "chunks": [len(p) for p in parts]})

    def decompress(params: Any, obj: Any) -> np.ndarray:
        out, at = b"", 0
        for n in obj.metadata["chunks"]:
            out += zlib.decompress(bytes(obj.data[at:at + n]))
            at += n
        return np.frombuffer(out, dtype=obj.dtype).reshape(obj.shape)

    params = {"scheme": "custom", "compressor": compress, "decompressor": decompress}
    runs = []
    for through_tiered in (False, True):
        solver = Solver(pad=64)
        revolver = pyrevolve.Revolver(*solver.pyrevolve_parts(), 3, 10,
                                      compression_params=params)
        with tiered.Cache([tiered.HostTier("4MiB"), tiered.DirectoryTier(tmp_path / "bb")],
                          prefetch="reverse") as cache:
            if through_tiered:
                use_tiered(revolver, cache)
            revolver.apply_forward()
            revolver.apply_reverse()
        runs.append(solver.adj)
    np.testing.assert_array_equal(runs[1], runs[0])
