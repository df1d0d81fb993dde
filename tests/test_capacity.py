"""Capacity pressure: nothing lost, dirty never evicted, full tiers push back."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from helpers import object_files

import tiered

MiB = 1 << 20


def _value(i: int, n: int = MiB // 8) -> np.ndarray:
    return np.full(n, i, dtype=np.float64)  # 1 MiB each


def test_many_entries_under_pressure_lose_nothing(tmp_path):
    cache = tiered.Cache([tiered.HostTier(6 * MiB), tiered.DirectoryTier(tmp_path / "bb",
                          capacity=20 * MiB), tiered.HDF5Tier(tmp_path / "pfs")])
    for i in range(60):
        cache.store(i, _value(i))
        # invariant: every copy that left a tier has a copy below it
        for key in cache.keys():
            assert key in cache
    cache.flush()
    stats = cache.stats()
    assert stats.tiers["host"].evictions > 0 and stats.tiers["directory"].evictions > 0
    assert stats.tiers["host"].used_bytes <= 6 * MiB
    assert stats.tiers["directory"].used_bytes <= 20 * MiB
    for i in reversed(range(60)):
        np.testing.assert_array_equal(cache.revisit(i), _value(i))
    cache.close()


@pytest.mark.parametrize(("state_bytes", "evicted"), [(4096, 4), (64 * 1024, 1)])
def test_a_store_that_must_evict_frees_room_for_the_next_few(tmp_path, state_bytes, evicted):
    """Small states: one scan evicts for this store and the next three (EVICT_AHEAD), all
    clean copies; states over a sixteenth of the tier: only what the store needs."""
    n = state_bytes // 8
    cache = tiered.Cache([tiered.HostTier(256 * 1024), tiered.DirectoryTier(tmp_path / "bb")],
                         eviction="score")
    fill = 256 * 1024 // state_bytes
    for i in range(fill):
        cache.store(i, _value(i, n))
    cache.flush()  # every host copy is clean now: eviction may choose any of them
    host = cache.stats().tiers["host"]
    assert host.evictions == 0 and host.used_bytes == 256 * 1024
    cache.store(fill, _value(fill, n))
    assert cache.stats().tiers["host"].evictions == evicted
    for i in range(fill + 1, fill + evicted):  # these find the room made ahead for them
        cache.store(i, _value(i, n))
    assert cache.stats().tiers["host"].evictions == evicted
    for i in reversed(range(fill + evicted)):  # nothing lost
        np.testing.assert_array_equal(cache.revisit(i), _value(i, n))
    cache.close()


def test_eviction_ahead_stops_at_a_prefetch_not_yet_read(tmp_path):
    """The extra victims of a store never include a prefetched copy nobody has read yet
    (the pump would only read it again): here the second victim in LRU order is one."""
    n = 4096 // 8
    cache = tiered.Cache([tiered.HostTier(256 * 1024), tiered.DirectoryTier(tmp_path / "bb")],
                         eviction="score", prefetch=None)
    for i in range(64):
        cache.store(i, _value(i, n))
    cache.flush()
    with cache._cond:  # as the pump would have landed it (the engine's own bookkeeping)
        cache._index[1].copies[0].prefetched = True
        cache._ahead += 1
    cache.store(64, _value(64, n))
    assert cache.stats().tiers["host"].evictions == 1  # 0 went, 1 (prefetched) stayed
    assert 1 in cache._resident[0] and 0 not in cache._resident[0]
    for i in reversed(range(65)):
        np.testing.assert_array_equal(cache.revisit(i), _value(i, n))
    assert cache.stats().prefetch_hits == 1
    cache.close()


def test_a_full_lone_host_tier_refuses_at_once_and_keeps_everything(tmp_path):
    # host-only: nothing can ever leave it, so waiting for room would only time out
    cache = tiered.Cache([tiered.HostTier(3 * MiB)], full_timeout_s=30)
    for i in range(3):
        cache.store(i, _value(i))
    started = time.monotonic()
    with pytest.raises(tiered.TierFullError, match="no room .* can ever come.*no tier is below"):
        cache.store(99, _value(99))
    assert time.monotonic() - started < 10  # not the 30 s timeout
    assert 99 not in cache
    for i in range(3):
        np.testing.assert_array_equal(cache.revisit(i), _value(i))
    assert cache.stats().blocked_s == 0
    cache.close()


def test_dirty_entries_with_a_full_tier_below_refuse_at_once(tmp_path):
    # the directory below is full of entries at home there: the host's dirty copies
    # can never drain, so neither a store nor flush may wait for them
    directory = tiered.DirectoryTier(tmp_path / "bb", capacity=2 * (MiB + 8192))
    cache = tiered.Cache([tiered.HostTier(3 * MiB), directory], full_timeout_s=30)
    started = time.monotonic()
    for i in range(2):
        cache.store(i, _value(i))
    cache.flush()  # both at home in the directory
    for i in (2, 3, 4):  # each drain fails at once, and flush says so (its work is done)
        cache.store(i, _value(i))
        with pytest.raises(tiered.BackgroundError, match="can ever come") as failed:
            cache.flush()
        assert i in failed.value.keys and "its own work was done" in str(failed.value)
    # the host now holds three dirty entries that cannot leave it: a store cannot wait
    with pytest.raises(tiered.TierFullError, match="can ever come"):
        cache.store(5, _value(5))
    assert time.monotonic() - started < 10  # no wait ran out its 30 s
    for i in range(5):
        np.testing.assert_array_equal(cache.revisit(i), _value(i))  # nothing lost
    cache.close(drain=False)


def test_store_blocks_until_drain_frees_room(tmp_path):
    cache = tiered.Cache([tiered.HostTier(2 * MiB), tiered.DirectoryTier(tmp_path / "bb")])
    for i in range(30):  # each store past the second needs a drain to have finished
        cache.store(i, _value(i))
    cache.flush()
    assert all(np.array_equal(cache.revisit(i), _value(i)) for i in range(30))
    cache.close()


def test_spill_writes_to_next_tier_with_room(tmp_path):
    cache = tiered.Cache([tiered.HostTier(2 * MiB), tiered.HostTier(4 * MiB, name="host2"),
                          tiered.DirectoryTier(tmp_path / "bb")], on_full="spill")
    gate = threading.Event()
    # hold the drain lane so that everything in host stays dirty
    cache._lanes[1].submit(gate.wait)
    for i in range(5):
        cache.store(i, _value(i))
    gate.set()
    cache.flush()
    assert all(np.array_equal(cache.revisit(i), _value(i)) for i in range(5))
    assert cache.stats().tiers["host2"].bytes_in >= 3 * MiB
    cache.close()


def test_value_larger_than_every_tier_is_refused(tmp_path):
    cache = tiered.Cache([tiered.HostTier(MiB), tiered.DirectoryTier(tmp_path / "bb",
                                                                     capacity=2 * MiB)])
    with pytest.raises(tiered.TierFullError, match="every tier"):
        cache.store("big", np.zeros(3 * MiB, np.uint8))
    assert "big" not in cache and list((tmp_path / "bb").iterdir()) == []
    cache.close()


def test_value_larger_than_top_tier_goes_straight_below(tmp_path):
    with tiered.Cache([tiered.HostTier(MiB), tiered.HDF5Tier(tmp_path / "pfs")]) as cache:
        cache.store("big", np.arange(3 * MiB // 8, dtype=np.float64))
        np.testing.assert_array_equal(cache.revisit("big"), np.arange(3 * MiB // 8, dtype=float))


def test_discard_frees_space_at_once(tmp_path):
    cache = tiered.Cache([tiered.HostTier(2 * MiB)], full_timeout_s=0.2)
    cache.store(0, _value(0))
    cache.store(1, _value(1))
    cache.discard(0)
    cache.store(2, _value(2))  # fits only because 0 went
    assert 0 not in cache and cache.keys() == [1, 2]
    cache.close()


def test_mutation_after_store_never_changes_what_was_stored(tmp_path):
    cache = tiered.Cache([tiered.HostTier(4 * MiB), tiered.DirectoryTier(tmp_path / "bb")])
    buf = np.zeros(1000)
    state = {"u": buf, "nested": [buf[::2]]}
    for step in range(5):
        buf[:] = step
        cache.store(step, state)
    buf[:] = -1
    cache.flush()
    time.sleep(0.05)
    for step in range(5):
        got = cache.revisit(step)
        np.testing.assert_array_equal(got["u"], np.full(1000, step, float))
        np.testing.assert_array_equal(got["nested"][0], np.full(500, step, float))
    cache.close()


def test_discarded_files_are_deleted_in_the_background(tmp_path):
    disk = tmp_path / "bb"
    with tiered.Cache([tiered.HostTier(4 * MiB), tiered.DirectoryTier(disk)]) as cache:
        for i in range(3):
            cache.store(i, _value(i))
        cache.flush()
        assert len(object_files(disk)) == 3
        cache.discard(1)
        assert 1 not in cache  # gone from the index at once
        cache.flush()  # waits for the unlink
        names = [p.name for p in object_files(disk)]
        assert len(names) == 2 and not any(n.startswith("1~") for n in names)
        np.testing.assert_array_equal(cache.revisit(2), _value(2))
    with tiered.Cache([tiered.DirectoryTier(disk)]) as again:  # restart: 1 stays discarded
        assert again.keys() == [0, 2]


def test_a_failed_background_deletion_is_reported(tmp_path):
    disk = tmp_path / "bb"
    cache = tiered.Cache([tiered.HostTier(4 * MiB), tiered.DirectoryTier(disk)])
    cache.store("a", _value(1))
    cache.flush()
    (path,) = object_files(disk)
    path.unlink()
    path.mkdir()  # a real fault: unlink() of that name now fails with IsADirectoryError
    (path / "x").write_bytes(b"")
    cache.discard("a")
    with pytest.raises(tiered.BackgroundError, match="Is a directory"):
        cache.flush()
    cache.close()
    assert object_files(disk) == [path]  # left where it was (not taken for a spare file)
    with tiered.Cache([tiered.DirectoryTier(disk)]) as again:  # and the directory reopens
        assert again.keys() == []


def test_parallel_writers_respect_a_bounded_directory_tier(tmp_path):
    disk = tiered.DirectoryTier(tmp_path / "bb", capacity=6 * MiB + 6 * 8192, writers=4)
    assert disk.writers == 4
    peak = [0]
    put = disk.put

    def watched_put(*args, **kw):  # the real put, recording the tier's use after each
        record = put(*args, **kw)
        peak[0] = max(peak[0], disk.used_bytes)
        return record

    disk.put = watched_put  # type: ignore[method-assign]
    with tiered.Cache([tiered.HostTier(8 * MiB), disk, tiered.HDF5Tier(tmp_path / "pfs")],
                      full_timeout_s=60) as cache:
        for i in range(30):
            cache.store(i, _value(i))
        cache.flush()
        assert cache.stats().background_errors == 0
        for i in range(30):
            np.testing.assert_array_equal(cache.revisit(i), _value(i))
    assert 0 < peak[0] <= disk.capacity_bytes


def test_writers_and_readers_are_validated(tmp_path):
    from tiered.movers import spare_cores

    with pytest.raises(ValueError, match="writers"):
        tiered.DirectoryTier(tmp_path, writers=0)
    with pytest.raises(ValueError, match="readers"):
        tiered.DirectoryTier(tmp_path, readers=True)
    unsynced = tiered.DirectoryTier(tmp_path / "a", sync=False)
    assert unsynced.writers == unsynced.readers == spare_cores()
    assert 1 <= spare_cores() <= 4 and spare_cores(limit=1) == 1
    assert tiered.DirectoryTier(tmp_path / "b").writers == 4
    assert tiered.DirectoryTier(tmp_path / "c", readers=2).readers == 2


def _clean_from_scratch(cache: tiered.Cache) -> list[set]:
    """The copies eviction may choose from, recomputed from the index (white box)."""
    clean: list[set] = [set() for _ in cache.tiers]
    for key, entry in cache._index.items():
        for tier in entry.copies:
            if any(t > tier for t in entry.copies):
                clean[tier].add(key)
    return clean


def test_clean_sets_follow_every_change(tmp_path):
    # the eviction candidates are kept incrementally per tier: after stores, drains,
    # prefetches, overwrites and discards they must equal a recomputation from scratch
    cache = tiered.Cache([tiered.HostTier(6 * MiB), tiered.DirectoryTier(tmp_path / "bb",
                          capacity=30 * MiB), tiered.HDF5Tier(tmp_path / "pfs")],
                         eviction="score", prefetch="reverse")
    rng = np.random.default_rng(3)
    for round_ in range(3):
        for i in range(20):
            cache.store(i, _value(i + round_))
        cache.flush()
        for i in rng.permutation(20)[:8]:
            cache.discard(int(i))
        for key in list(cache.keys())[::-1][:6]:
            np.testing.assert_array_equal(cache.revisit(key), _value(int(key) + round_))
        cache.flush()
        with cache._cond:
            got = [{k for k in c if cache._index.get(k) is c[k]} for c in cache._clean]
            want = _clean_from_scratch(cache)
        assert got == want
    cache.close()


@pytest.mark.parametrize("write_back", ["eager", "lazy"])
def test_room_that_can_still_come_is_waited_for_not_refused(tmp_path, write_back):
    # what fills the directory is counted at its files' real size: a 1 MiB directory takes
    # far more 4 KiB objects than 1 MiB / (4 KiB + the room reserved while one is written)
    directory = tiered.DirectoryTier(tmp_path / "bb", capacity=MiB)
    cache = tiered.Cache([tiered.HostTier(64 << 10), directory], write_back=write_back,
                         full_timeout_s=30)
    values = {i: np.full(4096, i % 251, np.uint8) for i in range(200)}
    for i, v in values.items():
        cache.store(i, v)
    cache.flush()
    for i, v in values.items():
        np.testing.assert_array_equal(cache.revisit(i), v)
    cache.close()


def test_a_refused_store_deletes_what_it_evicted(tmp_path):
    a = tiered.DirectoryTier(tmp_path / "a", capacity=10 * MiB, name="a", spares=0)
    b = tiered.DirectoryTier(tmp_path / "b", capacity=2 * MiB, name="b")
    cache = tiered.Cache([a, b], full_timeout_s=30)
    for i in range(3):
        cache.store(("small", i), np.zeros(MiB // 2, np.uint8))
    cache.flush()  # home in b, copies in a: evictable there
    for i in range(2):
        cache.store(("big", i), np.zeros(3 * MiB, np.uint8))  # too big for b: home in a
    with pytest.raises(tiered.TierFullError, match="can ever come"):
        cache.store("huge", np.zeros(4 * MiB, np.uint8))  # evicts the small ones, then fails
    cache.flush()
    held = {k for k in cache.keys() if "a" in cache.locate(k)}
    assert held == {("big", 0), ("big", 1)}
    assert len(object_files(tmp_path / "a")) == len(held)  # no file left behind unindexed
    for i in range(2):
        cache.discard(("big", i))
    cache.flush()
    assert a.used_bytes == 0
    cache.store("nine", np.zeros(9 * MiB, np.uint8))  # the room is all there again
    cache.close()


class _HeldDirectory(tiered.DirectoryTier):
    """A real directory tier whose writes wait until the test lets them go."""

    def __init__(self, path, **kw):
        super().__init__(path, sync=False, **kw)
        self.go = threading.Event()

    def put(self, *args, **kw):
        assert self.go.wait(30), "the test never released the tier"
        return super().put(*args, **kw)


def test_a_wait_for_room_says_what_it_waits_for_after_a_second(tmp_path, caplog):
    directory = _HeldDirectory(tmp_path / "bb")
    cache = tiered.Cache([tiered.HostTier(2 * MiB + 8192, prefault=False), directory],
                         full_timeout_s=30)
    cache.store(0, _value(0))
    cache.store(1, _value(1))  # the host is full of copies still draining
    threading.Timer(1.5, directory.go.set).start()
    with caplog.at_level("WARNING", logger="tiered.writes"):
        cache.store(2, _value(2))  # waits for a drain, which can end: no error
    (said,) = [r.getMessage() for r in caplog.records if "has waited" in r.getMessage()]
    assert said.startswith("a store has waited") and "drains" in said and "host" in said
    for i in range(3):
        np.testing.assert_array_equal(cache.revisit(i), _value(i))
    cache.close()
