"""Storage tiers: each stores bytes and nothing else (no policy, no threads)."""

from tiered.tiers.base import MemoryTier, Tier
from tiered.tiers.device import DeviceTier
from tiered.tiers.directory import DirectoryTier
from tiered.tiers.hdf5 import HDF5Tier
from tiered.tiers.host import HostTier
from tiered.tiers.persistent import PersistentTier
from tiered.tiers.records import Record, ScanReport

__all__ = ["DeviceTier", "DirectoryTier", "HDF5Tier", "HostTier", "MemoryTier",
           "PersistentTier", "Record", "ScanReport", "Tier"]
