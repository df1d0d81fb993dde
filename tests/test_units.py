"""Small pure pieces: the arena allocator, sizes, eviction orders."""

from __future__ import annotations

import operator
import os
import random
import subprocess
import sys
import threading
import time

import numpy as np
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


def test_sizes_decimal_and_binary_units_and_whole_bytes():
    assert parse_size("1M") == parse_size("1MB") == 10**6
    assert parse_size("1MiB") == parse_size("1 mib") == 2**20
    assert parse_size("1.5KiB") == 1536 and parse_size("1.5 kB") == 1500
    assert parse_size("12") == parse_size("12B") == 12
    for fraction in ("1.5", "1.5B", "0.5 b"):
        with pytest.raises(ValueError, match="whole"):
            parse_size(fraction, name="capacity")


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


@pytest.mark.parametrize("value", [np.ones((64, 32), np.float32), np.zeros((3, 0, 2), ">i8"),
                                   np.array(5.0), np.ones((5, 3), np.float16).T,
                                   np.arange(7, dtype=np.uint8)[::2]])
def test_a_bare_arrays_meta_is_the_general_one(value):
    from tiered.values import ValueMeta, _Flattener, flatten

    general = _Flattener()
    spec = general.visit(value, "")
    meta, arrays = flatten(value)  # the shortcut for bare arrays (its meta is shared)
    assert meta == ValueMeta(spec, tuple(general.leaves), general.offset)
    assert arrays[0] is value and flatten(value.copy())[0] is meta


@pytest.mark.parametrize("value", [np.array([object()]), np.zeros(2, dtype=[("a", "i4")])])
def test_a_bare_array_of_a_refused_dtype_is_still_refused(value):
    from tiered.values import flatten

    with pytest.raises(TypeError, match="not supported"):
        flatten(value)


def test_lane_runs_jobs_in_order_and_hands_errors_to_their_futures():
    from tiered.movers import Lane

    lane, done = Lane("order-test"), []
    gate = threading.Event()
    try:
        first = lane.submit(gate.wait, 10)
        later = [lane.submit(done.append, i) for i in range(50)]
        failing = lane.submit(operator.truediv, 1, 0)
        gate.set()
        assert first.result(10) is True and [f.result(10) for f in later] == [None] * 50
        with pytest.raises(ZeroDivisionError):
            failing.result(10)
        assert done == list(range(50))
        assert lane.submit(threading.current_thread).result(10).name.startswith("tiered-")
    finally:
        lane.shutdown(cancel=False)
    with pytest.raises(RuntimeError, match="after shutdown"):
        lane.submit(done.append, 0)


def test_lane_shutdown_cancels_queued_jobs_and_lets_the_running_one_finish():
    from tiered.movers import Lane

    lane, gate = Lane("cancel-test"), threading.Event()
    running = lane.submit(gate.wait, 10)
    queued = [lane.submit(time.sleep, 0) for _ in range(5)]
    while not running.running():
        time.sleep(0.001)
    threading.Timer(0.2, gate.set).start()
    lane.shutdown(cancel=True)  # waits for the running job
    assert running.result(0) is True
    assert all(f.cancelled() for f in queued)


def test_lane_workers_run_at_once():
    from tiered.movers import Lane

    lane = Lane("pool-test", workers=3)
    barrier = threading.Barrier(3, timeout=10)
    try:  # three jobs that each wait for the other two: only three threads finish them
        assert [f.result(10) for f in [lane.submit(barrier.wait) for _ in range(3)]]
    finally:
        lane.shutdown(cancel=False)


def test_a_lane_dropped_without_shutdown_stops_its_threads():
    import gc

    from tiered.movers import Lane

    lane = Lane("drop-test", workers=2)
    assert lane.submit(int, "7").result(10) == 7
    threads = list(lane._threads)
    assert all(t.is_alive() for t in threads)
    del lane
    gc.collect()
    for thread in threads:  # the threads hold the queue, not the lane: they are told to stop
        thread.join(10)
        assert not thread.is_alive()


def test_queued_lane_jobs_finish_when_the_interpreter_exits(tmp_path):
    script = f"""
import time
from pathlib import Path
from tiered.movers import Lane
lane = Lane("exit-test")
lane.submit(time.sleep, 0.3)
lane.submit(Path({str(tmp_path / "done")!r}).write_text, "yes")
"""  # no shutdown: the interpreter's exit must not drop the queued write
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert (tmp_path / "done").read_text() == "yes"


