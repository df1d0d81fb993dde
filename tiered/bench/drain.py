"""``tiered bench drain``: background drain throughput vs raw write+fsync, same directory."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tiered
from tiered.bench.common import MiB, clear_dir, filled, write_fsync
from tiered.console import progress


def _raw(root: Path, value: np.ndarray, count: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        write_fsync(root / f"raw-{i}.bin", value)
    return time.perf_counter() - started


def _h5py_naive(root: Path, value: np.ndarray, count: int) -> float:
    import h5py

    started = time.perf_counter()
    for i in range(count):
        path = root / f"naive-{i}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=value)
        with open(path, "rb+") as fh:
            import os

            os.fsync(fh.fileno())
    return time.perf_counter() - started


def _tiered(make_tier: Callable[[Path], tiered.PersistentTier], root: Path, value: np.ndarray,
            count: int) -> float:
    cache = tiered.Cache([tiered.HostTier(count * (value.nbytes + 4096) + MiB),
                          make_tier(root)])
    started = time.perf_counter()
    for i in range(count):
        cache.store(i, value)
    cache.flush()
    elapsed = time.perf_counter() - started
    cache.close()
    return elapsed


def _rounds(fns: list[Callable[[], float]], rounds: int) -> list[float]:
    """Median seconds of each of ``fns``, run interleaved ``rounds`` times.

    The disk here is shared: its bandwidth moves by several times within a minute, so the
    contenders alternate and the medians are compared, never one run against another.
    """
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for slot, fn in zip(times, fns, strict=True):
            slot.append(fn())
    return [float(np.median(t)) for t in times]


def _measure(name: str, make: Callable[[Path], Any], root: Path, value: np.ndarray, count: int,
             rounds: int) -> list[float]:
    def raw() -> float:
        elapsed = _raw(root, value, count)
        clear_dir(root)
        return elapsed

    def mine() -> float:
        elapsed = _tiered(make, root / name, value, count)
        clear_dir(root / name)
        return elapsed

    def naive() -> float:
        elapsed = _h5py_naive(root, value, count)
        clear_dir(root)
        return elapsed

    return _rounds([raw, mine, naive] if name == "hdf5" else [raw, mine], rounds)


def run(sizes_mib: list[int], total_mib: int, workdir: Path | None = None,
        with_hdf5: bool = True, rounds: int = 3) -> list[dict[str, Any]]:
    """One row per size and persistent tier kind (medians of interleaved rounds)."""
    rows = []
    for size in progress(sizes_mib, "drain"):
        value = filled(size * MiB)
        count = max(2, total_mib // size)
        gb = count * value.nbytes / 1e9
        kinds: list[tuple[str, Callable[[Path], Any]]] = [("directory", tiered.DirectoryTier)]
        if with_hdf5:
            kinds.append(("hdf5", tiered.HDF5Tier))
        for name, make in kinds:
            with tempfile.TemporaryDirectory(dir=workdir) as tmp:
                times = _measure(name, make, Path(tmp), value, count, rounds)
            raw_s, tier_s = times[0], times[1]
            row = {"size_mib": size, "tier": name, "values": count, "rounds": rounds,
                   "raw_gbps": gb / raw_s, "tiered_gbps": gb / tier_s, "ratio": raw_s / tier_s,
                   "target_ratio": 0.9 if name == "directory" else 0.8}
            if name == "hdf5":
                row["h5py_naive_gbps"] = gb / times[2]
            rows.append(row)
    return rows
