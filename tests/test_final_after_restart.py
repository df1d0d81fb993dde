"""Discards and overwrites are final after a restart (real files, real drains)."""

from __future__ import annotations

import numpy as np
import pytest

import tiered


def _tiers(root):
    return [tiered.HostTier("64MiB"), tiered.DirectoryTier(root / "bb")]


@pytest.mark.parametrize("trial", range(5))
def test_a_discarded_key_stays_discarded_after_a_restart(tmp_path, trial):
    # three stores in a row: the drains of the first two are still running when the next
    # one replaces them, and used to be written anyway and never deleted
    with tiered.Cache(_tiers(tmp_path)) as cache:
        for i in range(3):
            cache.store("k", np.full(1 << 20, i, np.float32))
        cache.flush()
        cache.discard("k")
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert "k" not in again and len(again) == 0
    assert [p.name for p in (tmp_path / "bb").iterdir()] == []


@pytest.mark.parametrize("trial", range(3))
def test_an_overwrite_is_final_after_a_restart(tmp_path, trial):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        for i in range(4):
            cache.store("k", np.full(1 << 20, i, np.float32))
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert again.revisit("k")[0] == 3
    assert len(list((tmp_path / "bb").iterdir())) == 1
