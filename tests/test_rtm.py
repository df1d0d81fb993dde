"""The reverse time migration example: the image through tiered equals the in-memory one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tiered
from tiered.bench import rtm

CFG = rtm.RTMConfig(nz=80, nx=80, nt=220, sponge=10)


def test_small_rtm_image_is_bit_identical(tmp_path: Path) -> None:
    data = rtm.record(CFG)
    assert np.abs(data).max() > 0  # the reflection reached the receivers
    want = rtm.in_memory_image(CFG, data)
    host = CFG.nt // 8 * (CFG.snapshot_bytes + 4096)  # an eighth of the history fits
    with tiered.Cache([tiered.HostTier(host), tiered.DirectoryTier(tmp_path / "bb"),
                       tiered.HDF5Tier(tmp_path / "pfs")], eviction="score",
                      prefetch="reverse") as cache:
        got = rtm.tiered_image(CFG, data, cache)
        stats = cache.stats()
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert stats.revisits == CFG.nt and stats.stores == CFG.nt
    assert len(cache) == 0  # every snapshot was consumed and discarded
