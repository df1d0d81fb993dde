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


def _damage(path):
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # in the manifest's footer: the file cannot even be loaded
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("key", ["w", ("state", 3), "k" * 300])
def test_a_damaged_newest_object_is_an_error_not_an_older_value(tmp_path, key):
    tier = tiered.DirectoryTier(tmp_path)  # two objects of one key, as a crash leaves them
    from tiered.movers import leaf_checksums
    from tiered.payload import write_leaves
    from tiered.values import flatten

    for version, fill in ((1, 1.0), (2, 2.0)):
        meta, arrays = flatten(np.full(1000, fill))
        region = np.zeros(meta.nbytes, np.uint8)
        write_leaves(region, meta, arrays)
        newest = tier.put(key, version, meta, region, leaf_checksums(region, meta))
    tier.close()
    _damage(newest.path)
    with tiered.Cache([tiered.DirectoryTier(tmp_path)]) as cache:
        # a shortened name (a long key) is matched through the older object's name
        with pytest.raises(tiered.CorruptDataError, match="damaged"):
            cache.revisit(key)
        assert any("damaged object" in p for p in cache.recovery)
        cache.store(key, np.full(1000, 3.0))  # a new value replaces it...
    with tiered.Cache([tiered.DirectoryTier(tmp_path)]) as again:
        assert again.revisit(key)[0] == 3.0  # ...and stays newest after a restart


def test_a_key_whose_only_object_is_damaged_is_corrupt_not_unknown(tmp_path):
    with tiered.Cache([tiered.DirectoryTier(tmp_path)]) as cache:
        cache.store("only", np.ones(100))
    (path,) = tmp_path.glob("*.tdat")
    _damage(path)
    with tiered.Cache([tiered.DirectoryTier(tmp_path)]) as cache:
        with pytest.raises(tiered.CorruptDataError):
            cache.revisit("only")
        cache.discard("only")  # and it can be forgotten on purpose
        with pytest.raises(KeyError):
            cache.revisit("only")
