"""Every tier, eviction policy and predictor in the package runs the suites tiered ships."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiered.policies.base import make_eviction, make_predictor
from tiered.policies.registry import EVICTION, PREDICTORS

import tiered
from tiered.testing import (
    EvictionPolicyTests,
    MemoryTierTests,
    PersistentTierTests,
    PredictorTests,
)


class TestDirectoryTier(PersistentTierTests):
    def make_tier(self, path: Path, capacity: int | str | None = None) -> tiered.PersistentTier:
        return tiered.DirectoryTier(path, capacity=capacity, sync=False)


class TestDirectoryTierDirectIO(PersistentTierTests):
    def make_tier(self, path: Path, capacity: int | str | None = None) -> tiered.PersistentTier:
        return tiered.DirectoryTier(path, capacity=capacity, direct=True, spares=0)


class TestHDF5Tier(PersistentTierTests):
    def make_tier(self, path: Path, capacity: int | str | None = None) -> tiered.PersistentTier:
        pytest.importorskip("h5py", reason="needs tiered[hdf5]")
        return tiered.HDF5Tier(path, capacity=capacity, sync=False)


class TestHostTier(MemoryTierTests):
    def make_tier(self, capacity: int) -> tiered.MemoryTier:
        return tiered.HostTier(capacity, prefault=False)


class TestDeviceTierOnCPU(MemoryTierTests):
    def make_tier(self, capacity: int) -> tiered.MemoryTier:
        pytest.importorskip("torch", reason="needs tiered[torch]")
        return tiered.DeviceTier(capacity, device="cpu")


@pytest.fixture(params=sorted(EVICTION))
def eviction_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class TestEveryEvictionPolicy(EvictionPolicyTests):
    @pytest.fixture(autouse=True)
    def _name(self, eviction_name: str) -> None:
        self.name = eviction_name

    def make_policy(self):  # type: ignore[no-untyped-def]
        return make_eviction(self.name)


@pytest.fixture(params=sorted(PREDICTORS))
def predictor_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class TestEveryPredictor(PredictorTests):
    @pytest.fixture(autouse=True)
    def _name(self, predictor_name: str) -> None:
        self.name = predictor_name

    def make_predictor(self):  # type: ignore[no-untyped-def]
        return make_predictor(self.name)
