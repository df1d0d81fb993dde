"""Replay a trace of stores and revisits against the real policies, inline and deterministic.

This is the inline executor: the same eviction policy and predictor objects the cache uses,
driven one event at a time over a modelled fast tier of ``capacity`` equal-size slots above
a durable tier that holds everything. No threads, no clock, no I/O, so a trace always gives
the same hits. ``tiered bench revisit --trace`` and the policy tests use it; the simulator
of a later issue can build on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal

from tiered.policies.base import (
    NEVER,
    EventContext,
    EvictionPolicy,
    PolicySpec,
    PredictContext,
    Predictor,
    PredictorSpec,
    VictimContext,
    make_eviction,
    make_predictor,
)

Op = tuple[Literal["store", "revisit", "hint", "rollback"], Any]


@dataclasses.dataclass
class ReplayResult:
    """Counts from one replay."""

    revisits: int = 0
    hits: int = 0
    prefetches: int = 0
    prefetch_hits: int = 0
    wasted_prefetches: int = 0
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        """Share of revisits served from the fast tier."""
        return self.hits / self.revisits if self.revisits else 0.0


class Replay:
    """A fast tier of ``capacity`` slots over an unbounded durable tier, driven inline.

    Parameters
    ----------
    capacity : int
        Entries the fast tier holds (every entry is one slot).
    eviction : str, policy or factory
        As for :class:`tiered.Cache`.
    prefetch : str, predictor, factory or None
        As for :class:`tiered.Cache`; ``False`` turns prefetching off.
    depth : int
        Prefetches the pump may issue after each event (the transfer bandwidth per step).
    """

    def __init__(self, capacity: int, *, eviction: PolicySpec = "lru",
                 prefetch: PredictorSpec | Literal[False] = None, depth: int = 1) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 slot, got {capacity}")
        self.capacity, self.depth = capacity, depth
        self.eviction: EvictionPolicy = make_eviction(eviction)
        self.predictor: Predictor | None = None if prefetch is False else make_predictor(prefetch)
        self.held: dict[Any, bool] = {}  # key in the fast tier -> prefetched and not yet used
        self.known: set[Any] = set()
        self.consumed: set[Any] = set()
        self.result = ReplayResult()
        self._now = 0.0

    def _ctx(self, **kw: Any) -> EventContext:
        self._now += 1
        return EventContext(nbytes=1, now=self._now, **kw)

    def _forecast(self, budget: float) -> list[Any]:
        if self.predictor is None:
            return []
        return self.predictor.predict(ctx=PredictContext(sizes=dict.fromkeys(self.known, 1),
                                                         budget_bytes=budget, now=self._now))

    def _make_room(self, limit: float) -> bool:
        """Evict one entry forecast after ``limit`` (any entry if ``limit`` is -1)."""
        if len(self.held) < self.capacity:
            return True
        next_use = {k: i for i, k in enumerate(self._forecast(NEVER))}
        pool = {k for k in self.held if next_use.get(k, NEVER) > limit}
        if not pool:
            return False
        victim = self.eviction.victim(pool, ctx=VictimContext(
            need_bytes=1, now=self._now, next_use=next_use, durable=pool,
            consumed=pool & self.consumed))
        if victim not in pool:
            return False
        self._drop(victim)
        self.result.evictions += 1
        return True

    def _drop(self, key: Any) -> None:
        if self.held.pop(key):
            self.result.wasted_prefetches += 1
        self.eviction.observe("remove", key, ctx=self._ctx())

    def _load(self, key: Any, *, prefetched: bool) -> None:
        self.held[key] = prefetched
        self.eviction.observe("insert", key, ctx=self._ctx())

    def store(self, key: Any) -> None:
        """Capture ``key`` into the fast tier (a new version replaces the old one)."""
        if key in self.held:
            self._drop(key)
        self._make_room(-1.0)
        self._load(key, prefetched=False)
        self.known.add(key)
        self.consumed.discard(key)
        self._signal("store", key)

    def revisit(self, key: Any) -> bool:
        """Read ``key``; return whether the fast tier had it."""
        if key not in self.known:
            raise KeyError(f"replay: {key!r} was never stored")
        self.result.revisits += 1
        hit = key in self.held
        if hit:
            self.result.hits += 1
            self.result.prefetch_hits += self.held[key]
            self.held[key] = False
            self.eviction.observe("access", key, ctx=self._ctx())
        elif self._make_room(-1.0):  # demand first: the read lands before any prefetch
            self._load(key, prefetched=False)
        self.consumed.add(key)
        self._signal("revisit", key)
        return hit

    def _signal(self, signal: Any, key: Any, hints: tuple[Any, ...] = ()) -> None:
        if self.predictor is not None:
            self.predictor.observe(signal, key, ctx=self._ctx(hints=hints))
        self._pump()

    def hint(self, keys: Iterable[Any], *, rollback: bool = False) -> None:
        """Pass the caller's order to the predictor, as ``Cache.hint`` does."""
        self._signal("rollback" if rollback else "hint", None, tuple(keys))

    def _pump(self) -> None:
        """Issue up to ``depth`` prefetches in forecast order, as the cache's pump does."""
        issued = 0
        for rank, key in enumerate(self._forecast(self.capacity)):
            if issued >= self.depth:
                return
            if key in self.held:
                continue
            if not self._make_room(rank):
                return
            self._load(key, prefetched=True)
            self.result.prefetches += 1
            issued += 1

    def run(self, ops: Iterable[Op]) -> ReplayResult:
        """Apply each ``(op, key)`` in turn; return the counts."""
        for op, key in ops:
            if op == "store":
                self.store(key)
            elif op == "revisit":
                self.revisit(key)
            else:
                self.hint(key, rollback=op == "rollback")
        return self.result
