"""Storage tiers: each stores bytes and nothing else (no policy, no threads)."""

from tiered.tiers.base import MemoryTier, PersistentTier, Record, ScanReport, Tier
from tiered.tiers.device import DeviceTier
from tiered.tiers.directory import DirectoryTier
from tiered.tiers.hdf5 import HDF5Tier
from tiered.tiers.host import HostTier

__all__ = ["DeviceTier", "DirectoryTier", "HDF5Tier", "HostTier", "MemoryTier",
           "PersistentTier", "Record", "ScanReport", "Tier"]
