"""Host RAM tier: one page-aligned, pre-faulted buffer handed out in extents."""

from __future__ import annotations

import ctypes
import logging
import mmap
import threading
import weakref
from typing import Any

import numpy as np

from tiered.arena import Extent
from tiered.errors import TieredError
from tiered.movers import LANE_PREFIX, cuda_torch
from tiered.tiers.base import MemoryTier

log = logging.getLogger(__name__)


MADV_POPULATE_WRITE = 23  # Linux >= 5.14: fault pages in writable without touching them
BACKGROUND_PREFAULT = 16 << 20  # smaller buffers are faulted in at once (a few ms)
PREFAULT_CHUNK = 2 << 20  # the background thread populates this much per system call


def _anonymous_map(nbytes: int, prefault: bool) -> mmap.mmap:
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if prefault:
        flags |= getattr(mmap, "MAP_POPULATE", 0)  # fault every page in now, in the kernel
    return mmap.mmap(-1, max(nbytes, 1), flags=flags)


def _madvise() -> Any:
    """Return libc's ``madvise`` through ctypes (which releases the GIL), or ``None``."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_POPULATE: list[Any] = []  # [madvise or None], probed once


def _populate_write() -> Any:
    """Return ``madvise`` if this kernel supports ``MADV_POPULATE_WRITE``, else ``None``."""
    if not _POPULATE:
        fn, probe = _madvise(), mmap.mmap(-1, mmap.PAGESIZE)
        try:
            addr = ctypes.addressof(ctypes.c_char.from_buffer(probe))  # no export kept
            ok = fn is not None and fn(addr, mmap.PAGESIZE, MADV_POPULATE_WRITE) == 0
        finally:
            probe.close()
        _POPULATE.append(fn if ok else None)
    return _POPULATE[0]


class _Prefault:
    """Faults a mapping in from its start, in a background thread, a chunk at a time.

    ``MADV_POPULATE_WRITE`` maps pages without writing to them, so a capture landing on a
    page meanwhile is never overwritten: it faults that page in itself, as with no
    prefault at all. The thread holds the mapping until it is done or stopped.
    """

    def __init__(self, mapping: mmap.mmap, nbytes: int, madvise: Any, name: str) -> None:
        self.done = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, args=(mapping, nbytes, madvise),
                                        name=f"{LANE_PREFIX}prefault-{name}", daemon=True)
        self._thread.start()

    def _run(self, mapping: mmap.mmap, nbytes: int, madvise: Any) -> None:
        view = np.frombuffer(mapping, dtype=np.uint8)
        addr = view.ctypes.data
        try:
            for start in range(0, nbytes, PREFAULT_CHUNK):
                if self._stop:
                    return
                if madvise(addr + start, min(PREFAULT_CHUNK, nbytes - start),
                           MADV_POPULATE_WRITE) != 0:  # e.g. out of memory: stores fault
                    log.debug("prefault stopped at %d bytes: errno %d", start,
                              ctypes.get_errno())
                    return
        finally:
            del view
            self.done.set()

    def stop(self) -> None:
        """Stop after the chunk in progress and wait for it."""
        self._stop = True
        self._thread.join()


def _cuda_runtime(pinned: bool | None) -> Any:
    """Return torch's CUDA runtime bindings if the arena should be pinned, else ``None``.

    ``pinned=None`` pins only when torch is already imported and sees a CUDA device
    (:func:`~tiered.movers.cuda_torch`); ``pinned=True`` insists.
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
    a page fault (a fresh allocation copies 4–6× slower on this kind of machine). With
    ``prefault="background"`` (from 16 MiB up, on Linux 5.14 or later) a background thread
    does it instead, from the buffer's start (``MADV_POPULATE_WRITE``, which writes
    nothing), so construction returns at once instead of after faulting every page; a capture
    that reaches a page first faults it in itself. The work is the same, beside the caller
    instead of before it. A page-locked buffer is always faulted in at construction.

    On a machine with a CUDA device the buffer is also page-locked (``cudaHostRegister``),
    so copies between it and GPU memory run at the link's DMA speed instead of being staged
    through the driver's own pinned buffer.

    Parameters
    ----------
    capacity : int or str
        Bytes, or a string such as ``"4GiB"``.
    prefault : bool or "background"
        Fault the buffer in at construction (it takes longer the larger the capacity), or in
        a background thread (see above), or not at all (``False``: each page faults on
        first use).
    pinned : bool or None
        Page-lock the buffer for CUDA copies. ``None`` (default): when torch is already
        imported and sees a CUDA device. ``True``: always (``TieredError`` without CUDA).
        ``False``: never (page-locked memory cannot be swapped out).
    name : str
        Name used in statistics and messages.
    """

    kind = "host"

    def __init__(self, capacity: int | str = "1GiB", *, prefault: bool | str = True,
                 pinned: bool | None = None, name: str = "host") -> None:
        if not (isinstance(prefault, bool) or prefault == "background"):
            raise ValueError(f"HostTier(prefault=...) takes True, False or 'background', "
                             f"got {prefault!r}")
        super().__init__(capacity=capacity, name=name)
        assert self.capacity_bytes is not None
        populate = (_populate_write() if prefault == "background"
                    and self.capacity_bytes >= BACKGROUND_PREFAULT else None)
        self._map = _anonymous_map(self.capacity_bytes, bool(prefault) and populate is None)
        self._buf = np.frombuffer(self._map, dtype=np.uint8)[: self.capacity_bytes]
        cudart = _register(self._buf, pinned)  # page-locking faults every page in itself
        self._prefault = (None if populate is None or cudart is not None else
                          _Prefault(self._map, self.capacity_bytes, populate, name))
        # unlocked at close(), or when the tier is collected unclosed (before its mapping)
        self._unlock = (None if cudart is None else
                        weakref.finalize(self, cudart.cudaHostUnregister, self._buf.ctypes.data))
        if self._unlock is not None:
            self._unlock.atexit = False  # the process's end frees it; CUDA may be gone then

    def wait_prefaulted(self, timeout: float | None = None) -> bool:
        """Wait until the buffer is faulted in; return whether it is (or needs no wait).

        With ``prefault="background"`` a large buffer is faulted in by a thread after
        construction, from its start (see the class notes); nothing needs this wait, a
        benchmark may want it.
        """
        return self._prefault is None or self._prefault.done.wait(timeout)

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
        if self._prefault is not None:
            self._prefault.stop()
        if self.pinned:  # the mapping may outlive us (views); unlock it now
            torch = cuda_torch()
            if torch is not None:
                torch.cuda.synchronize()  # a copy still reading this memory ends first
            assert self._unlock is not None
            self._unlock()
