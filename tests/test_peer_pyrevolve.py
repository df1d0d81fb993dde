"""pyrevolve's own test patterns, run with the revolvers' storage in a tiered cache.

Every revolver pyrevolve 2.2.8 offers (single-level in memory and on disk, multi-level
H-Revolve) runs a small grid of (time steps, checkpoints) twice: with pyrevolve's in-memory
storage and with ``use_tiered`` over host memory small enough that checkpoints come back
from the directory and HDF5 tiers. The tiered run must make the same operator calls, the
same saves and loads at the same time steps, and the same adjoint, bit for bit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from adjoint_models import Solver, reference
from tiered.adapters.revolve import use_tiered

import tiered

pyrevolve = pytest.importorskip("pyrevolve", reason="needs tiered[adjoint]")

# (time steps, checkpoints): fewer checkpoints than steps, about as many, more
GRID = [(1, 1), (2, 1), (10, 2), (10, 4), (10, 9), (10, 12), (23, 3)]
# (time steps, memory checkpoints, disk checkpoints) for H-Revolve's two levels
LEVELS = [(1, 1, 1), (5, 1, 2), (10, 1, 3), (20, 2, 4), (23, 3, 6)]


def cache_over(tmp_path: Path) -> tiered.Cache:
    """Host memory for four 4 KiB checkpoints; the rest drain to a directory and HDF5."""
    return tiered.Cache([tiered.HostTier("32KiB", prefault=False),
                         tiered.DirectoryTier(tmp_path / "bb", sync=False),
                         tiered.HDF5Tier(tmp_path / "pfs", sync=False)],
                        prefetch="reverse", full_timeout_s=5)


def single_level(kind: str, solver: Solver, n_ckp: int, n_steps: int,
                 tmp_path: Path) -> Any:
    parts = solver.pyrevolve_parts()
    if kind == "memory":
        return pyrevolve.Revolver(*parts, n_ckp, n_steps)
    if kind == "memory-class":
        return pyrevolve.MemoryRevolver(*parts, n_ckp, n_steps)
    if kind == "disk":  # pyrevolve's .dat files, which use_tiered replaces
        return pyrevolve.DiskRevolver(*parts, n_ckp, n_steps, filedir=f"{tmp_path}/",
                                      singlefile=True)
    if kind == "disk-files":
        return pyrevolve.SingleLevelRevolver(*parts, n_ckp, n_steps, diskstorage=True,
                                             filedir=f"{tmp_path}/", singlefile=False)
    raise AssertionError(kind)


def run(revolver: Any, solver: Solver) -> int:
    """Run forward and reverse; return the saves the forward sweep made."""
    revolver.apply_forward()
    saves = len(solver.saves)
    revolver.apply_reverse()
    return saves


def run_tiered(revolver: Any, solver: Solver, tmp_path: Path) -> tiered.CacheStats:
    replaced = list(revolver.storage_list)
    try:
        with cache_over(tmp_path) as cache:
            use_tiered(revolver, cache)
            run(revolver, solver)
            return cache.stats()
    finally:  # pyrevolve's DiskStorage never closes its .dat file handles itself
        for storage in replaced:
            for handle in (getattr(storage, "storage_w", None),
                           getattr(storage, "storage_r", None)):
                if handle is not None:
                    handle.close()


def check_same_run(mine: Solver, plain: Solver, stats: tiered.CacheStats,
                   n_steps: int) -> None:
    np.testing.assert_array_equal(plain.adj, reference(n_steps))  # the model itself
    np.testing.assert_array_equal(mine.adj, plain.adj)
    assert mine.counts() == plain.counts()  # operator steps, saves and loads, by time step
    assert mine.reverse_steps == n_steps
    assert stats.stores == len(mine.saves)  # each save went into the cache...
    assert stats.revisits == len(mine.loads)  # ...and each load came out of it


@pytest.mark.parametrize("kind", ["memory", "memory-class", "disk", "disk-files"])
@pytest.mark.parametrize(("n_steps", "n_ckp"), GRID)
def test_single_level_revolver_matches_pyrevolves_storage(tmp_path: Path, kind: str,
                                                          n_steps: int, n_ckp: int) -> None:
    plain = Solver()
    forward_saves = run(pyrevolve.Revolver(*plain.pyrevolve_parts(), n_ckp, n_steps), plain)
    assert forward_saves == min(n_ckp, n_steps - 1)  # as pyrevolve's own tests count
    mine = Solver()
    stats = run_tiered(single_level(kind, mine, n_ckp, n_steps, tmp_path), mine, tmp_path)
    check_same_run(mine, plain, stats, n_steps)


@pytest.mark.parametrize(("n_steps", "ram", "disk"), LEVELS)
def test_multilevel_revolver_matches_pyrevolves_storage(tmp_path: Path, n_steps: int,
                                                        ram: int, disk: int) -> None:
    def revolver(solver: Solver) -> Any:
        ckp, fwd, rev = solver.pyrevolve_parts()
        profiler = pyrevolve.Profiler()
        levels = [pyrevolve.NumpyStorage(ckp.size, ram, ckp.dtype, profiler, wd=0, rd=0),
                  pyrevolve.NumpyStorage(ckp.size, disk, ckp.dtype, profiler, wd=2, rd=2)]
        return pyrevolve.MultiLevelRevolver(ckp, fwd, rev, n_steps, storage_list=levels)

    plain = Solver()
    run(revolver(plain), plain)
    mine = Solver()
    stats = run_tiered(revolver(mine), mine, tmp_path)
    check_same_run(mine, plain, stats, n_steps)
