"""``tiered bench revisit``: backward-pass stall with and without prefetching, and trace hits.

A forward pass stores N states (more than the host tier holds), everything is made durable,
and the files' pages are dropped from the OS page cache (``posix_fadvise(DONTNEED)``) so
that reads really come from the device. The backward pass then revisits the states in
reverse with a compute kernel (numpy, GIL released) between revisits, sized from the
measured cold read time of one state so that compute ≈ I/O per step. Every configuration
runs in the same process on the same files' sizes, one after another.
"""

from __future__ import annotations

import dataclasses
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

import tiered
from tiered.bench.common import MiB, filled, median_time, write_fsync
from tiered.bench.interference import numpy_loop
from tiered.console import progress
from tiered.replay import Op, Replay

CONFIGS: list[tuple[str, str, Any, bool]] = [  # name, eviction, prefetch, hint the order
    ("no-prefetch", "lru", None, False),
    ("lru+reverse", "lru", "reverse", False),
    ("score+reverse", "score", "reverse", False),
    ("belady+hinted", "belady", "hinted", True),
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RevisitConfig:
    """Problem size: ``states`` values of ``state_mib``; the host tier holds a fraction."""

    states: int = 64
    state_mib: int = 16
    host_fraction: float = 0.25
    compute_ratio: float = 1.2  # compute per step / cold read per step


def drop_cache(root: Path) -> None:
    """Drop the page-cache pages of every file under ``root`` (they are fsync'd already)."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _cold_read_s(root: Path, value: np.ndarray) -> float:
    """Median time to read one state's file after its pages were dropped."""
    probe = root / "probe"
    probe.mkdir()
    for i in range(5):
        write_fsync(probe / f"{i}.bin", value)
    drop_cache(probe)
    out = np.empty_like(value)
    files = iter(sorted(probe.iterdir()))

    def read() -> None:
        with open(next(files), "rb", buffering=0) as fh:
            fh.readinto(memoryview(out).cast("B"))  # type: ignore[arg-type]

    return median_time(read, 5)


def _kernel(seconds: float) -> Callable[[], None]:
    """Return a GIL-releasing numpy kernel calibrated to take about ``seconds``."""
    per = median_time(numpy_loop(20), 5) / 20
    return numpy_loop(max(1, round(seconds / per)))


def _backward(states: int, load: Callable[[int], np.ndarray],
              kernel: Callable[[], None]) -> tuple[float, list[float]]:
    """Run the backward sweep; return its wall seconds and the seconds in each ``load``.

    The loads are listed in the order they ran (the last state first).
    """
    acc = 0.0
    loads: list[float] = []
    started = time.perf_counter()
    for step in reversed(range(states)):
        t = time.perf_counter()
        value = load(step)
        loads.append(time.perf_counter() - t)
        acc += float(value[0])
        kernel()
    return time.perf_counter() - started, loads


def _tiered_row(cfg: RevisitConfig, value: np.ndarray, root: Path, kernel: Callable[[], None],
                eviction: str, prefetch: Any, hint: bool) -> dict[str, Any]:
    host = int(cfg.host_fraction * cfg.states) * (value.nbytes + 4096)
    cache = tiered.Cache([tiered.HostTier(host), tiered.DirectoryTier(root / "bb")],
                         eviction=eviction, prefetch=prefetch)
    for step in range(cfg.states):
        cache.store(step, value)
    cache.flush()
    drop_cache(root / "bb")
    if hint:
        cache.hint(reversed(range(cfg.states)))
    buf = np.empty_like(value)
    buf.fill(0)  # the solver's own pre-faulted buffer: revisit(out=) copies into it
    wall, loads = _backward(cfg.states, lambda s: cache.revisit(s, out=buf), kernel)
    s = cache.stats()
    cache.close(drain=False)
    return {"backward_s": wall, "revisit_s": sum(loads), "revisit_step_s": loads,
            "stall_s": s.stall_s,
            "host_hits": s.tiers["host"].hits, "prefetch_hits": s.prefetch_hits,
            "late_prefetches": s.late_prefetches, "wasted_prefetches": s.wasted_prefetches}


def _numpy_row(cfg: RevisitConfig, value: np.ndarray, root: Path,
               kernel: Callable[[], None]) -> dict[str, Any]:
    folder = root / "npy"
    folder.mkdir()
    for step in range(cfg.states):
        with open(folder / f"{step}.npy", "wb") as fh:
            np.save(fh, value)
            fh.flush()
            os.fsync(fh.fileno())
    drop_cache(folder)
    wall, loads = _backward(cfg.states, lambda s: np.load(folder / f"{s}.npy"), kernel)
    return {"backward_s": wall, "revisit_s": sum(loads), "revisit_step_s": loads,
            "stall_s": sum(loads)}


def _clear(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()


def run(cfg: RevisitConfig, workdir: Path | None = None) -> list[dict[str, Any]]:
    """One row per configuration, plus the compute-only limit."""
    value = filled(cfg.state_mib * MiB)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp)
        read_s = _cold_read_s(root, value)
        _clear(root)
        kernel = _kernel(cfg.compute_ratio * read_s)
        compute_s = median_time(kernel, 5) * cfg.states
        io_s = read_s * cfg.states
        bound = max(compute_s, io_s)
        rows.append({"name": "compute-only", "backward_s": compute_s, "stall_s": 0.0})
        rows.append({"name": "np.load", **_numpy_row(cfg, value, root, kernel)})
        _clear(root)
        for name, eviction, prefetch, hint in progress(CONFIGS, "revisit"):
            rows.append({"name": name, **_tiered_row(cfg, value, root, kernel, eviction,
                                                     prefetch, hint)})
            _clear(root)
    base = next(r for r in rows if r["name"] == "no-prefetch")["stall_s"]
    for row in rows:
        row.update(states=cfg.states, state_mib=cfg.state_mib, compute_s=compute_s,
                   io_s=io_s, vs_bound=row["backward_s"] / bound,
                   overhead_s=row["backward_s"] - compute_s,
                   vs_compute=row["backward_s"] / compute_s,
                   stall_share=row["stall_s"] / row["backward_s"],
                   stall_reduction=base / row["stall_s"] if row["stall_s"] else float("inf"))
    return rows


# ---------------------------------------------------------------- trace mode
def patterns(n: int, seed: int = 0) -> dict[str, list[int]]:
    """Revisit orders over ``n`` stored keys."""
    rng = random.Random(seed)
    return {"ascending": list(range(n)), "reverse": list(reversed(range(n))),
            "strided": [k for s in range(4) for k in range(s, n, 4)],
            "random": [rng.randrange(n) for _ in range(n)]}


TRACE_POLICIES: list[tuple[str, Literal[False] | str]] = [
    ("lru", False), ("lru", "reverse"), ("score", "reverse"), ("score", "auto"),
    ("belady", "auto")]


def run_trace(n: int = 256, capacity: int = 32) -> list[dict[str, Any]]:
    """Hit rate of each policy pair on each pattern (inline replay, deterministic)."""
    rows = []
    for pattern, order in progress(patterns(n).items(), "trace"):
        ops: list[Op] = [("store", k) for k in range(n)] + [("revisit", k) for k in order]
        for eviction, prefetch in TRACE_POLICIES:
            res = Replay(capacity, eviction=eviction, prefetch=prefetch).run(ops)
            rows.append({"pattern": pattern, "eviction": eviction,
                         "prefetch": prefetch or "none", "hit_rate": res.hit_rate,
                         "prefetch_hits": res.prefetch_hits,
                         "wasted_prefetches": res.wasted_prefetches})
    return rows
