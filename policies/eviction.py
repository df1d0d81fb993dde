"""Classic eviction orders: LRU, FIFO and LFU.

Each keeps its own order of the tier's copies, next victim first, in plain dicts (insertion
ordered); the cache may only evict some copies (clean, unpinned), so a victim is the first
candidate in that order. Nothing here relies on how a library copies its caches: with
cachetools before 7.3.1 (and in 8.0.0) a copy shared its order with the original, and
victims came out wrong.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection
from typing import Any

from tiered.policies.base import Event, EventContext, VictimContext


class _Ordered:
    """An eviction order kept in a dict: the first key is the next victim."""

    def __init__(self) -> None:
        self._order: dict[Any, None] = {}

    def _touch(self, key: Any, *, inserted: bool) -> None:
        """Move ``key`` where an insert or access puts it."""
        self._order.pop(key, None)
        self._order[key] = None

    def observe(self, event: Event, key: Any, *, ctx: EventContext) -> None:
        """Track ``insert``/``access``/``remove`` of ``key``."""
        if event == "remove":
            self._order.pop(key, None)
        elif event == "insert" or key not in self._order:
            self._touch(key, inserted=True)
        else:
            self._touch(key, inserted=False)

    def order(self) -> list[Any]:
        """Return the tracked keys, next victim first (for tests and the simulator)."""
        return list(self._order)

    def victim(self, candidates: Collection[Any], *, ctx: VictimContext) -> Any | None:
        """Return the first candidate in the eviction order."""
        pool = candidates if isinstance(candidates, (set, frozenset, dict)) else set(candidates)
        for key in self.order():
            if key in pool:
                return key
        return next(iter(candidates), None)


class LRU(_Ordered):
    """Evict the least recently inserted-or-accessed candidate."""


class FIFO(_Ordered):
    """Evict the candidate that entered the tier first; accesses do not reorder."""

    def _touch(self, key: Any, *, inserted: bool) -> None:
        if inserted:
            super()._touch(key, inserted=True)


class LFU(_Ordered):
    """Evict the least frequently used candidate (ties: the one that reached it first).

    An insert counts as a use, as in cachetools.
    """

    def __init__(self) -> None:
        super().__init__()
        self._uses: dict[Any, tuple[int, int]] = {}  # key -> (uses, when it reached them)
        self._seq = itertools.count()

    def _touch(self, key: Any, *, inserted: bool) -> None:
        uses = self._uses.get(key, (0, 0))[0] + 1
        self._uses[key] = (uses, next(self._seq))
        self._order[key] = None

    def observe(self, event: Event, key: Any, *, ctx: EventContext) -> None:
        """Track ``insert``/``access``/``remove`` of ``key``."""
        if event == "remove":
            self._uses.pop(key, None)
        super().observe(event, key, ctx=ctx)

    def order(self) -> list[Any]:
        """Return the tracked keys, next victim first."""
        return sorted(self._order, key=self._uses.__getitem__)

    def victim(self, candidates: Collection[Any], *, ctx: VictimContext) -> Any | None:
        """Return the tracked candidate used least (one pass, no sort)."""
        uses = self._uses
        best = min((k for k in candidates if k in uses), key=uses.__getitem__, default=None)
        return best if best is not None else next(iter(candidates), None)
