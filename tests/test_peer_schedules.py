"""Every checkpoint_schedules schedule, over tiered caches that really move the data.

Each schedule type runs a small grid of (steps, snapshots) through
:func:`~tiered.adapters.schedules.run_schedule` in both cache layouts: one cache for the RAM
and DISK levels, and each level on a cache of its own. Host tiers hold a few states only
and the directory tiers are bounded, so states drain through the directory into HDF5 and
come back from there. The adjoint must equal the plain in-memory run's bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from adjoint_models import SIZE, adjoint, forward, initial, reference
from tiered.adapters.schedules import planned_reads, run_schedule

import tiered

cs = pytest.importorskip("checkpoint_schedules", reason="needs tiered[adjoint]")
pytestmark = pytest.mark.filterwarnings("ignore:Numba not available")

TIMEOUT_S = 5.0  # longest wait for room: a cache that never finds any fails quickly
GRID = [(2, 1), (9, 2), (24, 3)]  # (steps, snapshots)
Schedule = Callable[[int, int], Any]

SCHEDULES: dict[str, Schedule] = {
    "revolve": lambda n, s: cs.Revolve(n, s),
    "hrevolve": lambda n, s: cs.HRevolve(n, s, s + 1),
    "disk-revolve": lambda n, s: cs.DiskRevolve(n, s),
    "periodic-disk-revolve": lambda n, s: cs.PeriodicDiskRevolve(n, s),
    "multistage": lambda n, s: cs.MultistageCheckpointSchedule(n, s, s + 1),
    "multistage-disk-only": lambda n, s: cs.MultistageCheckpointSchedule(n, 0, s),
    "mixed-disk": lambda n, s: cs.MixedCheckpointSchedule(n, s),
    "mixed-ram": lambda n, s: cs.MixedCheckpointSchedule(n, s, storage=cs.StorageType.RAM),
    "two-level-disk": lambda n, s: cs.TwoLevelCheckpointSchedule(s + 1, s),
    "two-level-ram": lambda n, s: cs.TwoLevelCheckpointSchedule(
        s + 1, s, binomial_storage=cs.StorageType.RAM),
    "single-memory": lambda n, s: cs.SingleMemoryStorageSchedule(),
    "single-disk": lambda n, s: cs.SingleDiskStorageSchedule(),
    "single-disk-move": lambda n, s: cs.SingleDiskStorageSchedule(move_data=True),
}
NO_ADJOINT = {"none": lambda n, s: cs.NoneCheckpointSchedule()}


def host() -> tiered.HostTier:
    return tiered.HostTier("16KiB", prefault=False)  # four 4 KiB states


def directory(path: Path, capacity: str | None = "80KiB") -> tiered.DirectoryTier:
    """Bounded: a few states (64 KiB of it is set aside for one object's manifest today)."""
    return tiered.DirectoryTier(path, capacity=capacity, sync=False)


def hdf5(path: Path) -> tiered.HDF5Tier:
    return tiered.HDF5Tier(path, sync=False)


def one_cache(tmp_path: Path) -> dict[str, tiered.Cache]:
    cache = tiered.Cache([host(), directory(tmp_path / "bb"), hdf5(tmp_path / "pfs")],
                         prefetch="hinted", full_timeout_s=TIMEOUT_S)
    return {"ram": cache, "disk": cache}


def own_caches(tmp_path: Path) -> dict[str, tiered.Cache]:
    """RAM spills to a scratch directory; DISK lives on the directory and HDF5 tiers."""
    ram = tiered.Cache([host(), directory(tmp_path / "ram-bb", None)], prefetch="hinted",
                       full_timeout_s=TIMEOUT_S)
    disk = tiered.Cache([directory(tmp_path / "bb"), hdf5(tmp_path / "pfs")],
                        prefetch="hinted", full_timeout_s=TIMEOUT_S)
    return {"ram": ram, "disk": disk}


LAYOUTS = {"one-cache": one_cache, "own-caches": own_caches}


@pytest.fixture(params=list(LAYOUTS))
def levels(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, tiered.Cache]]:
    caches = LAYOUTS[request.param](tmp_path)
    yield caches
    for cache in {id(c): c for c in caches.values()}.values():
        cache.close(drain=False)  # idempotent: a test closes them itself when it passes


def run(schedule: Any, levels: dict[str, tiered.Cache], n_steps: int) -> Any:
    return run_schedule(schedule, levels, n_steps=n_steps, state=initial(), forward=forward,
                        adjoint=adjoint, adjoint_state=np.zeros(SIZE))


def close_all(levels: dict[str, tiered.Cache]) -> dict[str, tiered.CacheStats]:
    """Close every cache (draining it); return each one's counters by level."""
    for cache in levels.values():
        cache.close()
    return {name: cache.stats() for name, cache in levels.items()}


def test_every_schedule_type_is_covered() -> None:
    """A schedule type added to checkpoint_schedules gets a case here before it is trusted."""
    made = {type(make(8, 2)) for make in {**SCHEDULES, **NO_ADJOINT}.values()}
    offered = {obj for obj in vars(cs).values() if isinstance(obj, type)
               and issubclass(obj, cs.CheckpointSchedule) and obj is not cs.CheckpointSchedule}
    assert offered - made == set()


@pytest.mark.parametrize(("n_steps", "snapshots"), GRID)
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedule_adjoint_matches_the_in_memory_run(levels: dict[str, tiered.Cache],
                                                    name: str, n_steps: int,
                                                    snapshots: int) -> None:
    schedule = SCHEDULES[name](n_steps, snapshots)
    plan = planned_reads(schedule, n_steps)
    res = run(schedule, levels, n_steps)
    stats = close_all(levels)  # no background error may surface at the end either
    np.testing.assert_array_equal(res.adjoint, reference(n_steps))
    assert res.reads == plan
    assert res.forward_steps == n_steps + res.recomputed_steps
    for level, counters in stats.items():
        assert counters.background_errors == 0, level
        if any(lvl == level for lvl, _ in res.reads):  # a level read from went into its cache
            assert counters.stores > 0, level


@pytest.mark.parametrize(("n_steps", "snapshots"), GRID)
def test_schedule_without_an_adjoint_stores_nothing(levels: dict[str, tiered.Cache],
                                                    n_steps: int, snapshots: int) -> None:
    res = run(NO_ADJOINT["none"](n_steps, snapshots), levels, n_steps)
    stats = close_all(levels)
    assert res.forward_steps == n_steps and res.stores == 0 and res.reads == []
    np.testing.assert_array_equal(res.adjoint, np.zeros(SIZE))  # never stepped back
    assert all(counters.stores == 0 for counters in stats.values())
