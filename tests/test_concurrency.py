"""Several threads storing and revisiting at once, over real lanes and real files."""

from __future__ import annotations

import threading
import time

import numpy as np

import tiered


def test_concurrent_store_and_revisit(tmp_path):
    cache = tiered.Cache([tiered.HostTier("6MiB"), tiered.DirectoryTier(tmp_path / "bb"),
                          tiered.HDF5Tier(tmp_path / "pfs")])
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for i in range(25):
                cache.store((f"w{w}", i), np.full(20_000, w * 1000 + i, dtype=np.float64))
                j = max(0, i - 3)
                got = cache.revisit((f"w{w}", j))
                assert got[0] == w * 1000 + j and got[-1] == w * 1000 + j
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    cache.flush()
    assert len(cache) == 100
    for w in range(4):
        for i in range(25):
            assert cache.revisit((f"w{w}", i))[7] == w * 1000 + i
    cache.close()


def test_same_key_from_many_threads_keeps_one_whole_version(tmp_path):
    cache = tiered.Cache([tiered.HostTier("8MiB"), tiered.DirectoryTier(tmp_path / "bb")])

    def worker(w: int) -> None:
        for _ in range(10):
            cache.store("shared", np.full(10_000, w, dtype=np.int32))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    got = cache.revisit("shared")
    assert len(set(got.tolist())) == 1  # one writer's value, never a mix
    cache.close()
    with tiered.Cache([tiered.DirectoryTier(tmp_path / "bb")]) as again:
        np.testing.assert_array_equal(again.revisit("shared"), got)
        assert len(list((tmp_path / "bb").iterdir())) == 1


def test_hint_prefetches_into_host_while_reading(tmp_path):
    with tiered.Cache([tiered.HDF5Tier(tmp_path / "pfs")]) as cache:
        for i in range(10):
            cache.store(i, np.full(50_000, i))
    cache = tiered.Cache([tiered.HostTier("8MiB"), tiered.HDF5Tier(tmp_path / "pfs")])
    cache.hint(reversed(range(10)))
    # The pump stands aside while a revisit reads from disk (demand first), so a reader
    # that starts at once on a loaded machine may do every read itself. Wait (no time
    # limit asserted beyond a generous one) until the lane has brought up the first key.
    deadline = time.monotonic() + 30
    while "host" not in cache.locate(9):
        assert time.monotonic() < deadline, "the hint never brought key 9 up"
        time.sleep(0.005)
    for i in reversed(range(10)):
        np.testing.assert_array_equal(cache.revisit(i), np.full(50_000, i))
    stats = cache.stats()
    assert stats.tiers["host"].prefetches >= 1 and stats.prefetch_hits >= 1
    assert stats.tiers["host"].hits + stats.tiers["hdf5"].hits == 10
    cache.close()


def test_a_lane_is_told_by_a_flag_not_by_its_thread_name():
    from tiered.movers import LANE_PREFIX, Lane, in_lane

    seen: dict[str, bool] = {}
    lookalike = threading.Thread(target=lambda: seen.setdefault("named", in_lane()),
                                 name=f"{LANE_PREFIX}not-a-lane")
    lookalike.start()
    lookalike.join()
    lane = Lane("probe")
    assert lane.submit(in_lane).result(timeout=10) is True
    lane.shutdown(cancel=False)
    assert seen == {"named": False} and not in_lane()


def test_one_fork_hook_resets_every_module_in_the_child(tmp_path):
    import os

    from tiered import movers

    names = [f.__module__ for f in movers._RESETS]
    assert {"tiered.tiers.persistent", "tiered.tiers.spares", "tiered.movers"} <= set(names)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its pid in temp names, and a lane that runs
        from tiered.movers import Lane
        from tiered.tiers.persistent import _PID

        ok = _PID[0] == os.getpid() and Lane("child").submit(lambda: 7).result(10) == 7
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
