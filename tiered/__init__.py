"""tiered: cheap checkpoints, fast revisits, over GPU, host, burst buffer and HDF5 tiers."""

from tiered.cache import Cache
from tiered.config import CacheConfig
from tiered.errors import (
    BackgroundError,
    CacheClosedError,
    CorruptDataError,
    TieredError,
    TierFullError,
    UnknownKeyError,
)
from tiered.stats import CacheStats, TierStats
from tiered.tiers import DeviceTier, DirectoryTier, HDF5Tier, HostTier, MemoryTier, PersistentTier

__version__ = "0.1.0"
__all__ = ["BackgroundError", "Cache", "CacheClosedError", "CacheConfig", "CacheStats",
           "CorruptDataError", "DeviceTier", "DirectoryTier", "HDF5Tier", "HostTier",
           "MemoryTier", "PersistentTier", "TierFullError", "TierStats", "TieredError",
           "UnknownKeyError", "__version__"]
