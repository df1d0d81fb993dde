"""``tiered bench interference``: how much background draining slows foreground compute."""

from __future__ import annotations

import functools
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tiered
from tiered.bench.common import MiB, filled
from tiered.console import progress

MIN_LOOPS = 8  # compute runs the background work must outlast for a median to mean much
MAX_BYTES = 4 << 30  # the most data one measurement writes (and holds in its host tier)


def numpy_loop(iterations: int) -> Callable[[], None]:
    """Elementwise numpy work (releases the GIL) on a cache-resident array."""
    a = np.random.default_rng(0).standard_normal(1 << 16)
    b = np.empty_like(a)

    def run() -> None:
        for _ in range(iterations):
            np.multiply(a, 1.0000001, out=b)
            np.add(b, a, out=b)
            np.sqrt(np.abs(b, out=b), out=b)

    return run


def python_loop(iterations: int) -> Callable[[], None]:
    """Pure-Python work: it needs the GIL all the time."""
    def run() -> None:
        total = 0
        for i in range(iterations):
            total += i * i % 7
    return run


def _timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _while(busy: Callable[[], bool], fn: Callable[[], None]) -> list[float]:
    """Time ``fn`` over and over while ``busy()`` holds (the last run may end after it)."""
    times = []
    while busy():
        times.append(_timed(fn))
    return times


def _under_tiered(fn: Callable[[], None], hdf5: bool, root: Path,
                  values: list[np.ndarray]) -> list[float]:
    tier: tiered.PersistentTier = (tiered.HDF5Tier(root / "pfs") if hdf5
                                   else tiered.DirectoryTier(root / "bb"))
    cache = tiered.Cache([tiered.HostTier(sum(v.nbytes + 4096 for v in values) + MiB), tier])
    for i, v in enumerate(values):
        cache.store(i, v)
    total = sum(v.nbytes for v in values)

    def draining() -> bool:
        stats = cache.stats()
        if stats.background_errors:
            raise RuntimeError(f"the drain into {tier.name} failed: see the log")
        return stats.tiers[tier.name].bytes_in < total

    times = _while(draining, fn)
    cache.close()
    return times


def _under_h5py_thread(fn: Callable[[], None], root: Path,
                       values: list[np.ndarray]) -> list[float]:
    import h5py

    def write() -> None:
        for i, v in enumerate(values):
            path = root / f"peer-{i}.h5"
            with h5py.File(path, "w") as f:
                f.create_dataset("x", data=v)
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)

    thread = threading.Thread(target=write)
    thread.start()
    times = _while(thread.is_alive, fn)
    thread.join()
    return times


def _calibrate(make: Callable[[int], Callable[[], None]], seconds: float) -> Callable[[], None]:
    n = 1000
    while _timed(make(n)) < seconds / 4:
        n *= 2
    return make(int(n * seconds / _timed(make(n))))


Measure = Callable[[Path, list[np.ndarray]], list[float]]


def _loaded(measure: Measure, value: np.ndarray, count: int, least: int,
            workdir: Path | None) -> tuple[list[float], int]:
    """Run ``measure`` over ``count`` values, more each time, until ``least`` loops fit.

    A drain that fitted ``k`` loops is given ``1.5 * least / k`` times the values (8 times
    if none fitted), up to :data:`MAX_BYTES`. Each attempt writes into a fresh directory
    (a cache opened over the last one's files would be a restart).
    """
    while True:
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            times = measure(Path(tmp), [value] * count)
        if len(times) >= least:
            return times, count
        if count * value.nbytes >= MAX_BYTES:
            raise RuntimeError(f"{count * value.nbytes >> 20} MiB drained before {least} "
                               "compute loops ended: the disk is faster than this benchmark "
                               "can keep busy")
        grow = 8.0 if not times else max(2.0, 1.5 * least / len(times))
        count = min(int(count * grow) + 1, max(1, MAX_BYTES // value.nbytes))


def run(total_mib: int, value_mib: int, seconds: float,
        workdir: Path | None = None) -> list[dict[str, Any]]:
    """One row per foreground loop and background writer.

    The loop is cut into runs of ``seconds / 20``; the slowdown compares the median run
    while the background writes with the median run alone. The data written starts at
    ``total_mib`` and doubles until at least :data:`MIN_LOOPS` runs fit inside the drain,
    so the benchmark sizes itself to the disk it runs on.
    """
    value = filled(value_mib * MiB)
    count = max(1, total_mib // value_mib)
    rows = []
    for loop_name, make in progress((("numpy", numpy_loop), ("python", python_loop)),
                                    "interference"):
        fn = _calibrate(make, seconds / 20)
        alone = statistics.median(_timed(fn) for _ in range(MIN_LOOPS))
        backgrounds: list[tuple[str, Measure]] = [
            ("tiered-directory", functools.partial(_under_tiered, fn, False)),
            ("tiered-hdf5", functools.partial(_under_tiered, fn, True)),
            ("h5py-thread (peer)", functools.partial(_under_h5py_thread, fn))]
        for bg, measure in backgrounds:
            times, count = _loaded(measure, value, count, MIN_LOOPS, workdir)
            loaded = statistics.median(times)
            rows.append({"loop": loop_name, "background": bg, "alone_s": alone,
                         "loaded_s": loaded, "slowdown": loaded / alone - 1.0,
                         "loops": len(times), "written_mib": count * value_mib,
                         "target_slowdown": 0.10 if bg.startswith("tiered") else None})
    return rows
