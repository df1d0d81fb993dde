"""Tier ABCs: capacity accounting, close and the context manager; memory tiers.

Call sequence for a memory tier (owned by one cache; the cache's metadata lock serialises
``allocate``/``free``, the copies into a region run outside it)::

    extent = tier.allocate(nbytes)       # None if no contiguous room
    region = tier.region(extent, nbytes) # a view; fill or read it outside any lock
    tier.free(extent)

A background lane wraps its copies into or out of a memory tier in ``tier.background()``
(a device tier runs them on a side stream there). Persistent tiers:
:mod:`tiered.tiers.persistent`.
"""

from __future__ import annotations

import abc
import contextlib
import threading
from typing import Any, ClassVar

from tiered.arena import PAGE, Arena, Extent
from tiered.sizes import format_size, parse_size
from tiered.tiers.model import TierModel, counted_bytes


class Tier(abc.ABC):
    """A level of the hierarchy: capacity accounting, ``close`` and a context manager."""

    persistent: ClassVar[bool] = False
    kind: ClassVar[str] = "tier"
    context: ClassVar[bool] = False  # lanes copy inside :meth:`MemoryTier.background`
    writers = 1  # objects that may be written here at once (a hint for its lane)
    readers = 1  # objects the prefetcher may read from here at once
    page_bytes: ClassVar[int] = 1  # a payload is counted in whole units of this
    overhead_bytes: ClassVar[int] = 0  # ...plus this, per object

    def model(self) -> TierModel:
        """Return what this tier declares about itself (see :class:`TierModel`)."""
        return TierModel(name=self.name, kind=self.kind, persistent=self.persistent,
                         capacity_bytes=self.capacity_bytes, readers=self.readers,
                         writers=self.writers, context=self.context,
                         page_bytes=self.page_bytes, overhead_bytes=self.overhead_bytes)

    def __init__(self, *, capacity: int | str | None, name: str) -> None:
        self.capacity_bytes = parse_size(capacity, name="capacity")
        self.name = name
        self.closed = False

    @property
    @abc.abstractmethod
    def used_bytes(self) -> int:
        """Bytes currently held."""

    def fits(self, nbytes: int) -> bool:
        """Return whether a value of ``nbytes`` could ever fit this tier."""
        return self.capacity_bytes is None or self.footprint(nbytes) <= self.capacity_bytes

    def footprint(self, nbytes: int) -> int:
        """Return the bytes of capacity a payload of ``nbytes`` occupies here.

        Whole :attr:`page_bytes` plus :attr:`overhead_bytes`. In a persistent tier that is
        what is reserved while an object is written; once written, the tier counts the
        file's real size (:attr:`used_bytes`).
        """
        return counted_bytes(nbytes, self.page_bytes, self.overhead_bytes)

    def close(self) -> None:
        """Release resources; idempotent."""
        self.closed = True

    def __enter__(self) -> Tier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        cap = "unlimited" if self.capacity_bytes is None else format_size(self.capacity_bytes)
        return f"{type(self).__name__}(name={self.name!r}, capacity={cap})"


class MemoryTier(Tier):
    """A tier over one pre-allocated buffer carved into page-aligned extents."""

    page_bytes = PAGE

    def __init__(self, *, capacity: int | str, name: str) -> None:
        super().__init__(capacity=capacity, name=name)
        if self.capacity_bytes is None:
            raise ValueError(f"{type(self).__name__} needs a capacity, e.g. capacity='1GiB'")
        self._arena = Arena(self.capacity_bytes)
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        """Bytes reserved by live extents (page-rounded)."""
        return self._arena.used

    def allocate(self, nbytes: int) -> Extent | None:
        """Reserve room for a payload, or ``None`` if no free extent is large enough."""
        with self._lock:
            return self._arena.allocate(nbytes)

    def free(self, extent: Extent) -> None:
        """Release an extent."""
        with self._lock:
            self._arena.free(extent)

    @abc.abstractmethod
    def region(self, extent: Extent, nbytes: int) -> Any:
        """Return a writable 1-D uint8 view of the first ``nbytes`` of ``extent``."""

    def background(self) -> contextlib.AbstractContextManager[None]:
        """Return the context a background lane copies into or out of this tier in.

        The cache enters it only for tiers that declare ``context = True`` (a class
        attribute): a subclass that overrides this must set it too.

        Nothing for host memory; a device tier overrides it (see :class:`DeviceTier`).
        """
        return contextlib.nullcontext()
