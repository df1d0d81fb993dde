"""Counters the cache keeps, per tier and overall (mutated under the cache lock)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class TierStats:
    """Per-tier counters.

    ``bytes_in`` counts the payloads that came into the tier; ``bytes_written`` what its
    files hold of them (a version's leaves equal to a kept value's are not written again).
    """

    hits: int = 0
    misses: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    bytes_written: int = 0
    evictions: int = 0
    prefetches: int = 0
    entries: int = 0
    used_bytes: int = 0
    capacity_bytes: int | None = None


@dataclasses.dataclass
class CacheStats:
    """Whole-cache counters; ``tiers`` maps tier name to :class:`TierStats`.

    ``blocked_s`` is time callers spent inside ``store`` waiting for room; ``stall_s`` is
    time ``revisit`` spent on data that was not in a memory tier (reads from a persistent
    tier, or waiting for an in-flight prefetch). ``prefetch_hits`` counts revisits served by
    a prefetched copy; ``late_prefetches`` revisits that waited for one still in flight (for
    ``late_prefetch_wait_s`` in all); ``wasted_prefetches`` prefetched copies evicted or
    dropped before any revisit used them; ``borrowed`` revisits answered with read-only
    views (``copy=False``) rather than copies.
    """

    tiers: dict[str, TierStats]
    stores: int = 0
    revisits: int = 0
    bytes_stored: int = 0
    blocked_s: float = 0.0
    stall_s: float = 0.0
    prefetches: int = 0
    prefetch_hits: int = 0
    late_prefetches: int = 0
    late_prefetch_wait_s: float = 0.0
    wasted_prefetches: int = 0
    borrowed: int = 0
    corrupt_reads: int = 0
    background_errors: int = 0

    @property
    def stall_per_revisit_s(self) -> float:
        """Mean seconds a revisit stalled."""
        return self.stall_s / self.revisits if self.revisits else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Return a plain, JSON-serialisable copy."""
        return {**dataclasses.asdict(self), "stall_per_revisit_s": self.stall_per_revisit_s}
