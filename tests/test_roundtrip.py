"""Every value kind through every tier combination: before/after flush, after restart."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import PERSISTENT_COMBOS, assert_same, sample_values, tier_combos

import tiered

COMBOS = tier_combos()
VALUES = sample_values()


@pytest.mark.parametrize("combo", list(COMBOS))
def test_every_value_kind_round_trips(tmp_path, combo):
    cache = tiered.Cache(COMBOS[combo](tmp_path))
    for name, value in VALUES.items():
        cache.store(name, value)
    for name, value in VALUES.items():
        assert_same(cache.revisit(name), value, name)
    cache.flush()
    for name, value in VALUES.items():
        assert_same(cache.revisit(name), value, name)
    assert sorted(map(str, cache.keys())) == sorted(VALUES)
    cache.close()


@pytest.mark.parametrize("combo", PERSISTENT_COMBOS)
def test_reopen_reads_back_from_persistent_tiers(tmp_path, combo):
    with tiered.Cache(COMBOS[combo](tmp_path)) as cache:
        for name, value in VALUES.items():
            cache.store(("v", name), value)
    reopened = tiered.Cache(COMBOS[combo](tmp_path))
    assert reopened.recovery == []
    assert len(reopened) == len(VALUES)
    for name, value in VALUES.items():
        assert_same(reopened.revisit(("v", name)), value, name)
    stats = reopened.stats()
    persistent_hits = sum(s.hits for n, s in stats.tiers.items() if n in ("directory", "hdf5"))
    assert persistent_hits >= 1
    reopened.close()


def test_value_is_a_fresh_copy_each_time(tmp_path):
    with tiered.Cache([tiered.HostTier("4MiB")]) as cache:
        cache.store("k", np.arange(10.0))
        first = cache.revisit("k")
        first[:] = -1
        np.testing.assert_array_equal(cache.revisit("k"), np.arange(10.0))


def test_overwrite_replaces_value_and_survives_restart(tmp_path):
    tiers = COMBOS["host+dir+hdf5"]
    with tiered.Cache(tiers(tmp_path)) as cache:
        cache.store("k", np.zeros(4))
        cache.flush()
        cache.store("k", np.ones(4))
        np.testing.assert_array_equal(cache.revisit("k"), np.ones(4))
    with tiered.Cache(tiers(tmp_path)) as cache:
        np.testing.assert_array_equal(cache.revisit("k"), np.ones(4))
        assert cache.recovery == []  # the old version's files were removed, not left over
    assert len(list((tmp_path / "pfs").iterdir())) == 1


def test_torch_tensor_keeps_dtype_and_device(tmp_path):
    value = {"w": torch.randn(3, 3, dtype=torch.float64), "b": torch.ones(2, dtype=torch.int8)}
    with tiered.Cache(COMBOS["device+hdf5"](tmp_path)) as cache:
        cache.store("m", value)
        got = cache.revisit("m")
    assert_same(got, value)
    assert got["w"].device == torch.device("cpu")


def test_unsynced_scratch_tier_round_trips_and_reopens(tmp_path):
    import numpy as np

    with tiered.Cache([tiered.HostTier("1MiB"),
                       tiered.DirectoryTier(tmp_path, sync=False, drop_pages=False)]) as cache:
        for i in range(20):
            cache.store(i, np.full(10_000, i, dtype=np.float64))
    with tiered.Cache([tiered.DirectoryTier(tmp_path, drop_pages=True)]) as again:
        assert sorted(again.keys()) == list(range(20))
        assert again.revisit(7)[123] == 7
        again.store("new", np.ones(5))  # written, fsync'd, then its pages dropped
        again.flush()
        assert again.revisit("new").sum() == 5
