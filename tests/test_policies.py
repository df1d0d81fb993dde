"""Policies and predictors as pure objects: hand-checked traces, Belady's optimality."""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any

import pytest
from tiered.policies import (
    FIFO,
    LFU,
    LRU,
    Belady,
    Composite,
    EventContext,
    Hinted,
    Markov,
    PredictContext,
    Recent,
    Reverse,
    Score,
    Stride,
    VictimContext,
    make_eviction,
    make_predictor,
)
from tiered.policies.base import take_budget

from tiered.replay import Replay

CTX = EventContext(nbytes=1)


def feed(policy: Any, events: list[tuple[str, Any]]) -> None:
    for event, key in events:
        policy.observe(event, key, ctx=CTX)


def predict(p: Any, keys: Any, budget: float = float("inf")) -> list[Any]:
    return p.predict(ctx=PredictContext(sizes=dict.fromkeys(keys, 1), budget_bytes=budget))


# ---------------------------------------------------------------- eviction, hand-checked
def test_lru_fifo_lfu_orders() -> None:
    events = [("insert", "a"), ("insert", "b"), ("insert", "c"), ("access", "a"),
              ("access", "a"), ("access", "b")]
    lru, fifo, lfu = LRU(), FIFO(), LFU()
    for p in (lru, fifo, lfu):
        feed(p, events)
    everyone = {"a", "b", "c"}
    assert lru.victim(everyone, ctx=VictimContext()) == "c"
    assert lru.order() == ["c", "a", "b"]
    assert fifo.victim(everyone, ctx=VictimContext()) == "a"
    assert lfu.victim(everyone, ctx=VictimContext()) == "c"
    assert lfu.victim({"a", "b"}, ctx=VictimContext()) == "b"  # b used twice, a three times
    assert lru.victim({"a", "b"}, ctx=VictimContext()) == "a"  # only candidates may go
    feed(lru, [("remove", "c")])
    assert lru.order() == ["a", "b"]


def test_score_prefers_durable_then_consumed_then_farthest() -> None:
    s = Score()
    feed(s, [("insert", k) for k in "abcd"])
    pool = {"a", "b", "c", "d"}
    forecast = {"a": 0, "b": 1}  # c and d are not expected again
    # only b is durable below: it goes first, despite being needed soon
    assert s.victim(pool, ctx=VictimContext(next_use=forecast, durable={"b"})) == "b"
    everything = VictimContext(next_use=forecast, durable=pool, consumed={"d"})
    assert s.victim(pool, ctx=everything) == "d"  # consumed adjoint state first
    assert s.victim({"a", "b", "c"}, ctx=everything) == "c"  # never needed again
    assert s.victim({"a", "b"}, ctx=everything) == "b"  # needed later than a


@pytest.mark.parametrize("seed", range(20))
def test_score_victim_matches_its_definition(seed: int) -> None:
    """The victim, scored at C speed, is the first candidate of the highest score."""
    rng = random.Random(seed)
    keys: list[Any] = [*range(12), *(("u", i) for i in range(6)), "x", "y"]
    s = Score(durable_first=seed % 3 != 0)
    feed(s, [("insert", rng.choice(keys)) for _ in range(30)])  # some keys never seen
    for _ in range(20):
        pool = rng.sample(keys, rng.randint(1, len(keys)))
        ctx = VictimContext(next_use={k: rng.randint(0, 3) for k in rng.sample(keys, 8)},
                            durable=set(rng.sample(keys, 9)), consumed=set(rng.sample(keys, 7)))

        def score(key: Any, ctx: VictimContext = ctx) -> tuple[bool, bool, float, int]:
            distance = ctx.distance(key)
            return (key in ctx.durable or not s.durable_first,
                    key in ctx.consumed and distance == float("inf"), distance, s.age(key))

        assert s.victim(pool, ctx=ctx) == max(pool, key=score)


def test_belady_evicts_farthest_next_use() -> None:
    b = Belady()
    feed(b, [("insert", k) for k in "abc"])
    ctx = VictimContext(next_use={"a": 2, "b": 0, "c": 1})
    assert b.victim({"a", "b", "c"}, ctx=ctx) == "a"
    assert b.victim({"b", "c"}, ctx=ctx) == "c"


