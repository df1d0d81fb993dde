"""Eviction by forecast: the score policy (HPDC'23 multi-level caching) and Belady's MIN.

Both read the predictor's forecast from :class:`~tiered.policies.VictimContext`; ties fall
back to least-recently-used order.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Collection
from typing import Any

from tiered.policies.base import NEVER, Event, EventContext, VictimContext


class _Recency:
    """Last-use counter per key: the tie-break of the forecast policies (O(1) per event)."""

    def __init__(self) -> None:
        self._last: dict[Any, int] = {}
        self._clock = itertools.count()

    def observe(self, event: Event, key: Any, *, ctx: EventContext) -> None:
        """Note the use of ``key``, or forget it on ``remove``."""
        if event == "remove":
            self._last.pop(key, None)
        else:
            self._last[key] = next(self._clock)

    def age(self, key: Any) -> int:
        """Return a number that grows the longer ago ``key`` was last used."""
        return -self._last.get(key, -1)


class Belady(_Recency):
    """Evict the candidate whose next use is farthest in the forecast (never = farthest).

    With a perfect forecast of every future access this is Belady's MIN, the optimum for
    hit count in a single tier of unit-size entries.
    """

    def victim(self, candidates: Collection[Any], *, ctx: VictimContext) -> Any | None:
        """Return the candidate used farthest in the future (LRU among equals)."""
        if not candidates:
            return None
        return max(candidates, key=lambda k: (ctx.distance(k), self.age(k)))


class Score(_Recency):
    """Score-based eviction for adjoint and rollback histories.

    A copy's eviction score orders, most evictable first:

    1. copies durable below (a persistent tier has them) before copies only in memory below;
    2. already-consumed adjoint states (revisited, not forecast again) before anything else;
    3. copies not expected again, then those needed latest according to the forecast;
    4. least recently used among equals.

    Parameters
    ----------
    durable_first : bool
        Apply rule 1 (the default). Off, the forecast alone decides.
    """

    def __init__(self, *, durable_first: bool = True) -> None:
        super().__init__()
        self.durable_first = durable_first

    def victim(self, candidates: Collection[Any], *, ctx: VictimContext) -> Any | None:
        """Return the candidate with the highest eviction score."""
        if not candidates:
            return None
        # the score of every candidate, built by C iterators (this runs per eviction, over
        # every clean copy of the tier): (durable, consumed, distance, age, -position),
        # so that the first of equal candidates wins, as max() with a key would pick it
        keys = list(candidates)
        distance = list(map(ctx.next_use.get, keys, itertools.repeat(NEVER)))
        consumed = map(operator.and_, map(ctx.consumed.__contains__, keys),
                       map(operator.eq, distance, itertools.repeat(NEVER)))
        durable = (map(ctx.durable.__contains__, keys) if self.durable_first
                   else itertools.repeat(True, len(keys)))
        age = map(operator.neg, map(self._last.get, keys, itertools.repeat(-1)))
        best = max(zip(durable, consumed, distance, age, range(0, -len(keys), -1),
                       strict=True))
        return keys[-best[-1]]
