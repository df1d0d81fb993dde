"""Discards and overwrites are final after a restart (real files, real drains)."""

from __future__ import annotations

import numpy as np
import pytest

import tiered
from tiered.errors import BackgroundError


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


class _FailsOnce(tiered.DirectoryTier):
    """A directory whose first deletion raises, as a read-only directory would."""

    failures = 1

    def delete(self, record, *, recycle=True):
        if self.failures:
            self.failures -= 1
            raise PermissionError(13, "Permission denied (the directory was read-only)")
        super().delete(record, recycle=recycle)


def test_a_failed_deletion_is_tried_again(tmp_path):
    cache = tiered.Cache([_FailsOnce(tmp_path)])
    cache.store("gone", np.ones(1000))
    cache.store("kept", np.zeros(1000))
    cache.discard("gone")
    with pytest.raises(BackgroundError, match="deleting"):
        cache.flush()  # reported once...
    cache.flush()  # ...and tried again: now it goes
    cache.close()
    again = tiered.Cache([tiered.DirectoryTier(tmp_path)])
    assert again.keys() == ["kept"]
    again.close()


def test_a_deletion_that_fails_until_close_is_tried_at_close(tmp_path):
    tier = _FailsOnce(tmp_path)
    cache = tiered.Cache([tier])
    cache.store("gone", np.ones(1000))
    cache.discard("gone")
    cache.close(drain=False)
    assert list(tmp_path.iterdir()) == []