def test_names_and_errors() -> None:
    assert isinstance(make_eviction("score"), Score)
    assert isinstance(make_eviction(Score), Score)  # a class is a factory, not an instance
    assert isinstance(make_predictor(None), Hinted)
    assert isinstance(make_predictor("reverse"), Composite)
    with pytest.raises(ValueError, match="eviction='mru' is unknown"):
        make_eviction("mru")
    with pytest.raises(ValueError, match="prefetch='psychic' is unknown"):
        make_predictor("psychic")
    with pytest.raises(TypeError, match="eviction must be"):
        make_eviction(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------- Belady is optimal
class Oracle:
    """A perfect forecast: the trace's future revisits, soonest first."""

    def __init__(self, trace: list[tuple[str, Any]]) -> None:
        self.future = [k for op, k in trace if op == "revisit"]

    def observe(self, signal: str, key: Any, *, ctx: EventContext) -> None:
        if signal == "revisit":
            assert self.future.pop(0) == key

    def predict(self, *, ctx: PredictContext) -> list[Any]:
        return list(dict.fromkeys(k for k in self.future if k in ctx.sizes))


def optimal_hits(keys: list[Any], capacity: int) -> int:
    """Most hits any eviction choice reaches for demand paging (exhaustive search)."""
    best = 0

    def walk(i: int, held: frozenset[Any], hits: int) -> None:
        nonlocal best
        if i == len(keys):
            best = max(best, hits)
            return
        k = keys[i]
        if k in held:
            walk(i + 1, held, hits + 1)
        elif len(held) < capacity:
            walk(i + 1, held | {k}, hits)
        else:
            for victim in held:
                walk(i + 1, (held - {victim}) | {k}, hits)

    walk(0, frozenset(), 0)
    return best


def belady_hits(keys: list[Any], capacity: int) -> int:
    replay = Replay(capacity, eviction="belady", prefetch=Oracle([("revisit", k) for k in keys]),
                    depth=0)
    replay.known.update(keys)  # stored long ago: durable below, cold in the fast tier
    for k in keys:
        replay.revisit(k)
    return replay.result.hits


@pytest.mark.parametrize("seed", range(6))
def test_belady_reaches_the_optimum(seed: int) -> None:
    rng = random.Random(seed)
    keys = [rng.choice("abcde") for _ in range(11)]
    assert belady_hits(keys, 3) == optimal_hits(keys, 3)


def test_belady_beats_lru_on_a_known_trace() -> None:
    keys = list("abcdabcdabcd")  # cyclic: LRU with 3 slots never hits, MIN hits 6 times
    assert optimal_hits(keys, 3) == 6
    assert belady_hits(keys, 3) == 6
    lru = Replay(3, eviction="lru", prefetch=False, depth=0)
    lru.known.update("abcd")
    assert sum(lru.revisit(k) for k in keys) == 0


# ---------------------------------------------------------------- predictors
def test_reverse_after_forward_and_every_k_and_repeated_sweeps() -> None:
    r = Reverse()
    feed(r, [("store", s) for s in range(0, 20, 4)])  # every 4th step
    assert predict(r, range(0, 20, 4)) == [16, 12, 8, 4, 0]
    feed(r, [("revisit", 16)])
    assert predict(r, range(0, 20, 4), budget=2) == [12, 8]
    feed(r, [("store", 13), ("store", 14)])  # recomputed during the backward pass
    assert predict(r, [0, 4, 8, 12, 13, 14]) == [14, 13, 12, 8, 4, 0]
    for s in (14, 13, 12, 8, 4, 0):
        feed(r, [("revisit", s)])
    assert predict(r, range(20)) == []
    feed(r, [("store", s) for s in range(3)])  # second sweep of an optimisation loop
    assert predict(r, range(3)) == [2, 1, 0]


def test_reverse_goes_quiet_on_random_access() -> None:
    r = Reverse()
    feed(r, [("store", s) for s in range(10)])
    feed(r, [("revisit", 3)])
    assert predict(r, range(10)) == []
    feed(r, [("revisit", 9)])  # the top again: the pattern is back
    assert predict(r, range(10))[:2] == [8, 7]


def test_hinted_is_consumed_as_read_and_rollback_jumps_the_queue() -> None:
    h = Hinted()
    h.observe("hint", None, ctx=EventContext(hints=("a", "b", "c", "d")))
    assert predict(h, "abcd") == ["a", "b", "c", "d"]
    assert predict(h, "acd") == ["a", "c", "d"]  # only held keys
    feed(h, [("revisit", "b")])  # the reader passed a
    assert predict(h, "abcd") == ["c", "d"]
    h.observe("rollback", None, ctx=EventContext(hints=("x",)))
    assert predict(h, "abcdx") == ["x", "c", "d"]


class CountedKey:
    """A key that counts how often it is hashed (the work a dict does with it)."""

    hashes = 0

    def __init__(self, n: int) -> None:
        self.n = n

    def __hash__(self) -> int:
        CountedKey.hashes += 1
        return hash(self.n)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CountedKey) and other.n == self.n


