"""Movers: background lanes and the byte transfers they run between tiers.

A lane is one worker thread with a FIFO of transfers; every transfer is a
``concurrent.futures.Future``. Transfers hold no cache lock: the cache pins the source copy
and reserves the destination before it submits one.
"""

from __future__ import annotations

import logging
import mmap
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from tiered.checksum import checksum
from tiered.payload import copy_region, is_torch_region, leaf_bytes
from tiered.tiers.base import (
    LANE_PREFIX,
    MemoryTier,
    PersistentTier,
    Record,
    cuda_torch,
    in_lane,
)
from tiered.values import ValueMeta

log = logging.getLogger(__name__)
T = TypeVar("T")


class Lane:
    """Background worker threads (one unless ``workers`` says), named for what they move."""

    def __init__(self, name: str, workers: int = 1) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=workers,
                                        thread_name_prefix=f"{LANE_PREFIX}{name}")

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(*args)``; returns its future."""
        return self._pool.submit(fn, *args)

    def shutdown(self, *, cancel: bool) -> None:
        """Stop the worker after the running transfer; drop queued ones if ``cancel``."""
        self._pool.shutdown(wait=True, cancel_futures=cancel)


REUSE_STAGING_MAX = 256 << 20  # a lane keeps one staging buffer up to this size
_lane_local = threading.local()


def staging_buffer(nbytes: int) -> np.ndarray:
    """Return a page-aligned host buffer (for paths with no host tier to land in).

    A background lane reuses one buffer (grown as needed, up to :data:`REUSE_STAGING_MAX`),
    page-locked when torch is imported and sees a CUDA device, so device reads and writes
    through it run at DMA speed and no transfer pays page faults. The caller must be done
    with it before the lane's next transfer. Other threads, and larger payloads, get a
    fresh buffer.
    """
    if nbytes > REUSE_STAGING_MAX or not in_lane():
        return _fresh_buffer(nbytes)
    buf: np.ndarray | None = getattr(_lane_local, "staging", None)
    if buf is None or len(buf) < nbytes:
        buf = _lane_local.staging = _pinned_buffer(nbytes)
    return buf[:nbytes]


def _fresh_buffer(nbytes: int) -> np.ndarray:
    mapping = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(mapping, dtype=np.uint8)[:nbytes]


def _pinned_buffer(nbytes: int) -> np.ndarray:
    """Return a page-locked buffer from torch's host allocator with CUDA, else a fresh one."""
    torch = cuda_torch()
    if torch is None:
        return _fresh_buffer(nbytes)
    # the array's base keeps the pinned tensor alive; freed to torch's cache with the lane
    out: np.ndarray = torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=True).numpy()
    return out


def host_view(region: Any, nbytes: int) -> np.ndarray:
    """Return ``region`` as host bytes, staging device memory through a fresh buffer."""
    if not is_torch_region(region):
        return region
    out = staging_buffer(nbytes)
    copy_region(out, region)
    return out


def leaf_checksums(region: np.ndarray, meta: ValueMeta) -> tuple[int, ...]:
    """Checksum each leaf of a host region."""
    return tuple(checksum(leaf_bytes(region, leaf)) for leaf in meta.leaves)


def read_persistent(tier: PersistentTier, record: Record, dst: Any) -> None:
    """Read ``record`` into ``dst`` (host or device region), verifying it on the host."""
    if is_torch_region(dst):
        host = staging_buffer(record.meta.nbytes)
        tier.get_into(record, host)
        copy_region(dst, host)
    else:
        tier.get_into(record, dst)


def region_of(tier: Any, copy_extent: Any, nbytes: int) -> Any:
    """Return the region of an extent in a memory tier."""
    assert isinstance(tier, MemoryTier)
    return tier.region(copy_extent, nbytes)
