"""Device memory tier: one torch buffer on a device ("cuda" by default)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from tiered.arena import Extent
from tiered.errors import TieredError
from tiered.movers import in_lane
from tiered.tiers.base import MemoryTier


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ImportError("DeviceTier needs PyTorch: pip install 'tiered[torch]'") from exc
    return torch


class DeviceTier(MemoryTier):
    """Accelerator memory, pooled in one pre-allocated torch ``uint8`` buffer.

    Parameters
    ----------
    capacity : int or str
        Bytes, or a string such as ``"1GiB"``.
    device : str
        A torch device; ``"cpu"`` exercises the same code path without a GPU (tests do).
    name : str
        Name used in statistics and messages.

    Raises
    ------
    TieredError
        If the device is a CUDA device and CUDA is not available.

    Notes
    -----
    On CUDA, background copies (drains out, prefetches in) run on a side stream per lane,
    so they overlap the caller's kernels instead of queueing between them. Each one first
    waits for the work callers had queued when it starts (on every stream they captured or
    revisited on), which orders it after the capture it drains and after any read of the
    memory it overwrites; it synchronises its stream before the copy counts as done.
    """

    kind = "device"
    context = True  # lanes copy on a side stream of their own

    def __init__(self, capacity: int | str = "1GiB", *, device: str = "cuda",
                 name: str = "device") -> None:
        super().__init__(capacity=capacity, name=name)
        torch = _import_torch()
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise TieredError(f"DeviceTier(device={device!r}): CUDA is not available on this "
                              "machine; use DeviceTier(device='cpu') or leave the device tier "
                              "out of tiers=[...]")
        assert self.capacity_bytes is not None
        self._buf = torch.empty(max(self.capacity_bytes, 1), dtype=torch.uint8,
                                device=self.device)
        self.device = self._buf.device  # "cuda" -> "cuda:k": side streams go on this GPU
        if self.device.type == "cpu":
            self._buf.zero_()  # pre-fault, as the host tier does
        self._cuda = self.device.type == "cuda"
        self._callers: set[Any] = set()  # the streams callers copied in or out on
        self._lanes: dict[int, Any] = {}  # a side stream per lane thread

    def region(self, extent: Extent, nbytes: int) -> Any:
        """Return the uint8 tensor view of an extent."""
        if self._cuda and not in_lane():
            self._callers.add(_import_torch().cuda.current_stream(self.device))
        return self._buf[extent.offset: extent.offset + nbytes]

    @contextlib.contextmanager
    def background(self) -> Iterator[None]:
        """Run a lane's copies on its side stream, after the callers' queued work."""
        if not self._cuda:
            yield
            return
        torch = _import_torch()
        ident = threading.get_ident()
        side = self._lanes.get(ident)
        if side is None:
            side = self._lanes[ident] = torch.cuda.Stream(device=self.device)
        with torch.cuda.stream(side):
            for caller in list(self._callers):
                side.wait_stream(caller)
            try:
                yield
            finally:
                side.synchronize()

    def synchronize(self) -> None:
        """Wait for queued copies on this device (no-op on the CPU)."""
        if self.device.type == "cuda":
            _import_torch().cuda.synchronize(self.device)
