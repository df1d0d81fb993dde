"""The threaded cache and the inline replay take the same decisions: one planner drives both.

Each trace runs through a real Cache (host tier of 8 one-page slots over a directory tier,
every store flushed before the next op so that every copy is durable below, as the replay's
model has it) and through a Replay of 8 slots with the cache's forecast horizon. The
planner's choices are recorded in both: the victims of every eviction from the fast tier,
in order, and the forecast after every op.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tiered
from tiered.replay import SLOT, Op, Replay

SLOTS = 8


def _traces() -> dict[str, list[Op]]:
    rng = random.Random(7)
    n = 24
    stores: list[Op] = [("store", k) for k in range(n)]
    sweep: list[Op] = [("revisit", k) for k in reversed(range(n))]
    return {
        "reverse sweep": stores + sweep,
        "strided": stores + [("revisit", k) for k in range(0, n, 3)],
        "repeated sweeps": stores + sweep + [("revisit", k) for k in range(n)] + sweep,
        "random": stores + [("revisit", rng.randrange(n)) for _ in range(40)],
        "rollback": stores + [("rollback", (n - 5,))] + [("revisit", k) for k in
                                                          range(n - 5, n)],
        "overwrites": stores + [("store", k) for k in range(0, n, 2)] + sweep,
    }


def _recorded(planner: Any, log: list[Any]) -> None:
    """Log each eviction choice from the fast tier (tier 0) that ``planner`` makes."""
    victims = planner.victims

    def recording(tier: int, *args: Any, **kw: Any) -> list[Any]:
        chosen = victims(tier, *args, **kw)
        if tier == 0 and chosen:
            log.append(("evict", tuple(chosen)))
        return list(chosen)

    planner.victims = recording


def _value(key: int) -> np.ndarray:
    return np.full(SLOT // 4, key, np.float32)  # one page: one slot of the host tier


def _through_cache(ops: list[Op], eviction: str, prefetch: Any, root: Path) -> list[Any]:
    cache = tiered.Cache([tiered.HostTier(SLOTS * SLOT, prefault=False),
                          tiered.DirectoryTier(root, sync=False)],
                         eviction=eviction, prefetch=prefetch, prefetch_depth=1)
    log: list[Any] = []
    _recorded(cache._plan, log)
    for op, key in ops:
        if op == "store":
            cache.store(key, _value(key))
            cache.flush()  # durable below before the next op, as in the replay's model
        elif op == "revisit":
            assert cache.revisit(key)[0] == key
        else:
            cache.hint(key, rollback=op == "rollback")
        with cache._cond:
            log.append(("forecast", tuple(cache._plan.forecast_keys())))
    cache.close(drain=False)
    return log


def _through_replay(ops: list[Op], eviction: str, prefetch: Any) -> list[Any]:
    replay = Replay(SLOTS, eviction=eviction, prefetch=prefetch, depth=0,
                    horizon=SLOTS * SLOT)
    log: list[Any] = []
    _recorded(replay.planner, log)
    for op in ops:
        replay.run([op])
        log.append(("forecast", tuple(replay.planner.forecast_keys())))
    return log


@pytest.mark.parametrize("trace", sorted(_traces()))
@pytest.mark.parametrize("eviction", ["lru", "fifo", "lfu", "score", "belady"])
def test_same_evictions_and_forecasts_in_the_cache_and_the_replay(
        tmp_path: Path, trace: str, eviction: str) -> None:
    ops = _traces()[trace]
    # prefetching off in both: what the pump brings up in the cache depends on its timing
    cache_log = _through_cache(ops, eviction, None, tmp_path / "plain")
    assert cache_log == _through_replay(ops, eviction, None)
    assert any(kind == "evict" for kind, _ in cache_log)  # the trace did make it choose


@pytest.mark.parametrize("trace", sorted(_traces()))
@pytest.mark.parametrize("prefetch", ["reverse", "auto", "recent"])
def test_same_forecasts_with_a_predictor(tmp_path: Path, trace: str, prefetch: str) -> None:
    """The forecast that orders prefetches is the same in both, op by op."""
    ops = _traces()[trace]
    forecasts = [entry for entry in _through_cache(ops, "score", prefetch, tmp_path)
                 if entry[0] == "forecast"]
    assert forecasts == [entry for entry in _through_replay(ops, "score", prefetch)
                         if entry[0] == "forecast"]
    assert any(keys for _, keys in forecasts)
