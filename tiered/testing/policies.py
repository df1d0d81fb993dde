"""Suites for policies: what every eviction policy and every predictor must do."""

from __future__ import annotations

import random
from typing import Any

from tiered.policies.base import (
    Event,
    EventContext,
    EvictionPolicy,
    PredictContext,
    Predictor,
    VictimContext,
)


def _events(seed: int, n: int = 300) -> list[tuple[Event, int]]:
    """Return a random but repeatable run of inserts, accesses and removes of 40 keys."""
    rng = random.Random(seed)
    held: list[int] = []
    out: list[tuple[Event, int]] = []
    for _ in range(n):
        roll = rng.random()
        if not held or roll < 0.4:
            key = rng.randrange(40)
            if key not in held:
                held.append(key)
                out.append(("insert", key))
        elif roll < 0.8:
            out.append(("access", rng.choice(held)))
        else:
            key = rng.choice(held)
            held.remove(key)
            out.append(("remove", key))
    return out


def _held(events: list[tuple[Event, int]]) -> set[int]:
    held: set[int] = set()
    for event, key in events:
        if event == "insert":
            held.add(key)
        elif event == "remove":
            held.discard(key)
    return held


class EvictionPolicyTests:
    """A victim is a candidate (or none); removed keys are forgotten; choices repeat.

    Subclasses define :meth:`make_policy`.
    """

    def make_policy(self) -> EvictionPolicy:
        """Return a new policy (override this)."""
        raise NotImplementedError

    def _victims(self, seed: int) -> list[Any]:
        policy = self.make_policy()
        victims = []
        events = _events(seed)
        for step, (event, key) in enumerate(events):
            policy.observe(event, key, ctx=EventContext(nbytes=1 + key, now=float(step)))
            if step % 7 == 0:
                pool = sorted(_held(events[:step + 1]))[::2]
                ctx = VictimContext(need_bytes=1, now=float(step),
                                    next_use={k: i for i, k in enumerate(reversed(pool))},
                                    durable=set(pool[::3]), consumed=set(pool[1::4]))
                victim = policy.victim(pool, ctx=ctx)
                assert victim is None or victim in pool, (step, victim, pool)
                victims.append(victim)
        return victims

    def test_a_victim_is_a_candidate_or_none(self) -> None:
        for seed in range(5):
            self._victims(seed)

    def test_the_same_events_give_the_same_victims(self) -> None:
        assert self._victims(11) == self._victims(11)

    def test_removed_keys_are_forgotten(self) -> None:
        policy = self.make_policy()
        for key in range(10):
            policy.observe("insert", key, ctx=EventContext(nbytes=1, now=float(key)))
        for key in range(10):
            policy.observe("remove", key, ctx=EventContext(now=10.0 + key))
        assert policy.victim([], ctx=VictimContext()) is None
        order = getattr(policy, "order", None)
        if order is not None:  # a policy that shows its order holds none of them
            assert order() == []
        for key in (100, 101):  # only keys now held are in play
            policy.observe("insert", key, ctx=EventContext(nbytes=1, now=30.0 + key))
        if order is not None:
            assert sorted(order()) == [100, 101]
        assert policy.victim([100, 101], ctx=VictimContext()) in (100, 101)


class PredictorTests:
    """Forecasts name known keys only, once each, within the budget and the key limit.

    Subclasses define :meth:`make_predictor`.
    """

    def make_predictor(self) -> Predictor:
        """Return a new predictor (override this)."""
        raise NotImplementedError

    def _drive(self, predictor: Predictor, n: int) -> None:
        for key in range(n):
            predictor.observe("store", key, ctx=EventContext(nbytes=10, now=float(key)))
        predictor.observe("hint", None, ctx=EventContext(now=float(n),
                                                           hints=tuple(range(n, -5, -3))))
        for key in reversed(range(n - 6, n)):
            predictor.observe("revisit", key, ctx=EventContext(nbytes=10, now=float(2 * n)))
        predictor.observe("discard", n - 1, ctx=EventContext(now=float(3 * n)))

    def _check(self, keys: list[Any], ctx: PredictContext) -> None:
        assert len(keys) == len(set(keys)), "a key forecast twice"
        assert set(keys) <= set(ctx.sizes), "a key the cache does not hold"
        assert len(keys) <= ctx.max_keys
        total = sum(ctx.sizes[k] for k in keys)
        assert len(keys) <= 1 or total <= ctx.budget_bytes, "over the budget"

    def test_forecasts_stay_within_known_keys_budget_and_limit(self) -> None:
        predictor = self.make_predictor()
        self._drive(predictor, 40)
        held = {k: 10 for k in range(0, 39, 2)}  # some keys were discarded meanwhile
        for budget, limit in ((float("inf"), float("inf")), (55.0, float("inf")),
                              (float("inf"), 3.0), (0.0, float("inf"))):
            ctx = PredictContext(sizes=held, budget_bytes=budget, now=200.0, max_keys=limit)
            self._check(predictor.predict(ctx=ctx), ctx)

    def test_the_same_events_give_the_same_forecast(self) -> None:
        forecasts = []
        for _ in range(2):
            predictor = self.make_predictor()
            self._drive(predictor, 30)
            forecasts.append(predictor.predict(ctx=PredictContext(
                sizes={k: 10 for k in range(30)}, now=100.0)))
        assert forecasts[0] == forecasts[1]

    def test_an_empty_cache_gets_an_empty_forecast(self) -> None:
        predictor = self.make_predictor()
        self._drive(predictor, 10)
        assert predictor.predict(ctx=PredictContext(sizes={})) == []
