"""Prefetch predictors: what will be revisited next, in order.

Each answers :meth:`predict` from what it has observed. None reads a clock, does I/O or starts
a thread. A predictor that is unsure predicts nothing: a wrong prediction costs a transfer and
may push out something useful, a missing one only costs the demand read that would have
happened anyway.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator
from typing import Any

from tiered.policies.base import (
    EventContext,
    PredictContext,
    Predictor,
    Signal,
    take_budget,
)


class Hinted:
    """The caller's explicit order (``cache.hint``), consumed as it is read.

    Hints queue up behind earlier ones (a key already queued keeps its place); a revisit of
    a queued key drops it and every key queued before it (the reader has passed them). A
    rollback hint goes to the front of the queue. Every event costs O(1) per key it adds or
    drops (a backward pass of n hinted states: O(n) in all, not O(n) per revisit).
    """

    def __init__(self) -> None:
        self._queue: collections.OrderedDict[Any, None] = collections.OrderedDict()

    def observe(self, signal: Signal, key: Any, *, ctx: EventContext) -> None:
        """Queue hints, consume revisits, forget discarded keys."""
        queue = self._queue
        if signal == "hint":
            for k in ctx.hints:
                queue.setdefault(k, None)
        elif signal == "rollback":
            for k in reversed(dict.fromkeys(ctx.hints)):  # the first hint ends up in front
                queue[k] = None
                queue.move_to_end(k, last=False)
        elif signal == "revisit" and key in queue:
            while queue.popitem(last=False)[0] != key:
                pass
        elif signal == "discard":
            queue.pop(key, None)

    def predict(self, *, ctx: PredictContext) -> list[Any]:
        """Return the queued keys that are held now, in hint order."""
        return take_budget(self._queue, ctx)


class Reverse:
    """Adjoint sweeps: the newest stored state not yet revisited is revisited next.

    The stored keys form a stack: a store pushes (a re-stored key moves to the top), a
    revisit pops that key. This covers one backward pass after a forward pass, states stored
    every k steps, states recomputed and stored during the backward pass, and several
    forward/backward sweeps in a row. After a revisit that was not the top of the stack the
    predictor goes quiet until the pattern returns (so random access prefetches nothing).
    """

    def __init__(self) -> None:
        self._stack: dict[Any, None] = {}
        self._in_order = True

    def observe(self, signal: Signal, key: Any, *, ctx: EventContext) -> None:
        """Push stores, pop revisits, track whether revisits follow the stack."""
        if signal == "store":
            self._stack.pop(key, None)
            self._stack[key] = None
            self._in_order = True
        elif signal == "revisit":
            top = next(reversed(self._stack), None)
            self._in_order = key == top
            self._stack.pop(key, None)
        elif signal == "discard":
            self._stack.pop(key, None)

    def predict(self, *, ctx: PredictContext) -> list[Any]:
        """Return the stack from its top down, if revisits follow it."""
        return take_budget(reversed(self._stack), ctx) if self._in_order else []


def _numbered(key: Any) -> tuple[tuple[Any, ...], int] | None:
    """Split a key into (prefix, trailing integer), or ``None`` if it has none."""
    if isinstance(key, int) and not isinstance(key, bool):
        return (), key
    if isinstance(key, tuple) and key and isinstance(key[-1], int):
        return key[:-1], key[-1]
    return None


def _join(prefix: tuple[Any, ...], n: int) -> Any:
    return (*prefix, n) if prefix else n


class Stride:
    """A constant stride in the trailing integer of revisited keys (``("u", 0), ("u", 4)``...).

    Confident after ``confirm`` equal, non-zero steps in a row with the same key prefix.

    Parameters
    ----------
    confirm : int
        Equal steps needed before predicting (2: three keys in arithmetic progression).
    lookahead : int
        Farthest number of strides to look ahead for held keys.
    """

    def __init__(self, *, confirm: int = 2, lookahead: int = 4096) -> None:
        self.confirm, self.lookahead = confirm, lookahead
        self._last: tuple[tuple[Any, ...], int] | None = None
        self._step = 0
        self._seen = 0

    def observe(self, signal: Signal, key: Any, *, ctx: EventContext) -> None:
        """Learn from revisits only."""
        if signal != "revisit":
            return
        here = _numbered(key)
        if here is None or self._last is None or here[0] != self._last[0]:
            self._step, self._seen = 0, 0
        else:
            step = here[1] - self._last[1]
            self._seen = self._seen + 1 if step == self._step and step else 1
            self._step = step
        self._last = here

    def _ahead(self) -> Iterator[Any]:
        assert self._last is not None
        prefix, n = self._last
        for i in range(1, self.lookahead + 1):
            yield _join(prefix, n + i * self._step)

    def predict(self, *, ctx: PredictContext) -> list[Any]:
        """Return the held keys along the stride, nearest first."""
        if self._last is None or self._step == 0 or self._seen < self.confirm:
            return []
        return take_budget(self._ahead(), ctx)


class Markov:
    """A first-order model of key-to-key transitions between revisits.

    Follows the most frequent successor while it is confident: seen at least ``min_count``
    times and at least ``min_share`` of the transitions out of the current key.

    Parameters
    ----------
    min_count : int
        Times a transition must have been seen.
    min_share : float
        Share of the outgoing transitions it must hold.
    """

    def __init__(self, *, min_count: int = 2, min_share: float = 0.5) -> None:
        self.min_count, self.min_share = min_count, min_share
        self._next: dict[Any, collections.Counter[Any]] = {}
        self._last: Any = None

    def observe(self, signal: Signal, key: Any, *, ctx: EventContext) -> None:
        """Count the transition from the previous revisit to this one."""
        if signal != "revisit":
            return
        if self._last is not None:
            self._next.setdefault(self._last, collections.Counter())[key] += 1
        self._last = key

    def _successor(self, key: Any) -> Any | None:
        counts = self._next.get(key)
        if not counts:
            return None
        best, n = counts.most_common(1)[0]
        if n < self.min_count or n < self.min_share * sum(counts.values()):
            return None
        return best

    def _chain(self) -> Iterator[Any]:
        seen = {self._last}
        key = self._successor(self._last)
        while key is not None and key not in seen:
            yield key
            seen.add(key)
            key = self._successor(key)

    def predict(self, *, ctx: PredictContext) -> list[Any]:
        """Return the confident chain of successors of the last revisited key."""
        return [] if self._last is None else take_budget(self._chain(), ctx)


class Recent:
    """Rollback: keep the newest stored keys hot; on a rollback, bring the target up first.

    A rollback signal with keys targets those keys; without keys it targets the newest
    stored key (the last good version, when a run checkpoints only good states). The target
    leads the forecast until it is revisited.
    """

    def __init__(self) -> None:
        self._order: dict[Any, None] = {}
        self._target: tuple[Any, ...] = ()

    def observe(self, signal: Signal, key: Any, *, ctx: EventContext) -> None:
        """Track store order and rollback targets."""
        if signal == "store":
            self._order.pop(key, None)
            self._order[key] = None
        elif signal == "discard":
            self._order.pop(key, None)
        elif signal == "rollback":
            newest = next(reversed(self._order), None)
            self._target = ctx.hints or (() if newest is None else (newest,))
        if signal in ("revisit", "discard") and key in self._target:
            self._target = tuple(k for k in self._target if k != key)

    def predict(self, *, ctx: PredictContext) -> list[Any]:
        """Return the rollback target first, then the newest stored keys."""
        return take_budget(itertools.chain(self._target, reversed(self._order)), ctx)


class Composite:
    """Several predictors in priority order: their forecasts are merged, first come first.

    Parameters
    ----------
    *parts : Predictor
        Explicit hints usually first, then learned predictors.
    """

    def __init__(self, *parts: Predictor) -> None:
        if not parts:
            raise ValueError("Composite needs at least one predictor")
        self.parts = parts

    def observe(self, signal: Signal, key: Any, *, ctx: EventContext) -> None:
        """Pass the event to every part."""
        for part in self.parts:
            part.observe(signal, key, ctx=ctx)

    def predict(self, *, ctx: PredictContext) -> list[Any]:
        """Return each part's forecast in turn, without repeats, within the budget."""
        forecasts = [f for f in (p.predict(ctx=ctx) for p in self.parts) if f]
        if len(forecasts) <= 1:  # one part speaks: its forecast is already distinct and fits
            return forecasts[0] if forecasts else []
        first = forecasts[0]
        if all(f == first[:len(f)] for f in forecasts[1:]):  # the rest add nothing (hints
            return first  # that match the learned order, as in an adjoint's backward pass)
        return take_budget(itertools.chain.from_iterable(forecasts), ctx)
