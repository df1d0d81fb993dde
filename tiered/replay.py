"""Replay a trace of stores and revisits through the planner, inline and deterministic.

The inline executor of :class:`~tiered.planner.Planner`, the one the threaded cache drives:
a modelled fast tier of ``capacity`` equal-size slots above a durable tier that holds
everything. Every decision (which copy to evict, what to bring up next, in what order) is
the planner's; this module only carries them out on its model, one event at a time. No
threads, no clock, no I/O, so a trace always gives the same hits. ``tiered bench revisit
--trace`` and the policy tests use it; a simulator of many modelled ranks builds on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import numpy as np

from tiered.arena import PAGE, Arena, Extent
from tiered.index import Copy, Entry
from tiered.planner import Planner
from tiered.policies.base import NEVER, PolicySpec, PredictorSpec
from tiered.tiers.model import TierModel
from tiered.values import ValueMeta, flatten

Op = tuple[Literal["store", "revisit", "hint", "rollback"], Any]
SLOT = PAGE  # bytes of every modelled entry: one slot of the fast tier each
FAST, DURABLE = 0, 1


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


class _Predictorless:
    """Stands for ``prefetch=False``: forecasts nothing, and so prefetches nothing."""

    def observe(self, *args: Any, **kw: Any) -> None:
        """Ignore the event."""

    def predict(self, *, ctx: Any) -> list[Any]:
        """Forecast nothing."""
        return []


class _Stored:
    """The keys a replay holds; ``update(keys)`` adds keys stored long ago (cold, durable)."""

    def __init__(self, replay: Replay) -> None:
        self._replay = replay

    def update(self, keys: Iterable[Any]) -> None:
        """Hold each of ``keys`` in the durable tier only, as if stored long ago."""
        for key in keys:
            self._replay.stored_long_ago(key)

    def __contains__(self, key: object) -> bool:
        return key in self._replay.planner.index

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._replay.planner.index))

    def __len__(self) -> int:
        return len(self._replay.planner.index)


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
    horizon : float
        How far, in bytes, the eviction forecast looks (:attr:`Planner.horizon`). By default
        without end, in bytes and in keys, so that Belady sees the whole future it is given;
        the threaded cache looks as far as its memory tiers hold, and at most
        :data:`~tiered.planner.HORIZON_KEYS` keys (pass ``capacity * SLOT`` to model it).
    evict_ahead : bool
        A store that must evict also frees room for the next ones, as the cache's stores do
        (:meth:`Planner.ahead_bytes`; it matters from 16 slots up). Off by default.
    """

    def __init__(self, capacity: int, *, eviction: PolicySpec = "lru",
                 prefetch: PredictorSpec | Literal[False] = None, depth: int = 1,
                 horizon: float = NEVER, evict_ahead: bool = False) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 slot, got {capacity}")
        self.capacity, self.depth = capacity, depth
        models = [TierModel(name="fast", kind="modelled", persistent=False,
                            capacity_bytes=capacity * SLOT),
                  TierModel(name="durable", kind="modelled", persistent=True,
                            capacity_bytes=None)]
        self.planner = Planner(models, eviction, None if prefetch is False else prefetch,
                               prefetch_depth=max(depth, 1), horizon=horizon,
                               horizon_keys=NEVER if horizon == NEVER else None)
        self._ahead = self.planner.ahead_bytes(FAST, SLOT) if evict_ahead else 0
        if prefetch is False:
            self.planner.predictor = _Predictorless()
        self.eviction = self.planner.policies[FAST]
        self.predictor = None if prefetch is False else self.planner.predictor
        self.known = _Stored(self)
        self.result = ReplayResult()
        self._arena = Arena(capacity * SLOT)
        self._meta: ValueMeta = flatten(np.zeros(SLOT, np.uint8))[0]
        self._version = 0

    # ----------------------------------------------------------------- the model
    def _entry(self, key: Any) -> Entry:
        self._version += 1
        entry = Entry(key, self._version, self._meta, DURABLE)
        self.planner.add_copy(entry, Copy(DURABLE))  # durable at once: the model's rule
        return entry

    def stored_long_ago(self, key: Any) -> None:
        """Hold ``key`` in the durable tier only (cold), as a store from before the trace."""
        if key not in self.planner.index:
            self.planner.put(self._entry(key))

    def _room(self, limit: float, ahead: int = 0) -> Extent | None:
        """Reserve a fast slot, evicting what the planner chooses; ``None`` if it may not.

        ``limit``: only copies forecast after that position may go (-1: any). ``ahead``:
        bytes to free beyond this slot, for the stores to come.
        """
        while (extent := self._arena.allocate(SLOT)) is None:
            victims = self.planner.victims(FAST, SLOT, limit, ahead)
            if not victims:
                return None
            for key in victims:
                self._drop(self.planner.resident[FAST][key])
                self.result.evictions += 1
        return extent

    def _drop(self, entry: Entry) -> None:
        copy = self.planner.drop_copy(entry, FAST)
        if copy.prefetched and not copy.used:
            self.result.wasted_prefetches += 1
        assert copy.extent is not None
        self._arena.free(copy.extent)

    def _land(self, entry: Entry, extent: Extent, *, prefetched: bool) -> None:
        self.planner.add_copy(entry, Copy(FAST, extent=extent, prefetched=prefetched))

    # ----------------------------------------------------------------- the trace
    def store(self, key: Any) -> None:
        """Capture ``key`` into the fast tier (a new version replaces the old one)."""
        old = self.planner.index.get(key)
        if old is not None:
            if FAST in old.copies:
                self._drop(old)
            self.planner.drop_copy(old, DURABLE)
            self.planner.pop(key)
        extent = self._room(-1.0, self._ahead)
        entry = self._entry(key)
        if extent is not None:
            self._land(entry, extent, prefetched=False)
        self.planner.put(entry)
        self._signal("store", key)

    def revisit(self, key: Any) -> bool:
        """Read ``key``; return whether the fast tier had it."""
        entry = self.planner.index.get(key)
        if entry is None:
            raise KeyError(f"replay: {key!r} was never stored")
        self.result.revisits += 1
        copy = entry.copies.get(FAST)
        if copy is not None:
            self.result.hits += 1
            self.result.prefetch_hits += copy.prefetched and not copy.used
            copy.used = True
            self.planner.access(entry, FAST)
        elif (extent := self._room(-1.0)) is not None:  # demand first, then any prefetch
            self._land(entry, extent, prefetched=False)
        entry.consumed = True
        self._signal("revisit", key)
        return copy is not None

    def hint(self, keys: Iterable[Any], *, rollback: bool = False) -> None:
        """Pass the caller's order to the predictor, as ``Cache.hint`` does."""
        self._signal("rollback" if rollback else "hint", None, tuple(keys))

    def _signal(self, signal: Any, key: Any, hints: tuple[Any, ...] = ()) -> None:
        self.planner.signal(signal, key, nbytes=SLOT, hints=hints)
        self._pump()

    def _pump(self) -> None:
        """Bring up to ``depth`` entries up, in the planner's prefetch order."""
        issued = 0
        for rank, entry in self.planner.prefetch_order():
            if issued >= self.depth:
                return
            extent = self._room(rank)
            if extent is None:
                return  # later keys are needed later still: they may not push out more
            self._land(entry, extent, prefetched=True)
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
