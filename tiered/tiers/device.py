"""Device memory tier: one torch buffer on a device ("cuda" by default)."""

from __future__ import annotations

from typing import Any

from tiered.arena import Extent
from tiered.errors import TieredError
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
    """

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
        if self.device.type == "cpu":
            self._buf.zero_()  # pre-fault, as the host tier does

    def region(self, extent: Extent, nbytes: int) -> Any:
        """Return the uint8 tensor view of an extent."""
        return self._buf[extent.offset: extent.offset + nbytes]

    def synchronize(self) -> None:
        """Wait for queued copies on this device (no-op on the CPU)."""
        if self.device.type == "cuda":
            _import_torch().cuda.synchronize(self.device)
