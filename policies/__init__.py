"""Pure decision objects: eviction policies and prefetch predictors.

A policy observes events and answers questions. It does no I/O, starts no thread and reads
no clock of its own (time arrives in the context object), so the same instance can drive the
real cache and a simulator.
"""

from tiered.policies.base import (
    NEVER,
    EventContext,
    EvictionPolicy,
    PredictContext,
    Predictor,
    VictimContext,
    make_eviction,
    make_predictor,
)
from tiered.policies.eviction import FIFO, LFU, LRU
from tiered.policies.forecast import Belady, Score
from tiered.policies.predictors import Composite, Hinted, Markov, Recent, Reverse, Stride

__all__ = ["FIFO", "LFU", "LRU", "NEVER", "Belady", "Composite", "EventContext",
           "EvictionPolicy", "Hinted", "Markov", "PredictContext", "Predictor", "Recent",
           "Reverse", "Score", "Stride", "VictimContext", "make_eviction", "make_predictor"]