def test_hinted_backward_pass_costs_constant_work_per_revisit() -> None:
    """A Checkpointer hints the whole history, then reads it: each revisit must not touch
    every queued key (it rebuilt the queue per revisit: O(n^2) for the pass)."""
    n = 3000
    keys = [CountedKey(i) for i in range(n)]
    h = Hinted()
    h.observe("hint", None, ctx=EventContext(hints=tuple(keys)))
    CountedKey.hashes = 0
    for k in keys[:-1]:
        h.observe("revisit", k, ctx=CTX)
    assert CountedKey.hashes <= 4 * n
    assert predict(h, keys) == [keys[-1]]
    h.observe("hint", None, ctx=EventContext(hints=tuple(keys[:3])))
    h.observe("revisit", keys[1], ctx=CTX)  # passes the last one and the first two
    assert predict(h, keys) == [keys[2]]
    h.observe("rollback", None, ctx=EventContext(hints=(keys[5], keys[4], keys[5])))
    assert predict(h, keys) == [keys[5], keys[4], keys[2]]


def test_forecasts_stop_at_max_keys() -> None:
    r = Reverse()
    feed(r, [("store", i) for i in range(1000)])
    ctx = PredictContext(sizes=dict.fromkeys(range(1000), 1), max_keys=3)
    assert r.predict(ctx=ctx) == [999, 998, 997]
    h = Hinted()
    h.observe("hint", None, ctx=EventContext(hints=(7, 7, 8, 9, 10)))
    both = Composite(h, r)
    assert both.predict(ctx=ctx) == [7, 8, 9]
    assert take_budget(iter(range(10)), dataclasses.replace(ctx, max_keys=0)) == []


def test_stride_learns_a_constant_step() -> None:
    s = Stride()
    keys = [("u", i) for i in range(0, 40, 3)]
    feed(s, [("revisit", ("u", 0)), ("revisit", ("u", 3))])
    assert predict(s, keys) == []  # one step is not a pattern yet
    feed(s, [("revisit", ("u", 6))])
    assert predict(s, keys, budget=3) == [("u", 9), ("u", 12), ("u", 15)]
    feed(s, [("revisit", ("u", 7))])
    assert predict(s, keys) == []


def test_markov_follows_confident_transitions_only() -> None:
    m = Markov()
    loop = ["load", "fwd", "bwd", "opt"]
    feed(m, [("revisit", k) for k in loop * 3])
    assert predict(m, loop) == ["load", "fwd", "bwd"]  # from opt, around the cycle
    noisy = Markov()
    rng = random.Random(1)
    feed(noisy, [("revisit", rng.randrange(50)) for _ in range(200)])
    assert len(predict(noisy, range(50))) <= 2


