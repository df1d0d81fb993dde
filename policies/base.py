"""Policy protocols, their keyword-only context objects, and construction by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Any, Literal, Protocol, runtime_checkable

Event = Literal["insert", "access", "remove"]


@dataclasses.dataclass(frozen=True)
class EventContext:
    """What the cache tells a policy with each event.

    Attributes
    ----------
    nbytes : int
        Payload size of the entry.
    now : float
        The cache's logical clock (an event counter, or simulated seconds).
    """

    nbytes: int = 0
    now: float = 0.0


@dataclasses.dataclass(frozen=True)
class VictimContext:
    """What the cache tells a policy when it asks for a victim.

    Attributes
    ----------
    need_bytes : int
        Bytes the cache is trying to free.
    now : float
        The cache's logical clock.
    """

    need_bytes: int = 0
    now: float = 0.0


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


PolicySpec = str | EvictionPolicy | Callable[[], EvictionPolicy]


def make_eviction(spec: PolicySpec) -> EvictionPolicy:
    """Build one eviction policy instance from a name, a factory or an instance.

    Raises
    ------
    ValueError
        For an unknown name (the message lists the known ones).
    """
    from tiered.policies.eviction import REGISTRY

    if isinstance(spec, str):
        try:
            return REGISTRY[spec]()
        except KeyError:
            raise ValueError(f"eviction={spec!r} is unknown; choose one of "
                             f"{sorted(REGISTRY)} or pass a policy instance") from None
    if isinstance(spec, EvictionPolicy):
        return spec
    if callable(spec):
        return spec()
    raise TypeError(f"eviction must be a name, a policy or a factory, not {type(spec).__name__}")
