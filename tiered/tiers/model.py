"""What a tier declares about itself, once: the model the cache's decisions read."""

from __future__ import annotations

import dataclasses


def counted_bytes(nbytes: int, page: int, overhead: int) -> int:
    """Return what a payload of ``nbytes`` takes against a capacity.

    Whole units of ``page`` (at least one, unless ``page`` is 1: bytes as they are), plus
    ``overhead``. The one rule every tier and its model count by.
    """
    if page == 1:  # counted in bytes, as a persistent tier counts its files
        return nbytes + overhead
    return max(page, -(-nbytes // page) * page) + overhead  # a page at least


@dataclasses.dataclass(frozen=True)
class TierModel:
    """What a tier declares about itself once, for the cache's decisions to read.

    Attributes
    ----------
    name, kind : str
        The tier's name (unique in a cache) and kind (``"host"``, ``"directory"``, ...).
    persistent : bool
        Durable (a file per object) rather than memory.
    capacity_bytes : int or None
        ``None``: unlimited.
    readers, writers : int
        Objects that may be read from / written to it at once.
    context : bool
        Its lanes copy inside a context of its own (a device's side stream).
    page_bytes, overhead_bytes : int
        How a payload is counted against the capacity (:meth:`footprint`): rounded up to
        whole pages of ``page_bytes`` (at least one), plus ``overhead_bytes``.
    """

    name: str
    kind: str
    persistent: bool
    capacity_bytes: int | None
    readers: int = 1
    writers: int = 1
    context: bool = False
    page_bytes: int = 1
    overhead_bytes: int = 0

    @property
    def memory(self) -> bool:
        """Whether it is a memory tier (not persistent)."""
        return not self.persistent

    def footprint(self, nbytes: int) -> int:
        """Return the capacity a payload of ``nbytes`` takes here (as the tier counts it)."""
        return counted_bytes(nbytes, self.page_bytes, self.overhead_bytes)

    def fits(self, nbytes: int) -> bool:
        """Return whether a value of ``nbytes`` could ever fit."""
        return self.capacity_bytes is None or self.footprint(nbytes) <= self.capacity_bytes
