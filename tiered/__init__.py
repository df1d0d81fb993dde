"""tiered: cheap checkpoints, fast revisits, over GPU, host, burst buffer and HDF5 tiers."""

from tiered.cache import Cache
from tiered.config import CacheConfig
from tiered.errors import (
    BackgroundError,
    CacheClosedError,
    CorruptDataError,
    ReadOnlyError,
    TieredError,
    TierFullError,
    TierLockedError,
    UnknownKeyError,
    UnknownVersionError,
    VersionFailedError,
)
from tiered.stats import CacheStats, TierStats
from tiered.tiers import DeviceTier, DirectoryTier, HDF5Tier, HostTier, MemoryTier, PersistentTier
from tiered.versions import Change, Comparison, Version, compare

__version__ = "0.1.0"
__all__ = ["BackgroundError", "Cache", "CacheClosedError", "CacheConfig", "CacheStats",
           "Change", "Comparison", "CorruptDataError", "DeviceTier", "DirectoryTier",
           "HDF5Tier", "HostTier", "MemoryTier", "PersistentTier", "ReadOnlyError",
           "TierFullError", "TierLockedError", "TierStats", "TieredError", "UnknownKeyError",
           "UnknownVersionError", "Version", "VersionFailedError", "__version__", "compare"]
