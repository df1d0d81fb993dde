"""``tiered bench interference``: how much background draining slows foreground compute."""

from __future__ import annotations

import functools
import os
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


def _under_tiered(fn: Callable[[], None], root: Path, values: list[np.ndarray],
                  hdf5: bool) -> float:
    tier: tiered.PersistentTier = (tiered.HDF5Tier(root / "pfs") if hdf5
                                   else tiered.DirectoryTier(root / "bb"))
    cache = tiered.Cache([tiered.HostTier(sum(v.nbytes + 4096 for v in values) + MiB), tier])
    for i, v in enumerate(values):
        cache.store(i, v)
    elapsed = _timed(fn)  # runs while the lanes drain
    busy = any(e.drain is not None for e in list(cache._index.values()))
    cache.close()
    if not busy:
        raise RuntimeError("the drain finished before the compute loop: raise --total-mib")
    return elapsed


def _under_h5py_thread(fn: Callable[[], None], root: Path, values: list[np.ndarray]) -> float:
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
    elapsed = _timed(fn)
    thread.join()
    return elapsed


def _calibrate(make: Callable[[int], Callable[[], None]], seconds: float) -> Callable[[], None]:
    n = 1000
    while _timed(make(n)) < seconds / 4:
        n *= 2
    return make(int(n * seconds / _timed(make(n))))


def run(total_mib: int, value_mib: int, seconds: float,
        workdir: Path | None = None) -> list[dict[str, Any]]:
    """One row per foreground loop and background writer."""
    values = [filled(value_mib * MiB, seed=i) for i in range(max(1, total_mib // value_mib))]
    rows = []
    for loop_name, make in progress((("numpy", numpy_loop), ("python", python_loop)),
                                    "interference"):
        fn = _calibrate(make, seconds)
        alone = min(_timed(fn) for _ in range(3))
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            root = Path(tmp)
            for bg, measure in (
                ("tiered-directory", functools.partial(_under_tiered, fn, root, values, False)),
                ("tiered-hdf5", functools.partial(_under_tiered, fn, root, values, True)),
                ("h5py-thread (peer)", functools.partial(_under_h5py_thread, fn, root, values)),
            ):
                loaded = measure()
                rows.append({"loop": loop_name, "background": bg, "alone_s": alone,
                             "loaded_s": loaded, "slowdown": loaded / alone - 1.0,
                             "target_slowdown": 0.10 if bg.startswith("tiered") else None})
    return rows
