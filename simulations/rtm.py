"""Reverse time migration example: one shot through tiered, checked bit for bit.

The propagator and the imaging condition live in :mod:`tiered.bench.rtm` (so that
``tiered bench adjoint`` runs from any install); this script is the example to read and run::

    python simulations/rtm.py                          # 200x200, 500 snapshots, seconds
    python simulations/rtm.py --n 1024 --nt 1024 --drop-pages   # 4 GiB history on disk
    python simulations/rtm.py --n 2048 --nt 400 --device cuda   # GPU snapshots, 6.25 GiB

The fast level (host memory) holds a quarter of the history unless ``--host-mib`` says
otherwise; the rest drains to a directory tier and comes back by reverse prefetch. With
``--device`` the wavefields are torch tensors on that device and a device tier of the same
size sits above host memory. The image
is compared with the one computed keeping every snapshot in memory (``--no-check`` skips
that reference, for histories larger than this machine's memory).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import numpy as np

log = logging.getLogger("rtm")


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200, help="grid is n x n (float32)")
    p.add_argument("--nt", type=int, default=500, help="snapshots in the history")
    p.add_argument("--substeps", type=int, default=1, help="wave steps per snapshot")
    p.add_argument("--host-mib", type=int, help="fast level in MiB (default: a quarter)")
    p.add_argument("--workdir", type=Path, help="where the directory tier goes (default: temp)")
    p.add_argument("--drop-pages", action="store_true",
                   help="fsync and drop written pages, so reads come from the device")
    p.add_argument("--no-check", action="store_true", help="skip the in-memory reference")
    p.add_argument("--device", help="a torch device (e.g. cuda) for the wavefields")
    return p.parse_args()


def main() -> None:
    """Migrate one shot through tiered and check it against the in-memory image."""
    import tiered
    from tiered.bench.rtm import RTMConfig, in_memory_image, record, tiered_image

    args = _args()
    cfg = RTMConfig(nz=args.n, nx=args.n, nt=args.nt, substeps=args.substeps,
                    device=args.device)
    history = cfg.nt * cfg.snapshot_bytes
    host = (args.host_mib << 20) if args.host_mib else history // 4
    host = max(host, 2 * (cfg.snapshot_bytes + 4096))
    data = record(cfg)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        fast: list[tiered.MemoryTier] = [tiered.HostTier(host)]
        if args.device:
            fast.insert(0, tiered.DeviceTier(host, device=args.device))
        cache = tiered.Cache([*fast,
                              tiered.DirectoryTier(Path(tmp) / "bb", sync=args.drop_pages,
                                                   drop_pages=args.drop_pages)],
                             eviction="score", prefetch="reverse", write_back="lazy")
        started = time.perf_counter()
        got = tiered_image(cfg, data, cache)
        cfg.ops.sync()
        seconds = time.perf_counter() - started
        stats = cache.stats()
        cache.close(drain=False)
    log.info("RTM %dx%d, %d snapshots (%.2f GiB of history, %.2f GiB per memory tier): "
             "%.2f s; %d prefetch hits, stall %.3f s, %.2f GiB written to the directory tier",
             cfg.nz, cfg.nx, cfg.nt, history / 2**30, host / 2**30, seconds,
             stats.prefetch_hits, stats.stall_s,
             stats.tiers["directory"].bytes_in / 2**30)
    if args.no_check:
        return
    same = np.array_equal(got, in_memory_image(cfg, data))
    log.info("image identical to keeping every snapshot in memory: %s", same)
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
