"""Host RAM tier: one page-aligned, pre-faulted buffer handed out in extents."""

from __future__ import annotations

import ctypes
import logging
import mmap
import weakref
from typing import Any

import numpy as np

from tiered.arena import Extent
from tiered.errors import TieredError
from tiered.tiers.base import MemoryTier, cuda_torch

log = logging.getLogger(__name__)


def _anonymous_map(nbytes: int, prefault: bool) -> mmap.mmap:
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if prefault:
        flags |= getattr(mmap, "MAP_POPULATE", 0)  # fault every page in now, in the kernel
    return mmap.mmap(-1, max(nbytes, 1), flags=flags)


def _cuda_runtime(pinned: bool | None) -> Any:
    """Return torch's CUDA runtime bindings if the arena should be pinned, else ``None``.

    ``pinned=None`` pins only when torch is already imported and sees a CUDA device
    (:func:`~tiered.tiers.base.cuda_torch`); ``pinned=True`` insists.
    """
    if pinned is not None and not isinstance(pinned, bool):
        raise TypeError(f"HostTier(pinned=...) takes True, False or None, got {pinned!r}")
    if pinned is False:
        return None
    if pinned is None:
        torch = cuda_torch()
        return None if torch is None else torch.cuda.cudart()
    try:
        import torch
    except ImportError as exc:
        raise TieredError("HostTier(pinned=True) needs PyTorch with CUDA") from exc
    if torch.cuda.is_available():
        return torch.cuda.cudart()
    raise TieredError("HostTier(pinned=True): CUDA is not available on this machine; "
                          "leave pinned unset (or False) to keep host memory pageable")


def _register(buf: np.ndarray, pinned: bool | None) -> Any:
    """Page-lock ``buf`` for the GPU (``cudaHostRegister``); return the runtime, or ``None``."""
    cudart = _cuda_runtime(pinned)
    if cudart is None or len(buf) == 0:
        return None
    if not hasattr(cudart, "cudaHostRegister"):  # a torch build without the binding
        problem = "this torch build cannot page-lock memory (no cudaHostRegister)"
    else:
        rc = int(cudart.cudaHostRegister(buf.ctypes.data, len(buf), 1))  # 1: portable
        if rc == 0:
            return cudart
        problem = (f"cudaHostRegister of {len(buf)} bytes failed with CUDA error {rc} "
                   "(too much locked memory?)")
        _clear_cuda_error()
    if pinned:
        raise TieredError(f"HostTier(pinned=True): {problem}")
    log.warning("host tier stays pageable: %s", problem)
    return None


def _clear_cuda_error() -> bool:
    """Reset this thread's CUDA "last error" after a failed runtime call; whether it could.

    torch checks that error after its next kernel launch and would blame the launch.
    torch does not bind ``cudaGetLastError``: call it in the CUDA runtime torch loaded.
    """
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcudart" in line}
    except OSError:
        paths = set()
    for path in sorted(paths):
        try:
            ctypes.CDLL(path).cudaGetLastError()
            return True
        except (OSError, AttributeError):
            continue
    log.debug("could not reset the CUDA error state after a failed cudaHostRegister")
    return False


class HostTier(MemoryTier):
    """Host memory, pooled.

    The whole capacity is mapped once (page-aligned) and, with ``prefault=True``, faulted in
    at construction: a capture then costs one copy into memory that is already there, never
    a page fault (a fresh allocation copies 4–6× slower on this kind of machine).

    On a machine with a CUDA device the buffer is also page-locked (``cudaHostRegister``),
    so copies between it and GPU memory run at the link's DMA speed instead of being staged
    through the driver's own pinned buffer.

    Parameters
    ----------
    capacity : int or str
        Bytes, or a string such as ``"4GiB"``.
    prefault : bool
        Fault the buffer in at construction (costs about a second per few GiB).
    pinned : bool or None
        Page-lock the buffer for CUDA copies. ``None`` (default): when torch is already
        imported and sees a CUDA device. ``True``: always (``TieredError`` without CUDA).
        ``False``: never (page-locked memory cannot be swapped out).
    name : str
        Name used in statistics and messages.
    """

    def __init__(self, capacity: int | str = "1GiB", *, prefault: bool = True,
                 pinned: bool | None = None, name: str = "host") -> None:
        super().__init__(capacity=capacity, name=name)
        assert self.capacity_bytes is not None
        self._map = _anonymous_map(self.capacity_bytes, prefault)
        self._buf = np.frombuffer(self._map, dtype=np.uint8)[: self.capacity_bytes]
        cudart = _register(self._buf, pinned)
        # unlocked at close(), or when the tier is collected unclosed (before its mapping)
        self._unlock = (None if cudart is None else
                        weakref.finalize(self, cudart.cudaHostUnregister, self._buf.ctypes.data))
        if self._unlock is not None:
            self._unlock.atexit = False  # the process's end frees it; CUDA may be gone then

    @property
    def pinned(self) -> bool:
        """Whether the buffer is page-locked for CUDA copies."""
        return self._unlock is not None and self._unlock.alive

    def region(self, extent: Extent, nbytes: int) -> np.ndarray:
        """Return the uint8 view of an extent."""
        return self._buf[extent.offset: extent.offset + nbytes]

    def close(self) -> None:
        """Drop the buffer (views handed out keep the mapping alive until released)."""
        self.closed = True
        if self.pinned:  # the mapping may outlive us (views); unlock it now
            torch = cuda_torch()
            if torch is not None:
                torch.cuda.synchronize()  # a copy still reading this memory ends first
            assert self._unlock is not None
            self._unlock()
