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


def run(sizes_mib: list[int], total_mib: int, workdir: Path | None = None,
        with_hdf5: bool = True) -> list[dict[str, Any]]:
    """One row per size and persistent tier kind."""
    rows = []
    for size in sizes_mib:
        value = filled(size * MiB)
        count = max(2, total_mib // size)
        gb = count * value.nbytes / 1e9
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            root = Path(tmp)
            kinds: list[tuple[str, Callable[[Path], Any]]] = [("directory", tiered.DirectoryTier)]
            if with_hdf5:
                kinds.append(("hdf5", tiered.HDF5Tier))
            for name, make in kinds:
                raw_s = _raw(root, value, count)
                clear_dir(root)
                tier_s = _tiered(make, root / name, value, count)
                clear_dir(root / name)
                row = {"size_mib": size, "tier": name, "values": count,
                       "raw_gbps": gb / raw_s, "tiered_gbps": gb / tier_s,
                       "ratio": raw_s / tier_s, "target_ratio": 0.9 if name == "directory"
                       else 0.8}
                if name == "hdf5":
                    naive_s = _h5py_naive(root, value, count)
                    clear_dir(root)
                    row["h5py_naive_gbps"] = gb / naive_s
                rows.append(row)
    return rows
