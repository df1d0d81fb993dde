"""Policy protocols, their keyword-only context objects, and construction by name.

Two kinds of policy, both pure (no I/O, no threads, no clock of their own):

* an :class:`EvictionPolicy` (one instance per tier) answers "which of these copies goes";
* a :class:`Predictor` (one per cache) answers "which keys are revisited next, in order".

The cache calls both under its metadata lock, so neither needs to be thread-safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

Event = Literal["insert", "access", "remove"]
"""Events an eviction policy sees for the copies of one tier."""

Signal = Literal["store", "revisit", "discard", "hint", "rollback"]
"""Events a predictor sees for the whole cache."""

NEVER = float("inf")
"""Forecast distance of a key that is not expected again."""


@dataclasses.dataclass(frozen=True)
class EventContext:
    """What the cache tells a policy with each event.

    Attributes
    ----------
    nbytes : int
        Payload size of the entry.
    now : float
        The cache's logical clock (an event counter, or simulated seconds).
    hints : tuple
        For ``"hint"`` and ``"rollback"``: the keys named, soonest first.
    """

    nbytes: int = 0
    now: float = 0.0
    hints: tuple[Any, ...] = ()


@dataclasses.dataclass(frozen=True)
class VictimContext:
    """What the cache tells an eviction policy when it asks for a victim.

    Attributes
    ----------
    need_bytes : int
        Bytes the cache is trying to free.
    now : float
        The cache's logical clock.
    next_use : Mapping
        Forecast position of each key expected again (0 = next); absent keys are not
        expected (distance :data:`NEVER`).
    durable : Collection
        Candidates with a verified copy in a persistent tier below.
    consumed : Collection
        Candidates already revisited since they were stored (a used adjoint state).
    """

    need_bytes: int = 0
    now: float = 0.0
    next_use: Mapping[Any, int] = dataclasses.field(default_factory=dict)
    durable: Collection[Any] = frozenset()
    consumed: Collection[Any] = frozenset()

    def distance(self, key: Any) -> float:
        """Return how far in the forecast ``key`` is next used (:data:`NEVER` if not)."""
        return self.next_use.get(key, NEVER)


@dataclasses.dataclass(frozen=True)
class PredictContext:
    """What the cache tells a predictor when it asks for the coming revisits.

    Attributes
    ----------
    sizes : Mapping
        Every key the cache holds now, with its payload bytes. Predict only these.
    budget_bytes : float
        Stop once the predicted keys add up to more than this.
    now : float
        The cache's logical clock.
    max_keys : float
        Stop after this many keys (the cache asks for a bounded look-ahead, so that a
        forecast costs the same however many states memory holds; keys beyond it count
        as not expected, and least-recently-used order ranks them).
    """

    sizes: Mapping[Any, int]
    budget_bytes: float = NEVER
    now: float = 0.0
    max_keys: float = NEVER


@runtime_checkable
class EvictionPolicy(Protocol):
    """Chooses which entry of one tier to evict.

    Call sequence: ``observe("insert", k)`` when ``k`` enters the tier, ``observe("access",
    k)`` on each hit, ``observe("remove", k)`` when it leaves; ``victim(candidates)`` returns
    one of ``candidates`` (all evictable right now), or ``None`` to refuse. Not thread-safe:
    the cache calls it under its metadata lock.
    """

    def observe(self, event: Event, key: Any, *, ctx: EventContext) -> None:
        """Record an event for ``key``."""

    def victim(self, candidates: Collection[Any], *, ctx: VictimContext) -> Any | None:
        """Return the key to evict among ``candidates``."""


@runtime_checkable
class Predictor(Protocol):
    """Forecasts the coming revisits.

    Call sequence: ``observe(signal, key)`` for every ``"store"`` (a new version captured),
    ``"revisit"`` and ``"discard"``; ``observe("hint", None, ctx=...)`` and
    ``observe("rollback", None, ctx=...)`` carry the keys the caller named in
    ``ctx.hints``. ``predict(ctx=...)`` returns keys of ``ctx.sizes``, soonest first, within
    ``ctx.budget_bytes``. Not thread-safe: the cache calls it under its metadata lock.
    """

    def observe(self, signal: Signal, key: Any, *, ctx: EventContext) -> None:
        """Record an event."""

    def predict(self, *, ctx: PredictContext) -> list[Any]:
        """Return the keys expected next, soonest first."""


def take_budget(keys: Any, ctx: PredictContext) -> list[Any]:
    """Return the first distinct ``keys`` present in ``ctx.sizes`` that fit the budget.

    At most ``ctx.max_keys`` of them: iteration stops there, so a long history costs no
    more than a short one.
    """
    out: list[Any] = []
    seen: set[Any] = set()
    total = 0
    for key in keys:
        if len(out) >= ctx.max_keys:
            break
        size = ctx.sizes.get(key)
        if size is None or key in seen:
            continue
        total += size
        if total > ctx.budget_bytes and out:
            break
        out.append(key)
        seen.add(key)
    return out


PolicySpec = str | EvictionPolicy | Callable[[], EvictionPolicy]
PredictorSpec = str | Predictor | Callable[[], Predictor] | None


def _build(kind: str, spec: Any, registry: Mapping[str, Callable[[], Any]],
           protocol: type) -> Any:
    if isinstance(spec, str):
        try:
            return registry[spec]()
        except KeyError:
            raise ValueError(f"{kind}={spec!r} is unknown; choose one of {sorted(registry)} "
                             "or pass an instance") from None
    if isinstance(spec, protocol) and not isinstance(spec, type):  # a class is a factory
        return spec
    if callable(spec):
        return spec()
    raise TypeError(f"{kind} must be a name, a policy or a factory, not {type(spec).__name__}")


def make_eviction(spec: PolicySpec) -> EvictionPolicy:
    """Build one eviction policy instance from a name, a factory or an instance.

    Raises
    ------
    ValueError
        For an unknown name (the message lists the known ones).
    """
    from tiered.policies.registry import EVICTION

    policy: EvictionPolicy = _build("eviction", spec, EVICTION, EvictionPolicy)
    return policy


def make_predictor(spec: PredictorSpec) -> Predictor:
    """Build the cache's predictor; ``None`` means explicit hints only (``"hinted"``).

    Raises
    ------
    ValueError
        For an unknown name (the message lists the known ones).
    """
    from tiered.policies.registry import PREDICTORS

    predictor: Predictor = _build("prefetch", "hinted" if spec is None else spec, PREDICTORS,
                                  Predictor)
    return predictor
