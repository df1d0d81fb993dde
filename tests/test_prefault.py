"""``HostTier(prefault="background")``: faulted in by a thread, never over data stored in it."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

import tiered
from tiered.tiers.host import BACKGROUND_PREFAULT, _populate_write

MiB = 1 << 20

needs_populate = pytest.mark.skipif(_populate_write() is None,
                                    reason="needs Linux 5.14+ (MADV_POPULATE_WRITE)")


def _resident(buf: np.ndarray) -> int:
    """Bytes of ``buf``'s pages present in memory now (``/proc/self/pagemap``, bit 63).

    Per page of the buffer itself: adjacent anonymous mappings may be merged into one
    region, so the region's ``Rss`` in ``smaps`` can count other buffers too.
    """
    page = mmap.PAGESIZE
    first, count = buf.ctypes.data // page, -(-buf.nbytes // page)
    with open("/proc/self/pagemap", "rb") as fh:
        fh.seek(first * 8)
        entries = np.frombuffer(fh.read(count * 8), dtype=np.uint64)
    return int(np.count_nonzero(entries >> np.uint64(63))) * page


@needs_populate
def test_a_large_buffer_is_faulted_in_behind_construction() -> None:
    tier = tiered.HostTier(64 * MiB, prefault="background")
    assert tier.wait_prefaulted(30)
    assert _resident(tier._buf) >= 64 * MiB
    tier.close()


@needs_populate
def test_stores_made_while_it_faults_in_are_never_overwritten() -> None:
    # a few hundred ms of faulting: the writes below race it
    tier = tiered.HostTier(512 * MiB, prefault="background")
    extents = [tier.allocate(MiB) for _ in range(512)]
    assert all(e is not None for e in extents)
    for i, extent in enumerate(reversed(extents)):  # from the end: ahead of the thread too
        tier.region(extent, MiB)[::4096] = (i % 251) + 1
    assert tier.wait_prefaulted(60)
    for i, extent in enumerate(reversed(extents)):
        page_starts = tier.region(extent, MiB)[::4096]
        assert (page_starts == (i % 251) + 1).all(), i
    tier.close()


@needs_populate
def test_close_stops_the_thread() -> None:
    tier = tiered.HostTier(256 * MiB, prefault="background")
    prefault = tier._prefault
    assert prefault is not None
    tier.close()
    assert prefault.done.is_set() and not prefault._thread.is_alive()
    assert tier.wait_prefaulted(0)


def test_the_default_small_or_unfaulted_buffers_start_no_thread() -> None:
    default = tiered.HostTier(64 * MiB)  # faulted in at construction
    assert default._prefault is None and _resident(default._buf) >= 64 * MiB
    default.close()
    small = tiered.HostTier(BACKGROUND_PREFAULT - MiB, prefault="background")
    assert small._prefault is None and small.wait_prefaulted(0)
    assert _resident(small._buf) >= BACKGROUND_PREFAULT - MiB  # faulted in at construction
    lazy = tiered.HostTier(64 * MiB, prefault=False)
    assert lazy._prefault is None and _resident(lazy._buf) < MiB
    small.close()
    lazy.close()


@needs_populate
def test_a_cache_stores_and_revisits_while_its_buffer_faults_in(tmp_path: Path) -> None:
    with tiered.Cache([tiered.HostTier(256 * MiB, prefault="background"),
                       tiered.DirectoryTier(tmp_path, sync=False)]) as cache:
        values = {i: np.full(MiB // 8, float(i)) for i in range(200)}  # 200 MiB
        for i, value in values.items():
            cache.store(i, value)
        for i, value in values.items():
            np.testing.assert_array_equal(cache.revisit(i), value)


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_prefault_takes_true_false_or_background(bad: object) -> None:
    with pytest.raises(ValueError, match="prefault"):
        tiered.HostTier(MiB, prefault=bad)  # type: ignore[arg-type]  # the point
