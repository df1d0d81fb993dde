"""Classic eviction orders: LRU, FIFO and LFU."""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Collection
from typing import Any

from tiered.policies.base import Event, EventContext, EvictionPolicy, VictimContext


class LRU:
    """Evict the least recently inserted-or-accessed candidate."""

    def __init__(self) -> None:
        self._order: OrderedDict[Any, None] = OrderedDict()

    def observe(self, event: Event, key: Any, *, ctx: EventContext) -> None:
        """Move ``key`` to the most-recent end, or forget it on ``remove``."""
        if event == "remove":
            self._order.pop(key, None)
        else:
            self._order[key] = None
            self._order.move_to_end(key)

    def victim(self, candidates: Collection[Any], *, ctx: VictimContext) -> Any | None:
        """Return the oldest candidate in recency order."""
        pool = candidates if isinstance(candidates, (set, frozenset, dict)) else set(candidates)
        for key in self._order:
            if key in pool:
                return key
        return next(iter(candidates), None)


class FIFO(LRU):
    """Evict the candidate that entered the tier first; accesses do not reorder."""

    def observe(self, event: Event, key: Any, *, ctx: EventContext) -> None:
        """Record insertion order only."""
        if event == "remove":
            self._order.pop(key, None)
        elif event == "insert":
            self._order[key] = None
            self._order.move_to_end(key)


class LFU:
    """Evict the least frequently accessed candidate (ties: least recently inserted)."""

    def __init__(self) -> None:
        self._counts: Counter[Any] = Counter()
        self._fifo = FIFO()

    def observe(self, event: Event, key: Any, *, ctx: EventContext) -> None:
        """Count accesses."""
        self._fifo.observe(event, key, ctx=ctx)
        if event == "remove":
            self._counts.pop(key, None)
        else:
            self._counts[key] += 1

    def victim(self, candidates: Collection[Any], *, ctx: VictimContext) -> Any | None:
        """Return the candidate with the fewest accesses."""
        if not candidates:
            return None
        low = min(self._counts.get(k, 0) for k in candidates)
        return self._fifo.victim({k for k in candidates if self._counts.get(k, 0) == low},
                                 ctx=ctx)


REGISTRY: dict[str, Callable[[], EvictionPolicy]] = {"lru": LRU, "fifo": FIFO, "lfu": LFU}
