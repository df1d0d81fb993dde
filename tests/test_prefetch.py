"""The prefetch engine in a real cache: real lane threads, real files, real fsync."""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tiered
from tiered.tiers.records import Record

N = 16 * 1024  # float32 elements per state: 64 KiB
SLOT = N * 4 + 4096


class SlowDirectoryTier(tiered.DirectoryTier):
    """A real directory tier whose reads take ``delay_s`` longer (a slow file system)."""

    def __init__(self, path: Path, delay_s: float) -> None:
        super().__init__(path, name="slow")
        self.delay_s = delay_s
        self.reading = threading.Event()  # set once a read has started

    def _read_payload(self, record: Record, region: np.ndarray) -> None:
        self.reading.set()
        time.sleep(self.delay_s)
        super()._read_payload(record, region)


def state(i: int) -> np.ndarray:
    return np.full(N, i, dtype=np.float32)


def wait_until(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def cold_cache(tmp_path: Path, slots: int, n: int, **kw: Any) -> tiered.Cache:
    """Store ``n`` states durably, then reopen: everything is on disk, the host is empty."""
    with tiered.Cache([tiered.HostTier(slots * SLOT), tiered.DirectoryTier(tmp_path)]) as c:
        for i in range(n):
            c.store(i, state(i))
    tier = kw.pop("tier", None) or tiered.DirectoryTier(tmp_path)
    return tiered.Cache([tiered.HostTier(slots * SLOT), tier], **kw)


@pytest.mark.parametrize("eviction", ["lru", "score", "belady"])
def test_backward_pass_is_served_by_prefetch(tmp_path: Path, eviction: str) -> None:
    cache = tiered.Cache([tiered.HostTier(6 * SLOT), tiered.DirectoryTier(tmp_path / "bb"),
                          tiered.HDF5Tier(tmp_path / "pfs")], eviction=eviction,
                         prefetch="reverse")
    for i in range(30):
        cache.store(("u", i), state(i))
    cache.flush()
    for i in reversed(range(30)):
        time.sleep(0.01)  # the adjoint step's compute, while the lane reads ahead
        assert cache.revisit(("u", i))[0] == i
    stats = cache.stats()
    cache.close()
    assert stats.revisits == 30
    assert stats.prefetch_hits >= 15, stats  # most of the 24 not held at the start
    assert stats.wasted_prefetches <= 2, stats


def test_prefetch_never_evicts_what_is_needed_sooner(tmp_path: Path) -> None:
    cache = cold_cache(tmp_path, slots=4, n=10, eviction="score")
    cache.hint(range(10))
    wait_until(lambda: cache.stats().prefetches >= 4)
    time.sleep(0.2)  # give a wrong pump time to go on
    held = [k for k in range(10) if "host" in cache.locate(k)]
    stats = cache.stats()
    cache.close()
    assert held == [0, 1, 2, 3]
    assert stats.prefetches == 4 and stats.wasted_prefetches == 0


def test_demand_read_does_not_queue_behind_prefetches(tmp_path: Path) -> None:
    cache = cold_cache(tmp_path, slots=12, n=10, tier=SlowDirectoryTier(tmp_path, 0.2))
    cache.hint(range(10))
    got = cache.revisit(9)  # last in the hinted order, needed now
    done_by_then = cache.stats().prefetches
    cache.close(drain=False)
    assert got[0] == 9
    assert done_by_then <= 2  # not the nine in front of it


def test_late_prefetch_is_waited_for_and_counted(tmp_path: Path) -> None:
    slow = SlowDirectoryTier(tmp_path, 0.3)
    cache = cold_cache(tmp_path, slots=4, n=3, tier=slow)
    cache.hint([1])
    assert slow.reading.wait(20)  # the pump has started reading key 1
    assert cache.revisit(1)[0] == 1
    stats = cache.stats()
    cache.close()
    assert stats.late_prefetches == 1 and stats.late_prefetch_wait_s > 0
    assert stats.tiers["host"].hits == 1  # served by the prefetched copy, not read twice


def test_prefetched_then_evicted_unused_counts_as_waste(tmp_path: Path) -> None:
    cache = cold_cache(tmp_path, slots=2, n=4)
    cache.hint([0, 1])
    wait_until(lambda: cache.stats().prefetches == 2)
    cache.store("new-a", state(100))
    cache.store("new-b", state(101))
    stats = cache.stats()
    cache.close()
    # both pushed out unread by the stores (the hints still stand, so the pump may fetch
    # them again and lose them again: each loss counts)
    assert 2 <= stats.wasted_prefetches <= stats.prefetches
    assert stats.prefetch_hits == 0


def test_rollback_brings_back_the_right_version(tmp_path: Path) -> None:
    cache = tiered.Cache([tiered.HostTier(3 * SLOT), tiered.DirectoryTier(tmp_path)],
                         eviction="score", prefetch="recent")
    for step in range(1, 8):
        cache.store(("ckpt", step), state(step))
        cache.store("model", state(1000 + step))  # one key, newer versions replace older
    cache.flush()
    assert "host" not in cache.locate(("ckpt", 2))
    cache.hint([("ckpt", 2)], rollback=True)
    wait_until(lambda: "host" in cache.locate(("ckpt", 2)))
    back = cache.revisit(("ckpt", 2))
    model = cache.revisit("model")
    stats = cache.stats()
    cache.close()
    assert back[0] == 2 and model[0] == 1007
    assert stats.prefetch_hits >= 1


def test_prefetch_keeps_dirty_data_and_stores_first(tmp_path: Path) -> None:
    """Stores while a backward pass prefetches: nothing lost, every value right."""
    cache = tiered.Cache([tiered.HostTier(5 * SLOT), tiered.DirectoryTier(tmp_path)],
                         eviction="score", prefetch="auto")
    for i in range(20):
        cache.store(i, state(i))
    for i in reversed(range(20)):
        assert cache.revisit(i)[0] == i
        cache.store(("new", i), state(500 + i))  # captures keep coming during the sweep
    cache.flush()
    for i in range(20):
        assert cache.revisit(("new", i))[-1] == 500 + i
    cache.close()
    reopened = tiered.Cache([tiered.HostTier(5 * SLOT), tiered.DirectoryTier(tmp_path)])
    assert len(reopened) == 40
    reopened.close()


def test_device_tier_is_filled_first(tmp_path: Path) -> None:
    """DeviceTier on torch's CPU device (no GPU here): prefetches land in the fastest tier."""
    import torch

    cache = tiered.Cache([tiered.DeviceTier(capacity=4 * SLOT, device="cpu"),
                          tiered.HostTier(4 * SLOT), tiered.DirectoryTier(tmp_path)],
                         eviction="score", prefetch="reverse")
    for i in range(16):
        cache.store(i, torch.full((N,), float(i)))
    cache.flush()
    for i in reversed(range(16)):
        time.sleep(0.01)
        assert cache.revisit(i)[0].item() == i
    stats = cache.stats()
    cache.close()
    assert stats.tiers["device"].prefetches >= 4, stats


def test_same_policy_classes_inline_and_threaded(tmp_path: Path) -> None:
    """One factory drives the inline replay and the threaded cache alike."""
    from tiered.policies import Composite, Hinted, Reverse, Score

    from tiered.replay import Replay

    def predictor() -> Composite:
        return Composite(Hinted(), Reverse())

    ops: list[Any] = [("store", i) for i in range(12)] + [("revisit", i)
                                                         for i in reversed(range(12))]
    inline = Replay(4, eviction=Score, prefetch=predictor).run(ops)
    assert inline.hits == 12
    cache = tiered.Cache([tiered.HostTier(4 * SLOT), tiered.DirectoryTier(tmp_path)],
                         eviction=lambda: Score(durable_first=True), prefetch=predictor)
    for op, key in ops:
        if op == "store":
            cache.store(key, state(key))
            continue
        if key == 11:
            cache.flush()
        time.sleep(0.01)
        assert cache.revisit(key)[0] == key
    stats = cache.stats()
    cache.close()
    assert stats.prefetch_hits >= 4 and stats.wasted_prefetches == 0, stats



def _resident_pages(path, upto: int = 1 << 20) -> int:
    """Pages among the first ``upto`` bytes of ``path`` in the page cache (mincore(2))."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    with open(path, "rb") as fh:
        mapping = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY)  # never written
    try:
        anchor = ctypes.c_ubyte.from_buffer(mapping)  # exports the mapping's address
        vec = (ctypes.c_ubyte * pages)()
        ok = libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec)
        del anchor
        if ok != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return sum(v & 1 for v in vec[: upto // mmap.PAGESIZE])
    finally:
        mapping.close()


def test_advise_reads_a_dropped_object_back_into_the_page_cache(tmp_path):
    tier = tiered.DirectoryTier(tmp_path, drop_pages=True, sync=False)
    with tiered.Cache([tier]) as cache:
        cache.store("a", np.arange(1 << 18, dtype=np.float64))  # 2 MiB
    tier = tiered.DirectoryTier(tmp_path, drop_pages=True, sync=False)
    (record,) = tier.scan().records
    if _resident_pages(record.path) > 0:
        pytest.skip("this file system keeps the pages cached (e.g. tmpfs): nothing to show")
    tier.advise(record)
    deadline = time.monotonic() + 5.0
    while _resident_pages(record.path) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _resident_pages(record.path) > 0
    tier.advise(dataclasses.replace(record, path=tmp_path / "missing"))  # advisory: no error


class CountingDirectoryTier(tiered.DirectoryTier):
    """A real directory tier that records how many of its reads overlap (each made slow)."""

    def __init__(self, path: Path, **kw: Any) -> None:
        super().__init__(path, name="counting", **kw)
        self._lock = threading.Lock()
        self.now = self.most = 0
        self.threads: set[str] = set()

    def _read_payload(self, record: Record, region: np.ndarray) -> None:
        name = threading.current_thread().name
        lane = name.startswith("tiered-read")  # demand reads run in the caller, beside these
        with self._lock:
            self.now += lane
            self.most = max(self.most, self.now)
            self.threads.add(name)
        try:
            time.sleep(0.02)  # a slow file system: reads that could overlap, do
            super()._read_payload(record, region)
        finally:
            with self._lock:
                self.now -= lane


def test_several_readers_prefetch_at_once_and_return_the_right_values(tmp_path: Path) -> None:
    n = 24
    tier = CountingDirectoryTier(tmp_path, readers=3)
    cache = cold_cache(tmp_path, slots=8, n=n, tier=tier, prefetch="reverse",
                       prefetch_depth=8)
    # one stored object flipped on disk: its prefetch fails, the revisit reports it
    bad = next(p for p in tmp_path.iterdir() if p.name.startswith("5~"))
    raw = bytearray(bad.read_bytes())
    raw[100] ^= 0xFF
    bad.write_bytes(bytes(raw))
    cache.hint(reversed(range(n)))
    for i in reversed(range(n)):
        if i == 5:
            with pytest.raises(tiered.CorruptDataError):
                cache.revisit(i)
            continue
        assert np.array_equal(cache.revisit(i), state(i))
        cache.discard(i)
    stats = cache.stats()
    cache.close(drain=False)
    assert stats.prefetch_hits >= n // 2
    assert 1 < tier.most <= 3, "prefetch reads never overlapped, or more than 3 did"


def test_each_tier_keeps_its_own_reader_limit(tmp_path: Path) -> None:
    """A directory allowing 3 readers makes a pool; a deeper tier allowing 1 still gets one."""
    n = 16
    with tiered.Cache([tiered.HostTier(n * SLOT), tiered.DirectoryTier(tmp_path / "deep")]) as c:
        for i in range(n):
            c.store(i, state(i))
    deep = CountingDirectoryTier(tmp_path / "deep", readers=1)
    cache = tiered.Cache([tiered.HostTier(6 * SLOT),
                          tiered.DirectoryTier(tmp_path / "bb", readers=3), deep],
                         prefetch="reverse", prefetch_depth=8)
    cache.hint(reversed(range(n)))  # everything is in the deep tier only
    for i in reversed(range(n)):
        assert np.array_equal(cache.revisit(i), state(i))
        cache.discard(i)
        time.sleep(0.02)  # a backward step: the pool's reads run beside it
    stats = cache.stats()
    cache.close(drain=False)
    # what this test defends is the limit per tier, not how many reads won their race
    # against the revisits (that count depends on the machine's load)
    assert stats.prefetches > 0
    assert deep.most == 1 and any(t.startswith("tiered-read") for t in deep.threads)


def test_close_settles_every_prefetch_read_in_flight(tmp_path: Path) -> None:
    """close() while reads are running or queued: each ends, and nothing stays reserved."""
    n = 24
    for attempt in range(3):
        root = tmp_path / str(attempt)
        tier = CountingDirectoryTier(root, readers=2)
        cache = cold_cache(root, slots=12, n=n, tier=tier, prefetch="reverse",
                           prefetch_depth=12)

        def slow_delete(*args: Any, delete: Any = cache._delete, **kw: Any) -> None:
            # a reader that has handed its slot back lingers here, so the pump's next
            # read waits in the read lane's queue (white box: widens that window)
            time.sleep(0.03)
            delete(*args, **kw)

        cache._delete = slow_delete  # type: ignore[method-assign]
        cache.hint(reversed(range(n)))
        wait_until(lambda tier=tier: tier.most >= 2)
        time.sleep(0.01 * attempt)
        cache.close(drain=False)
        futures = [e.prefetch for e in cache._index.values() if e.prefetch is not None]
        assert futures and all(f.done() for f in futures)  # white box: no waiter hangs
        assert sum(cache._reading) == 0


class Everything:
    """A predictor that ignores ``max_keys`` and forecasts every stored key, newest first."""

    def __init__(self) -> None:
        self.stored: list[Any] = []
        self.asked: list[float] = []
        self.answered = 0

    def observe(self, signal: str, key: Any, *, ctx: Any) -> None:
        if signal == "store":
            self.stored.append(key)

    def predict(self, *, ctx: Any) -> list[Any]:
        self.asked.append(ctx.max_keys)
        out = [k for k in reversed(self.stored) if k in ctx.sizes]
        self.answered = max(self.answered, len(out))
        return out


def test_forecast_looks_a_bounded_number_of_keys_ahead(tmp_path: Path) -> None:
    """Memory holding more states than the look-ahead: forecasts stay bounded (each event
    recomputes one, so a long history must not make every store slower), and a backward
    pass still gets every value right with the reverse predictor."""
    from tiered.planner import HORIZON_KEYS

    slots = HORIZON_KEYS + 200
    small = 1024  # float32 elements: 4 KiB states
    custom = Everything()
    cache = tiered.Cache([tiered.HostTier(slots * (small * 4 + 4096)),
                          tiered.DirectoryTier(tmp_path / "a", sync=False)],
                         eviction="score", prefetch=custom, write_back="lazy")
    for i in range(slots - 50):
        cache.store(i, np.full(small, i, np.float32))
    with cache._cond:  # white box: the forecast the engine keeps (eviction and pump use it)
        assert len(cache._forecast_keys()) == HORIZON_KEYS
    assert custom.answered > HORIZON_KEYS  # the predictor offered more...
    assert set(custom.asked) == {HORIZON_KEYS}  # ...than it was asked for
    cache.close(drain=False)

    from tiered.adapters.adjoint import Checkpointer

    cache = tiered.Cache([tiered.HostTier(slots * (small * 4 + 4096)),
                          tiered.DirectoryTier(tmp_path / "b", sync=False)],
                         eviction="score", prefetch="reverse", write_back="lazy")
    ckpt = Checkpointer(cache, name="u")
    n = 3 * slots
    for step in range(n):
        ckpt.store(step, np.full(small, step, np.float32))
    for step in reversed(range(n)):
        if step < n - slots:
            time.sleep(0.002)  # the adjoint step's compute: the pump reads ahead meanwhile
        assert ckpt.revisit(step)[0] == step
    stats = cache.stats()
    cache.close(drain=False)
    assert stats.revisits == n
    assert stats.prefetch_hits > 0, stats  # the older two thirds came back ahead of reads


def test_the_pump_is_woken_when_a_demand_read_ends_not_polling(tmp_path: Path) -> None:
    """While a demand read runs the pump stands aside, asleep until told (no 50 ms polls)."""
    cache = cold_cache(tmp_path, slots=8, n=16, prefetch="reverse")
    waits: list[str] = []
    real_wait = cache._cond.wait

    def counted(timeout: float | None = None) -> bool:
        waits.append(threading.current_thread().name)
        return real_wait(timeout)

    with cache._cond:  # a demand read in progress, as revisit counts one (engine bookkeeping)
        cache._demand_reads += 1
    cache._cond.wait = counted  # type: ignore[method-assign]
    cache.hint(reversed(range(16)))
    time.sleep(0.6)  # the pump has started and stands aside
    assert cache.stats().prefetches == 0
    with cache._cond:  # the demand read ends: _release unpins and notifies like this
        cache._demand_reads -= 1
        cache._cond.notify_all()
    deadline = time.monotonic() + 10
    while cache.stats().prefetches == 0:
        assert time.monotonic() < deadline, "the pump never resumed"
        time.sleep(0.01)
    pump_waits = sum(name.startswith("tiered-prefetch") for name in waits)
    assert 1 <= pump_waits <= 2  # polling every 50 ms would have woken it about 12 times
    cache.close(drain=False)
