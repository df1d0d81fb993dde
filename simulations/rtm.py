"""Reverse time migration example: one small shot through tiered, checked bit for bit.

The propagator and the imaging condition live in :mod:`tiered.bench.rtm` (so that
``tiered bench adjoint`` runs from any install); this script is the example to read and run::

    python simulations/rtm.py
"""

from __future__ import annotations

import numpy as np


def main() -> None:
    """Migrate one small shot through tiered and check it against the in-memory image."""
    import tempfile
    from pathlib import Path

    import tiered
    from tiered.bench.rtm import RTMConfig, in_memory_image, record, tiered_image

    cfg = RTMConfig()
    data = record(cfg)
    want = in_memory_image(cfg, data)
    with tempfile.TemporaryDirectory() as tmp:
        cache = tiered.Cache([tiered.HostTier(cfg.nt // 4 * (cfg.snapshot_bytes + 4096)),
                              tiered.DirectoryTier(Path(tmp) / "bb")],
                             eviction="score", prefetch="reverse")
        got = tiered_image(cfg, data, cache)
        stats = cache.stats()
        cache.close(drain=False)
    same = np.array_equal(got, want)
    print(f"RTM {cfg.nz}x{cfg.nx}, {cfg.nt} snapshots of {cfg.snapshot_bytes >> 10} KiB: "
          f"image identical to in-memory: {same}; prefetch hits {stats.prefetch_hits}, "
          f"stall {stats.stall_s:.3f} s")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