def test_recent_brings_the_rollback_target_first() -> None:
    r = Recent()
    feed(r, [("store", ("ckpt", s)) for s in (100, 200, 300)])
    held = [("ckpt", s) for s in (100, 200, 300)]
    assert predict(r, held) == [("ckpt", 300), ("ckpt", 200), ("ckpt", 100)]
    r.observe("rollback", None, ctx=EventContext(hints=(("ckpt", 100),)))
    assert predict(r, held)[0] == ("ckpt", 100)
    feed(r, [("revisit", ("ckpt", 100))])
    assert predict(r, held)[0] == ("ckpt", 300)
    r.observe("rollback", None, ctx=EventContext())
    assert predict(r, held)[0] == ("ckpt", 300)


def test_composite_puts_hints_first_without_repeats() -> None:
    c = make_predictor("reverse")
    feed(c, [("store", s) for s in range(5)])
    c.observe("hint", None, ctx=EventContext(hints=(1, 3)))
    assert predict(c, range(5)) == [1, 3, 4, 2, 0]


class _Fixed:
    """A predictor part that forecasts a given list (what take_budget keeps of it)."""

    def __init__(self, keys: list[Any]) -> None:
        self.keys = keys

    def observe(self, signal: Any, key: Any, *, ctx: EventContext) -> None:
        pass

    def predict(self, *, ctx: PredictContext) -> list[Any]:
        return take_budget(self.keys, ctx)


@pytest.mark.parametrize("seed", range(30))
def test_composite_equals_the_merge_of_its_parts_shortcut_or_not(seed: int) -> None:
    """A part that only repeats the head of the first adds nothing: same forecast."""
    rng = random.Random(seed)
    keys = list(range(40))
    first = rng.sample(keys, rng.randint(0, 30))
    second = first[:rng.randint(0, len(first))] if seed % 2 else rng.sample(keys, 20)
    sizes = {k: rng.choice([1, 2, 3]) for k in keys}
    ctx = PredictContext(sizes=sizes, budget_bytes=rng.choice([5, 20, 200]),
                         max_keys=rng.choice([8, 256]))
    parts = [_Fixed(first), _Fixed(second)]
    merged = take_budget(itertools.chain(*(p.predict(ctx=ctx) for p in parts)), ctx)
    assert Composite(*parts).predict(ctx=ctx) == merged


# ---------------------------------------------------------------- replayed traces
def backward(n: int) -> list[tuple[str, Any]]:
    return [("store", s) for s in range(n)] + [("revisit", s) for s in reversed(range(n))]


@pytest.mark.parametrize("eviction", ["lru", "score", "belady"])
def test_reverse_prefetch_turns_a_backward_pass_into_hits(eviction: str) -> None:
    plain = Replay(8, eviction=eviction, prefetch=False).run(backward(40))
    smart = Replay(8, eviction=eviction, prefetch="reverse").run(backward(40))
    assert plain.hits == 8  # only what was still held
    assert smart.hits == 40 and smart.wasted_prefetches == 0
    assert smart.prefetch_hits == 32


def test_random_access_keeps_waste_bounded() -> None:
    rng = random.Random(7)
    trace = [("store", s) for s in range(100)] + [("revisit", rng.randrange(100))
                                                  for _ in range(500)]
    for name in ("reverse", "stride", "markov", "auto"):
        res = Replay(10, eviction="score", prefetch=name).run(trace)
        assert res.wasted_prefetches <= 0.1 * res.revisits, (name, res)


def test_strided_and_repeated_sweeps_are_learned() -> None:
    strided = [("store", s) for s in range(60)] + [("revisit", s) for s in range(0, 60, 3)]
    res = Replay(6, eviction="score", prefetch="stride").run(strided)
    assert res.hits >= 20 - 3 - 1  # everything after the pattern is confirmed
    sweeps = list(itertools.chain.from_iterable(backward(30) for _ in range(3)))
    res = Replay(6, eviction="score", prefetch="reverse").run(sweeps)
    assert res.hits == 90 and res.wasted_prefetches == 0


def test_replay_is_deterministic() -> None:
    rng = random.Random(3)
    trace = backward(30) + [("revisit", rng.randrange(30)) for _ in range(100)]
    runs = [Replay(7, eviction="score", prefetch="auto").run(trace) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
