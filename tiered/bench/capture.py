"""``tiered bench capture``: ``store`` blocking time vs ``np.copyto`` into a preallocated buffer."""

from __future__ import annotations

import functools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import tiered
from tiered.bench.common import MiB, filled, median_time
from tiered.console import progress


def _store_times(cache: tiered.Cache, value: np.ndarray, repeat: int, *,
                 flush_between: bool) -> list[float]:
    times = []
    for i in range(repeat):
        started = time.perf_counter()
        cache.store(("cap", i), value)
        times.append(time.perf_counter() - started)
        if flush_between:
            cache.flush()
    return times


def _rotating_copy_s(value: np.ndarray, repeat: int) -> float:
    """Median ``np.copyto`` time into ``repeat`` distinct pre-faulted buffers, one per call.

    A history keeper writes each state to a new place, so its destination is never warm in
    the CPU cache; copying into one reused buffer of a few MiB is a cache-resident copy.
    """
    pool = np.empty((repeat, value.size), dtype=value.dtype)
    pool.fill(0)  # fault every page in now, as the host tier does at start
    calls = iter(range(repeat))
    return median_time(lambda: np.copyto(pool[next(calls)], value), repeat)


def run(sizes_mib: list[int], repeat: int, workdir: Path | None = None) -> list[dict[str, Any]]:
    """Measure each size; one row per size."""
    rows = []
    for size in progress(sizes_mib, "capture"):
        nbytes = size * MiB
        value = filled(nbytes)
        dst = np.empty_like(value)
        dst.fill(0)  # pre-fault the baseline's buffer, as the host tier pre-faults its own
        copy_s = median_time(functools.partial(np.copyto, dst, value), repeat)
        rotating_s = _rotating_copy_s(value, repeat)
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            cache = tiered.Cache([tiered.HostTier((repeat + 1) * nbytes + MiB),
                                  tiered.DirectoryTier(Path(tmp) / "bb")])
            idle = statistics.median(_store_times(cache, value, repeat, flush_between=True))
            for key in cache.keys():
                cache.discard(key)
            busy = statistics.median(_store_times(cache, value, repeat, flush_between=False))
            cache.close()
        rows.append({"size_mib": size, "copyto_s": copy_s, "store_s": idle,
                     "ratio": idle / copy_s, "copyto_rotating_s": rotating_s,
                     "ratio_vs_rotating": idle / rotating_s, "store_while_draining_s": busy,
                     "ratio_while_draining": busy / copy_s, "target_ratio": 1.2})
    return rows
