"""The threaded cache and the inline replay take the same decisions: one planner drives both.

Each trace runs through a real Cache (a host tier of one-page slots over a directory tier,
every store flushed before the next op so that every copy is durable below, as the replay's
model has it) and through a Replay of as many slots with the cache's forecast horizon and
its evict-ahead. The
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


class _NoForecast:
    """A predictor that forecasts nothing: the cache's prefetch pump then never runs."""

    def observe(self, *args: Any, **kw: Any) -> None:
        pass

    def predict(self, *, ctx: Any) -> list[Any]:
        return []


def _traces(n: int = 24) -> dict[str, list[Op]]:
    rng = random.Random(7)
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


def _through_cache(ops: list[Op], eviction: str, prefetch: Any, root: Path,
                   slots: int = 8) -> list[Any]:
    cache = tiered.Cache([tiered.HostTier(slots * SLOT, prefault=False),
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


def _through_replay(ops: list[Op], eviction: str, prefetch: Any, slots: int = 8) -> list[Any]:
    replay = Replay(slots, eviction=eviction, prefetch=prefetch, depth=0,
                    horizon=slots * SLOT, evict_ahead=True)
    log: list[Any] = []
    _recorded(replay.planner, log)
    for op in ops:
        replay.run([op])
        log.append(("forecast", tuple(replay.planner.forecast_keys())))
    return log


@pytest.mark.parametrize("slots", [8, 24])  # from 16 slots a store frees room for more
@pytest.mark.parametrize("trace", sorted(_traces()))
@pytest.mark.parametrize("eviction", ["lru", "fifo", "lfu", "score", "belady"])
def test_same_evictions_in_the_cache_and_the_replay(
        tmp_path: Path, trace: str, eviction: str, slots: int) -> None:
    ops = _traces(3 * slots)[trace]
    # no forecast in either: the cache's pump never runs, so nothing depends on its timing
    cache_log = _through_cache(ops, eviction, _NoForecast(), tmp_path / "plain", slots)
    assert cache_log == _through_replay(ops, eviction, False, slots)
    assert any(kind == "evict" for kind, _ in cache_log)  # the trace did make it choose


@pytest.mark.parametrize("trace", sorted(_traces()))
@pytest.mark.parametrize("prefetch", ["reverse", "auto", "recent"])
def test_same_forecasts_with_a_predictor(tmp_path: Path, trace: str, prefetch: str) -> None:
    """The forecast that orders prefetches is the same in both, op by op."""
    ops = _traces()[trace]  # (the cache's pump may run here: forecasts do not depend on it)
    forecasts = [entry for entry in _through_cache(ops, "score", prefetch, tmp_path)
                 if entry[0] == "forecast"]
    assert forecasts == [entry for entry in _through_replay(ops, "score", prefetch)
                         if entry[0] == "forecast"]
    assert any(keys for _, keys in forecasts)


def test_a_replay_forecasts_without_end_by_default() -> None:
    """Beyond the cache's 256-key look-ahead: Belady sees the whole future it is given."""
    n = 600
    replay = Replay(64, eviction="belady", prefetch="reverse", depth=0)
    replay.run([("store", k) for k in range(n)] + [("revisit", n - 1)])
    assert len(replay.planner.forecast_keys()) == n - 1


def test_the_planner_places_a_value_in_every_tier_that_fits_it(tmp_path: Path) -> None:
    from tiered.planner import Planner

    tiers = [tiered.HostTier(4 * SLOT, prefault=False),
             tiered.DirectoryTier(tmp_path / "small", capacity=3 * SLOT + 8192, name="small"),
             tiered.DirectoryTier(tmp_path / "big", name="big")]
    plan = Planner([t.model() for t in tiers], "lru", None, prefetch_depth=1)
    assert plan.placement(SLOT, spill=False) == [(0, True), (1, False), (2, True)]
    assert plan.placement(SLOT, spill=True) == [(0, False), (1, False), (2, True)]
    assert plan.placement(5 * SLOT, spill=False) == [(2, True)]  # only the big one fits
    assert plan.placement(1 << 40, spill=False) == [(2, True)]
    for tier in tiers:
        tier.close()
