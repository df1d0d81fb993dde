"""A first-fit extent allocator over one pre-allocated buffer (pure bookkeeping, no I/O)."""

from __future__ import annotations

import bisect
import dataclasses

PAGE = 4096


@dataclasses.dataclass(frozen=True)
class Extent:
    """A reserved byte range ``[offset, offset + size)`` of an arena."""

    offset: int
    size: int


class Arena:
    """Hand out page-aligned extents of ``capacity`` bytes; freed extents coalesce.

    Not thread-safe: the owning tier serialises calls.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._starts: list[int] = [0] if capacity else []  # sorted free-extent offsets
        self._sizes: dict[int, int] = {0: capacity} if capacity else {}
        self.used = 0

    @staticmethod
    def rounded(nbytes: int) -> int:
        """Return ``nbytes`` rounded up to whole pages (at least one page)."""
        return max(PAGE, -(-nbytes // PAGE) * PAGE)

    def allocate(self, nbytes: int) -> Extent | None:
        """Reserve an extent for ``nbytes`` bytes, or return ``None`` if none is free."""
        size = self.rounded(nbytes)
        for start in self._starts:
            free = self._sizes[start]
            if free >= size:
                self._take(start, free, size)
                self.used += size
                return Extent(start, size)
        return None

    def _take(self, start: int, free: int, size: int) -> None:
        idx = bisect.bisect_left(self._starts, start)
        del self._starts[idx]
        del self._sizes[start]
        if free > size:
            self._starts.insert(idx, start + size)
            self._sizes[start + size] = free - size

    def free(self, extent: Extent) -> None:
        """Return ``extent`` to the free list, merging it with free neighbours."""
        start, size = extent.offset, extent.size
        idx = bisect.bisect_left(self._starts, start)
        if idx < len(self._starts) and self._starts[idx] == start + size:
            size += self._sizes.pop(self._starts.pop(idx))
        if idx > 0:
            prev = self._starts[idx - 1]
            if prev + self._sizes[prev] == start:
                self._sizes[prev] += size
                self.used -= extent.size
                return
        self._starts.insert(idx, start)
        self._sizes[start] = size
        self.used -= extent.size

    def largest_free(self) -> int:
        """Return the size of the largest free extent."""
        return max(self._sizes.values(), default=0)
