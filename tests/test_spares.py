"""Spare files: a directory tier reuses deleted object files instead of creating new ones."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers import object_files

import tiered
from tiered.movers import leaf_checksums
from tiered.payload import host_leaf_view, write_leaves
from tiered.tiers.directory import HOLE_BYTES, DirectoryTier, aligned_bytes
from tiered.tiers.persistent import SPARE_PREFIX
from tiered.tiers.spares import SparePool
from tiered.values import flatten

MiB = 1 << 20
SCRATCH = {"sync": False, "drop_pages": True}  # no durability, written through to the device


def _spares(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.name.startswith(SPARE_PREFIX))


def _put(tier: DirectoryTier, key: int, value: np.ndarray) -> tiered.tiers.records.Record:
    meta, _ = flatten(value)
    region = aligned_bytes(meta.nbytes)  # page-aligned, as the cache's regions are
    write_leaves(region, meta, [value])
    return tier.put(key, key, meta, region, leaf_checksums(region, meta))


def _get(tier: DirectoryTier, record: tiered.tiers.records.Record) -> np.ndarray:
    out = np.empty(record.meta.nbytes, np.uint8)
    tier.get_into(record, out)
    return host_leaf_view(out, record.meta.leaves[0])


@pytest.mark.parametrize("mode", [{"sync": True}, {"sync": False, "drop_pages": True},
                                  {"sync": False, "direct": True}], ids=str)
def test_a_deleted_file_is_emptied_and_written_into_again(tmp_path: Path,
                                                          mode: dict[str, bool]) -> None:
    tier = DirectoryTier(tmp_path, **mode)
    dense = np.arange(MiB // 8, dtype=np.float64) + 1  # no zero byte runs: every block written
    old = [_put(tier, k, dense) for k in range(3)]
    inodes = {r.path.stat().st_ino for r in old}
    for record in old[:2]:
        tier.delete(record)
    spares = _spares(tmp_path)
    assert len(spares) == 2 and object_files(tmp_path) == [old[2].path]
    for spare in spares:  # its bytes are freed at once: no data, no blocks
        assert spare.stat().st_size == 0 and spare.stat().st_blocks == 0
    assert tier.reused == 0
    assert tier.used_bytes == old[2].file_bytes
    # the next objects land in those files: mostly zeros now, so a stale byte would show
    sparse = np.zeros(MiB // 8, dtype=np.float64)
    sparse[-HOLE_BYTES // 8:] = 7.0
    new = [_put(tier, k, sparse) for k in (10, 11)]
    assert {r.path.stat().st_ino for r in new} <= inodes
    assert _spares(tmp_path) == [] and tier.reused == 2
    for record in new:
        np.testing.assert_array_equal(_get(tier, record), sparse)
    np.testing.assert_array_equal(_get(tier, old[2]), dense)
    assert tier.used_bytes == old[2].file_bytes + sum(r.file_bytes for r in new)
    tier.close()


def test_the_pool_is_bounded_and_zero_spares_unlinks(tmp_path: Path) -> None:
    value = np.ones(1000)
    one = DirectoryTier(tmp_path / "one", **SCRATCH, spares=1)
    for record in [_put(one, k, value) for k in range(3)]:
        one.delete(record)
    assert len(_spares(one.root)) == 1 and object_files(one.root) == []
    none = DirectoryTier(tmp_path / "none", **SCRATCH, spares=0)
    for record in [_put(none, k, value) for k in range(3)]:
        none.delete(record)
    assert list(none.root.iterdir()) == []
    _put(none, 9, value)
    assert none.reused == 0


def test_a_buffered_scratch_tier_unlinks_instead(tmp_path: Path) -> None:
    """Writes into an emptied file are written back at close (ext4): no spares there."""
    tier = DirectoryTier(tmp_path / "scratch", sync=False, drop_pages=False, direct=False)
    for record in [_put(tier, k, np.ones(1000)) for k in range(3)]:
        tier.delete(record)
    assert list(tier.root.iterdir()) == []
    durable = DirectoryTier(tmp_path / "durable")  # sync=True: fsync'd anyway
    durable.delete(_put(durable, 1, np.ones(1000)))
    assert len(_spares(durable.root)) == 1


@pytest.mark.parametrize("bad", [-1, True, 1.5, "4"])
def test_spares_must_be_a_count(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="spares must be a non-negative integer"):
        DirectoryTier(tmp_path, spares=bad)  # type: ignore[arg-type]


def test_close_removes_spares_and_a_restart_removes_leftovers(tmp_path: Path) -> None:
    tier = DirectoryTier(tmp_path, **SCRATCH)
    keep = _put(tier, 1, np.ones(100))
    tier.delete(_put(tier, 2, np.ones(100)))
    assert len(_spares(tmp_path)) == 1
    tier.close()
    assert list(tmp_path.iterdir()) == [keep.path]
    # what a crash leaves: an emptied spare (quietly removed) and a file renamed to a
    # spare's name but killed before it was emptied (reported as cut short)
    (tmp_path / f"{SPARE_PREFIX}1-a.tdat").touch()
    (tmp_path / f"{SPARE_PREFIX}1-b.tdat").write_bytes(b"x" * 4096)
    with tiered.Cache([DirectoryTier(tmp_path)]) as cache:
        assert cache.keys() == [1]
        assert len(cache.recovery) == 1 and "cut short" in cache.recovery[0]
        assert f"{SPARE_PREFIX}1-b" in cache.recovery[0]
    assert list(tmp_path.iterdir()) == [keep.path]


def test_a_spare_removed_behind_the_tiers_back_is_created_again(tmp_path: Path) -> None:
    tier = DirectoryTier(tmp_path, **SCRATCH)
    tier.delete(_put(tier, 1, np.ones(100)))
    (spare,) = _spares(tmp_path)
    spare.unlink()  # e.g. a clean-up script swept the hidden files
    record = _put(tier, 2, np.full(100, 2.0))
    np.testing.assert_array_equal(_get(tier, record), np.full(100, 2.0))


def test_a_sliding_window_through_a_cache_keeps_every_live_state(tmp_path: Path) -> None:
    """Stores and discards interleave (a rollback window, a revolve schedule) on lanes."""
    disk = tmp_path / "bb"
    window, steps = 4, 40
    tier = DirectoryTier(disk, **SCRATCH, spares=3)
    with tiered.Cache([tiered.HostTier(2 * MiB), tier], write_back="eager") as cache:
        def value(i: int) -> np.ndarray:
            return np.full(MiB // 16, float(i))  # 512 KiB: the host tier holds 4

        for i in range(steps):
            cache.store(i, value(i))
            if i >= window:
                cache.discard(i - window)
        cache.flush()
        # the discarded states' files were written into again (at least those discarded
        # once their drain was done, which eager write-back makes most of them)
        assert 0 < tier.reused <= steps - window
        for i in range(steps - window, steps):
            np.testing.assert_array_equal(cache.revisit(i), value(i))
        live = sorted(int(p.name.split("~")[0]) for p in object_files(disk))
        assert live == list(range(steps - window, steps))  # the discarded are gone
        spares = _spares(disk)
        assert len(spares) <= 3 and all(p.stat().st_size == 0 for p in spares)
    assert object_files(disk) and not _spares(disk)  # closed: spares gone, objects kept
    with tiered.Cache([DirectoryTier(disk)]) as again:  # restart: the window, nothing else
        assert sorted(again.keys()) == list(range(steps - window, steps))
        assert again.recovery == []


def test_deleted_bytes_stay_deleted_when_the_spare_is_reused(tmp_path: Path) -> None:
    """A recycled file never shows an old object's bytes, even past the new one's end."""
    tier = DirectoryTier(tmp_path, **SCRATCH)
    big = _put(tier, 1, np.full(MiB // 8, 5.0))
    ino = big.path.stat().st_ino
    tier.delete(big)
    small = _put(tier, 2, np.full(10, 6.0))
    assert small.path.stat().st_ino == ino
    assert os.path.getsize(small.path) == small.file_bytes < MiB
    assert b"\x00\x00\x00\x00\x00\x00\x14@" not in small.path.read_bytes()  # 5.0, LE
    np.testing.assert_array_equal(_get(tier, small), np.full(10, 6.0))


def test_the_pool_hands_out_what_it_was_given_and_not_after_a_fork(tmp_path: Path) -> None:
    pool = SparePool(2)
    assert pool.take() is None
    assert pool.give(str(tmp_path / "a")) and pool.give(str(tmp_path / "b"))
    assert not pool.give(str(tmp_path / "c")) and len(pool) == 2  # full
    assert pool.take() == str(tmp_path / "b") and pool.reused == 1
    pool.limit = 0  # lowered: nothing more is kept
    assert not pool.has_room() and not pool.give(str(tmp_path / "d"))
    with pytest.raises(ValueError, match="spares must be a non-negative integer"):
        pool.limit = -1
    pool.limit = 2
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its parent's spares are not its own
        os.close(read)
        os.write(write, b"none" if pool.take() is None else b"some")
        os._exit(0)
    os.close(write)
    assert os.read(read, 8) == b"none"
    os.close(read)
    os.waitpid(pid, 0)
    assert pool.take() == str(tmp_path / "a")  # the parent still has it
    pool.give(str(tmp_path / "a"))
    assert pool.close() == [str(tmp_path / "a")] and not pool.give(str(tmp_path / "e"))


def test_a_file_that_cannot_be_emptied_is_deleted_as_before(tmp_path: Path) -> None:
    tier = DirectoryTier(tmp_path, **SCRATCH)
    record = _put(tier, 1, np.ones(1000))
    record.path.unlink()
    record.path.mkdir()  # a real fault: neither emptied nor unlinked
    with pytest.raises(IsADirectoryError):
        tier.delete(record)
    assert record.path.is_dir() and _spares(tmp_path) == []  # put back where it was
