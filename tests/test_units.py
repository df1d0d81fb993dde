"""Small pure pieces: the arena allocator, sizes, eviction orders."""

from __future__ import annotations

import random

import pytest
from tiered.policies import FIFO, LFU, LRU, EventContext, VictimContext

from tiered.arena import PAGE, Arena
from tiered.sizes import format_size, parse_size


def test_arena_allocates_aligned_and_coalesces():
    arena = Arena(16 * PAGE)
    a = arena.allocate(1)
    b = arena.allocate(3 * PAGE)
    c = arena.allocate(PAGE + 1)
    assert a and b and c and all(e.offset % PAGE == 0 for e in (a, b, c))
    assert arena.used == 6 * PAGE
    arena.free(b)
    arena.free(a)
    arena.free(c)
    assert arena.used == 0 and arena.largest_free() == 16 * PAGE
    assert arena.allocate(17 * PAGE) is None


def test_arena_random_workload_never_overlaps():
    rng = random.Random(1)
    arena = Arena(64 * PAGE)
    live = []
    for _ in range(2000):
        if live and rng.random() < 0.5:
            arena.free(live.pop(rng.randrange(len(live))))
        else:
            ext = arena.allocate(rng.randint(1, 6 * PAGE))
            if ext:
                live.append(ext)
        spans = sorted((e.offset, e.offset + e.size) for e in live)
        assert all(x[1] <= y[0] for x, y in zip(spans, spans[1:], strict=False))
        assert arena.used == sum(e.size for e in live)


def test_sizes():
    assert parse_size("512MiB") == 512 << 20 and parse_size("4 GB") == 4 * 10**9
    assert parse_size(10) == 10 and parse_size(None) is None
    assert format_size(1536) == "1.5 KiB"
    with pytest.raises(ValueError):
        parse_size("-1")


def _drive(policy, events):
    for event, key in events:
        policy.observe(event, key, ctx=EventContext())
    return policy


def test_eviction_orders_on_a_hand_checked_trace():
    trace = [("insert", "a"), ("insert", "b"), ("insert", "c"), ("access", "a"),
             ("access", "a"), ("access", "c")]
    everyone = {"a", "b", "c"}
    assert _drive(LRU(), trace).victim(everyone, ctx=VictimContext()) == "b"
    assert _drive(FIFO(), trace).victim(everyone, ctx=VictimContext()) == "a"
    lfu = _drive(LFU(), trace)
    assert lfu.victim(everyone, ctx=VictimContext()) == "b"
    assert lfu.victim({"a", "c"}, ctx=VictimContext()) == "c"
    lru = _drive(LRU(), [*trace, ("remove", "b")])
    assert lru.victim({"a", "c"}, ctx=VictimContext()) == "a"


def test_lanes_reuse_one_staging_buffer_and_callers_get_fresh_ones():
    from tiered.movers import REUSE_STAGING_MAX, Lane, staging_buffer

    lane = Lane("staging-test")
    try:
        first = lane.submit(lambda: staging_buffer(1 << 20).ctypes.data).result()
        again = lane.submit(lambda: staging_buffer(4096).ctypes.data).result()
        grown = lane.submit(lambda: staging_buffer(2 << 20)).result()
        big = lane.submit(lambda: len(staging_buffer(REUSE_STAGING_MAX + 1))).result()
    finally:
        lane.shutdown(cancel=False)
    assert again == first  # the lane's buffer, reused (no page faults on the next transfer)
    assert len(grown) == 2 << 20 and grown.ctypes.data % 4096 == 0
    assert big == REUSE_STAGING_MAX + 1
    a, b = staging_buffer(4096), staging_buffer(4096)  # the caller's thread: never shared
    assert a.ctypes.data != b.ctypes.data
