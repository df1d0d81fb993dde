"""GPU measurements for tests/gpu_check.sh (needs a CUDA device; not collected by pytest).

Times, for one payload of ``--gib`` GiB of float32 on the GPU, the copies torch itself makes
(the physical limits) and the cache's capture, drain and revisit paths measured against them:
a device tier drained to a host tier, and CUDA tensors captured straight into a host tier,
with the host arena pageable and pinned (``cudaHostRegister``). Writes one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import tiered


def sync() -> None:
    """Wait for the GPU (nothing to wait for on a CPU-only dry run)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def best(fn: Callable[[], Any], repeat: int) -> float:
    """Fastest of ``repeat`` runs of ``fn``, the device synchronised around each."""
    times = []
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return min(times)


def host_tier(nbytes: int, pinned: bool | None) -> tiered.HostTier:
    """A host tier, pinned when asked (``pinned=None``: the tier's default)."""
    if pinned is None:
        return tiered.HostTier(nbytes)
    return tiered.HostTier(nbytes, pinned=pinned)


def torch_limits(src: torch.Tensor, repeat: int) -> dict[str, float]:
    """The copies torch makes: device to device, to/from pinned and pageable host memory."""
    dst = torch.empty_like(src)
    cuda = torch.cuda.is_available()
    pinned = torch.empty(src.shape, dtype=src.dtype, pin_memory=cuda)
    pageable = torch.from_numpy(np.empty(src.shape, np.float32))
    return {"copy_d2d_s": best(lambda: dst.copy_(src), repeat),
            "copy_d2h_pinned_s": best(lambda: pinned.copy_(src), repeat),
            "copy_d2h_pageable_s": best(lambda: pageable.copy_(src), repeat),
            "copy_h2d_pinned_s": best(lambda: dst.copy_(pinned), repeat),
            "copy_h2d_pageable_s": best(lambda: dst.copy_(pageable), repeat)}


def device_then_host(src: torch.Tensor, pinned: bool, repeat: int) -> dict[str, float]:
    """Capture into a device tier, drain it to a host tier, revisit from either."""
    n = src.numel() * 4
    dst = torch.empty_like(src)
    cache = tiered.Cache([tiered.DeviceTier(2 * n, device=str(src.device)),
                          host_tier(2 * n, pinned)])
    try:
        store = best(lambda: cache.store("x", src), repeat)
        drain = best(lambda: (cache.store("x", src), cache.flush()), repeat)
        back = best(lambda: cache.revisit("x", out=dst), repeat)
        assert torch.equal(dst, src)
    finally:
        cache.close()
    return {"store_device_s": store, "store_and_drain_s": drain, "revisit_device_s": back}


def host_only(src: torch.Tensor, pinned: bool, repeat: int) -> dict[str, float]:
    """CUDA tensors captured straight into a host tier and revisited onto the GPU."""
    n = src.numel() * 4
    dst = torch.empty_like(src)
    t = time.perf_counter()
    tier = host_tier(3 * n, pinned)  # room for an overwrite beside the old copy
    made = time.perf_counter() - t
    cache = tiered.Cache([tier])
    try:
        store = best(lambda: cache.store("x", src), repeat)
        back = best(lambda: cache.revisit("x", out=dst), repeat)
        fresh = best(lambda: cache.revisit("x"), repeat)
        assert torch.equal(dst, src) and cache.revisit("x").device == src.device
    finally:
        cache.close()
    return {"host_tier_make_s": made, "store_host_s": store, "revisit_host_out_s": back,
            "revisit_host_fresh_s": fresh}


def forward_loop(device: str, repeat: int, steps: int = 48, mib: int = 32) -> dict[str, float]:
    """A forward pass in miniature: each step computes, then stores its state.

    The device tier holds 8 states, so drains to host memory run throughout; with them on
    side streams the loop should take about as long as its compute alone.
    """
    state = torch.rand(mib << 18, device=device)
    work = torch.rand(64 << 18, device=device)

    def compute() -> None:  # a few ms of elementwise kernels, like a stencil's steps
        for _ in range(40):
            work.mul_(0.999).add_(0.001)

    def compute_only() -> None:
        for _ in range(steps):
            compute()

    nbytes = state.numel() * 4 + 4096
    cache = tiered.Cache([tiered.DeviceTier(8 * nbytes, device=device),
                          host_tier(steps * nbytes, None)])

    def loop() -> None:
        for i in range(steps):
            compute()
            cache.store(i, state)

    def drains() -> None:
        for i in range(steps):
            cache.store(i, state)
        cache.flush()

    try:
        alone = best(compute_only, repeat)
        looped = best(loop, repeat)
        cache.flush()
        drained = best(drains, repeat)
    finally:
        cache.close()
    return {"forward_compute_s": alone, "forward_with_stores_s": looped,
            "forward_stores_and_drains_alone_s": drained, "forward_vs_compute": looped / alone}


def main() -> None:
    """Measure and write the JSON (see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("json")
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of this script")
    args = parser.parse_args()
    n = int(args.gib * 2**30)
    src = torch.rand(n // 4, device=args.device)
    cuda = src.device.type == "cuda"
    rows: dict[str, Any] = {"gib": n / 2**30, "torch": torch.__version__,
                            "device": torch.cuda.get_device_name() if cuda else "cpu"}
    rows.update(torch_limits(src, args.repeat))
    for tag, pinned in zip(("pageable", "pinned"), (False, cuda), strict=True):
        for name, value in {**device_then_host(src, pinned, args.repeat),
                            **host_only(src, pinned, args.repeat)}.items():
            rows[f"{tag}.{name}"] = value
    for tag, limit in (("pageable", "copy_d2h_pageable_s"), ("pinned", "copy_d2h_pinned_s")):
        rows[f"{tag}.store_host_vs_torch"] = rows[f"{tag}.store_host_s"] / rows[limit]
        rows[f"{tag}.drain_vs_torch"] = ((rows[f"{tag}.store_and_drain_s"]
                                          - rows[f"{tag}.store_device_s"]) / rows[limit])
    rows["store_device_vs_d2d"] = rows["pinned.store_device_s"] / rows["copy_d2d_s"]
    rows.update(forward_loop(args.device, args.repeat))
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