def test_a_job_submitted_after_the_exit_hook_is_refused_not_left_waiting():
    script = """
import atexit, time
def late():  # registered before tiered's hook, so it runs after it
    try:
        lane.submit(time.sleep, 0)
    except RuntimeError as exc:
        print("refused:", exc)
atexit.register(late)
from tiered.movers import Lane
lane = Lane("late-test")
lane.submit(time.sleep, 0).result(10)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # a job queued behind the stop would hang here
    assert "refused: lane late-test: cannot queue a job after shutdown" in done.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_lane_used_before_a_fork_works_in_the_child():
    from tiered.movers import Lane

    lane = Lane("fork-test")
    try:
        assert lane.submit(os.getpid).result(10) == os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: the parent's thread is gone; the lane starts its own
            code = 1
            try:
                code = 0 if lane.submit(os.getpid).result(10) == os.getpid() else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        lane.shutdown(cancel=False)


def test_hdf5_tier_returns_leaf_offsets_explicitly(tmp_path):
    pytest.importorskip("h5py", reason="needs tiered[hdf5]")
    import tiered
    from tiered.values import flatten

    tier = tiered.HDF5Tier(tmp_path)
    meta, arrays = flatten({"a": np.arange(4.0), "b": np.ones(3, np.int32)})
    region = np.zeros(meta.nbytes, np.uint8)
    from tiered.payload import write_leaves

    write_leaves(region, meta, arrays)
    record = tier.put("k", 1, meta, region, (0, 0))
    assert record.offsets is not None and len(record.offsets) == 2
    manifest, offsets = tier._read_manifest(record.path)
    assert offsets == record.offsets and "_offsets" not in manifest


def test_a_full_tier_is_not_a_memory_error():
    import tiered

    assert issubclass(tiered.TierFullError, tiered.TieredError)
    assert not issubclass(tiered.TierFullError, MemoryError)  # the process has memory left


def test_an_hdf5_tier_never_holds_more_than_its_capacity(tmp_path):
    pytest.importorskip("h5py", reason="needs tiered[hdf5]")
    import tiered
    from tiered.movers import leaf_checksums
    from tiered.payload import write_leaves
    from tiered.values import flatten

    meta, arrays = flatten(np.ones(2048, np.float32))
    region = np.zeros(meta.nbytes, np.uint8)
    write_leaves(region, meta, arrays)
    capacity = 4 * (meta.nbytes + tiered.HDF5Tier.overhead_bytes)
    tier = tiered.HDF5Tier(tmp_path, capacity=capacity)
    with pytest.raises(tiered.TierFullError):
        for i in range(100):  # each file is its payload plus the HDF5 file's own ~10 KiB
            tier.put(i, i + 1, meta, region, leaf_checksums(region, meta))
            assert tier.used_bytes <= capacity


def test_an_hdf5_object_larger_than_its_footprint_is_refused_whole(tmp_path):
    pytest.importorskip("h5py", reason="needs tiered[hdf5]")
    import tiered
    from tiered.movers import leaf_checksums
    from tiered.payload import write_leaves
    from tiered.values import flatten

    # 40 leaves of 64 KiB + 8 B: HDF5 pads each to 4 KiB, beyond the per-object reservation
    meta, arrays = flatten([np.ones(8193, np.float64) for _ in range(40)])
    region = np.zeros(meta.nbytes, np.uint8)
    write_leaves(region, meta, arrays)
    tier = tiered.HDF5Tier(tmp_path, capacity=meta.nbytes + tiered.HDF5Tier.overhead_bytes)
    with pytest.raises(tiered.TierFullError):
        tier.put("big", 1, meta, region, leaf_checksums(region, meta))
    assert tier.used_bytes == 0 and list(tmp_path.iterdir()) == []


def test_a_skipped_room_check_is_made_up_when_due(tmp_path):
    import tiered
    from tiered.room import HOPELESS_EVERY_S, Watch

    with tiered.Cache([tiered.HostTier("1MiB", prefault=False)]) as cache:
        watch = cache._watch("host", 1, True)
        assert isinstance(watch, Watch)
        assert watch.due_check() and watch.bound(30.0) == 1.0  # nothing skipped: 1 s
        assert not watch.due_check()  # too soon: skipped...
        assert watch.bound(30.0) <= HOPELESS_EVERY_S  # ...so the wait ends when it is due
