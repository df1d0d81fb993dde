"""Classic eviction orders on cachetools: LRU, FIFO and LFU.

A cachetools cache (unbounded, sized in payload bytes) mirrors the tier's copies; its own
``popitem`` order is the eviction order. The cache may only evict some copies (clean,
unpinned), so a victim is found by popping from a shallow copy until a candidate comes out.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Collection
from typing import Any

import cachetools
from tiered.policies.base import Event, EventContext, VictimContext


class _Ordered:
    """An eviction order kept by a cachetools cache class."""

    factory: type[cachetools.Cache] = cachetools.LRUCache

    def __init__(self) -> None:
        self._cache = self.factory(maxsize=math.inf, getsizeof=lambda nbytes: max(1, nbytes))

    def observe(self, event: Event, key: Any, *, ctx: EventContext) -> None:
        """Mirror ``insert``/``access``/``remove`` of ``key`` in the cachetools cache."""
        if event == "remove":
            self._cache.pop(key, None)
        elif event == "insert" or key not in self._cache:
            self._cache[key] = ctx.nbytes
        else:
            self._cache[key]  # noqa: B018 - a read is what moves the key in cachetools

    def victim(self, candidates: Collection[Any], *, ctx: VictimContext) -> Any | None:
        """Return the first candidate in the cachetools eviction order."""
        pool = candidates if isinstance(candidates, (set, frozenset, dict)) else set(candidates)
        probe = copy.copy(self._cache)
        while probe:
            key, _ = probe.popitem()
            if key in pool:
                return key
        return next(iter(candidates), None)

    def order(self) -> list[Any]:
        """Return the tracked keys, next victim first (for tests and the simulator)."""
        probe = copy.copy(self._cache)
        return [probe.popitem()[0] for _ in range(len(probe))]


class LRU(_Ordered):
    """Evict the least recently inserted-or-accessed candidate."""

    factory = cachetools.LRUCache


class FIFO(_Ordered):
    """Evict the candidate that entered the tier first; accesses do not reorder."""

    factory = cachetools.FIFOCache


class LFU(_Ordered):
    """Evict the least frequently used candidate (ties: the one that reached it first)."""

    factory = cachetools.LFUCache
