"""revisit(copy=False): read-only views of host memory, pinned until the views are gone."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest
import torch
from tiered.adapters.adjoint import Checkpointer

import tiered

MiB = 1 << 20


def _state(i: int) -> np.ndarray:
    return np.full((256, 1024), i, dtype=np.float32)  # 1 MiB


def test_views_are_the_stored_value_read_only_and_counted(tmp_path):
    value = {"u": np.arange(1000, dtype=">f8").reshape(10, 100), "t": 0.5,
             "n": np.int64(7), "pair": (np.ones(3, np.int16), "x")}
    with tiered.Cache([tiered.HostTier(4 * MiB), tiered.DirectoryTier(tmp_path)]) as cache:
        cache.store("k", value)
        got = cache.revisit("k", copy=False)
        np.testing.assert_array_equal(got["u"], value["u"])
        assert got["u"].dtype == value["u"].dtype and got["t"] == 0.5 and got["n"] == 7
        assert got["pair"][1] == "x" and got["pair"][0].tolist() == [1, 1, 1]
        with pytest.raises(ValueError, match="read-only"):
            got["u"][0, 0] = 1.0
        assert cache.stats().borrowed == 1
        del got


def test_empty_arrays_and_scalar_only_values():
    with tiered.Cache([tiered.HostTier(MiB)]) as cache:
        cache.store("e", np.zeros((0, 3), np.float32))
        cache.store("s", {"a": 1, "b": "x"})
        cache.store("z", np.float64(3.5))
        assert cache.revisit("e", copy=False).shape == (0, 3)
        assert cache.revisit("s", copy=False) == {"a": 1, "b": "x"}
        assert cache.revisit("z", copy=False) == np.float64(3.5)


def test_a_borrowed_copy_stays_pinned_until_every_view_is_gone(tmp_path):
    cache = tiered.Cache([tiered.HostTier(4 * MiB), tiered.DirectoryTier(tmp_path)],
                         eviction="lru")
    cache.store(0, _state(0))
    view = cache.revisit(0, copy=False)[::2]  # a view of the view keeps it alive too
    for i in range(1, 12):  # pressure: 11 more states through 4 MiB of host memory
        cache.store(i, _state(i))
    cache.flush()
    assert (view == 0).all()  # never evicted, never overwritten
    assert "host" in cache.locate(0)
    cache.discard(0)
    host = cache.tiers[0]
    used = host.used_bytes
    del view  # the last view: the copy is unpinned at the next call and, discarded, freed
    assert cache.stats().tiers["host"].used_bytes == used - MiB
    for i in range(1, 12):
        np.testing.assert_array_equal(cache.revisit(i), _state(i))
    cache.close()


def test_copies_where_a_view_is_not_possible(tmp_path):
    with tiered.Cache([tiered.DirectoryTier(tmp_path)]) as cache:  # no memory tier
        cache.store("a", _state(3))
        got = cache.revisit("a", copy=False)
        assert got.flags.writeable and (got == 3).all()
    with tiered.Cache([tiered.HostTier(4 * MiB)]) as cache:  # torch leaves come back as tensors
        cache.store("t", {"w": torch.ones(4), "u": _state(1)})
        got = cache.revisit("t", copy=False)
        assert isinstance(got["w"], torch.Tensor) and got["u"].flags.writeable
        assert cache.stats().borrowed == 0


def test_out_and_copy_false_do_not_go_together(tmp_path):
    with tiered.Cache([tiered.HostTier(4 * MiB)]) as cache:
        cache.store("a", _state(1))
        with pytest.raises(ValueError, match="copy=False"):
            cache.revisit("a", out=np.empty((256, 1024), np.float32), copy=False)


def test_checkpointer_consumes_borrowed_states_and_frees_them(tmp_path):
    cache = tiered.Cache([tiered.HostTier(8 * MiB), tiered.DirectoryTier(tmp_path)],
                         eviction="score", prefetch="reverse", write_back="lazy")
    ckpt = Checkpointer(cache)
    for step in range(20):
        ckpt.store(step, _state(step))
    total = 0.0
    for step in reversed(range(20)):
        u = ckpt.revisit(step, copy=False)  # the previous u is dropped here
        total += float(u[0, 0])
    assert total == sum(range(20))
    assert cache.stats().borrowed > 0  # (a state read from disk comes back as a copy)
    # at most the last state stays, still referenced: the others were given back as u moved
    # on (a drain still writing one of them holds it until it is done: hence the wait)
    assert _host_bytes_settle(cache, MiB) <= MiB
    del u
    assert _host_bytes_settle(cache, 0) == 0 and len(cache) == 0
    cache.close()


def _host_bytes_settle(cache: tiered.Cache, target: int, timeout: float = 20.0) -> int:
    """Host bytes in use once at most ``target`` (or ``timeout`` passed); each call settles."""
    deadline = time.monotonic() + timeout
    while (used := cache.stats().tiers["host"].used_bytes) > target:
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return used


def test_views_outlive_the_cache(tmp_path):
    cache = tiered.Cache([tiered.HostTier(4 * MiB), tiered.DirectoryTier(tmp_path)])
    cache.store("a", _state(5))
    view = cache.revisit("a", copy=False)
    cache.discard("a")
    cache.close()
    assert (view == 5).all()  # the mapping lives on under the view
    del view  # the release after close neither raises nor touches freed memory


def test_views_in_garbage_cycles_are_given_back_too(tmp_path):
    # a view collected by the cycle collector (which may run in any thread, under any
    # lock) only queues its copy; the next call into the cache unpins it
    cache = tiered.Cache([tiered.HostTier(2 * MiB), tiered.DirectoryTier(tmp_path)],
                         full_timeout_s=5)
    cache.store("a", _state(1))
    cycle: list = [cache.revisit("a", copy=False)]
    cycle.append(cycle)
    cache.discard("a")
    del cycle
    gc.collect()
    for i in range(4):  # needs the room the lent copy held: a store settles it first
        cache.store(i, _state(i))
    cache.flush()
    assert "a" not in cache and cache.stats().borrowed == 1
    cache.close()


def test_a_waiting_store_gets_the_room_a_dropped_view_gives_back():
    cache = tiered.Cache([tiered.HostTier(2 * MiB)], full_timeout_s=20)
    cache.store("a", _state(1))
    cache.store("b", _state(2))
    view = cache.revisit("a", copy=False)
    cache.discard("a")  # its memory stays lent out
    done = threading.Event()
    writer = threading.Thread(target=lambda: (cache.store("c", _state(3)), done.set()))
    writer.start()
    assert not done.wait(0.3)  # the tier is full: the store waits
    del view  # queued; the waiting store settles it and takes the room
    writer.join(timeout=15)
    assert done.is_set()
    np.testing.assert_array_equal(cache.revisit("c"), _state(3))
    cache.close()
