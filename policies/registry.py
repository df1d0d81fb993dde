"""Policies and predictors by name, as ``tiered.Cache(eviction=..., prefetch=...)`` takes them."""

from __future__ import annotations

from collections.abc import Callable

from tiered.policies.base import EvictionPolicy, Predictor
from tiered.policies.eviction import FIFO, LFU, LRU
from tiered.policies.forecast import Belady, Score
from tiered.policies.predictors import Composite, Hinted, Markov, Recent, Reverse, Stride

EVICTION: dict[str, Callable[[], EvictionPolicy]] = {
    "lru": LRU, "fifo": FIFO, "lfu": LFU, "score": Score, "belady": Belady,
}


def _with_hints(*learned: Callable[[], Predictor]) -> Callable[[], Predictor]:
    """Explicit hints first, then the learned predictors (every named predictor does this)."""
    return lambda: Composite(Hinted(), *(make() for make in learned))


PREDICTORS: dict[str, Callable[[], Predictor]] = {
    "hinted": Hinted,
    "reverse": _with_hints(Reverse),
    "stride": _with_hints(Stride),
    "markov": _with_hints(Markov),
    "recent": _with_hints(Recent),
    "auto": _with_hints(Reverse, Stride, Markov),
}
