"""Pure decision objects: eviction policies and prefetch predictors.

A policy observes events and answers questions. It does no I/O, starts no thread and reads
no clock of its own (time arrives in the context object), so the same instance can drive the
real cache and a simulator.
"""

from tiered.policies.base import EventContext, EvictionPolicy, VictimContext, make_eviction
from tiered.policies.eviction import FIFO, LFU, LRU

__all__ = ["FIFO", "LFU", "LRU", "EventContext", "EvictionPolicy", "VictimContext",
           "make_eviction"]
