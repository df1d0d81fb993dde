"""The cache's index: which tiers hold a copy of which entry, and in what state."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from tiered.arena import Extent
from tiered.keys import Key
from tiered.tiers.records import Record
from tiered.values import ValueMeta


@dataclasses.dataclass
class Copy:
    """One entry's bytes in one tier: an extent (memory tiers) or a record (persistent)."""

    tier: int
    extent: Extent | None = None
    record: Record | None = None
    pins: int = 0
    prefetched: bool = False  # brought up ahead of a revisit
    used: bool = False  # a revisit was served from this copy
    advised: bool = False  # the kernel was asked to read it ahead (persistent copies)


@dataclasses.dataclass
class Entry:
    """One key's current version and where its bytes are.

    ``home`` is the deepest tier that can hold it: the entry is *dirty* until a copy is
    there. ``superseded`` holds older versions' persistent records, deleted once this version
    is home (so a crash in between still leaves the older version durable).
    """

    key: Key
    version: int
    meta: ValueMeta
    home: int
    copies: dict[int, Copy] = dataclasses.field(default_factory=dict)
    checksums: tuple[int, ...] | None = None
    drain: Future[Any] | None = None
    prefetch: Future[Any] | None = None
    superseded: list[tuple[int, Record]] = dataclasses.field(default_factory=list)
    gone: bool = False  # discarded or replaced: free copies as their pins drop
    consumed: bool = False  # revisited since it was stored
    delete_files: bool = True  # when gone: delete its files too (False: kept for the next)
    # what the planner files its copies under: the key while it is current; another name
    # while only a version names it, so that it never collides with the key's current copies
    slot: Any = None
    failure: BaseException | None = None  # why its last drain failed (a commit waits on it)
    base: Entry | None = None  # the kept value it replaced: leaves equal to it are not written
    content: tuple[int, ...] | None = None  # each leaf's xxh3-128, once computed
    holders: tuple[tuple[Key, int], ...] = ()  # objects whose files hold some of its leaves

    def __post_init__(self) -> None:
        if self.slot is None:
            self.slot = self.key

    @property
    def dirty(self) -> bool:
        """Whether the entry still lacks a copy in its home tier."""
        return self.home not in self.copies

    def fastest(self) -> Copy:
        """Return the copy in the fastest (lowest-index) tier."""
        return self.copies[min(self.copies)]

    def in_memory(self, memory: Sequence[int]) -> bool:
        """Whether a copy sits in one of the ``memory`` tiers."""
        copies = self.copies
        for t in memory:  # a loop, not any(genexpr): this runs for every forecast key
            if t in copies:
                return True
        return False

    def evictable(self, tier: int) -> bool:
        """Whether the copy in ``tier`` may go: unpinned, with a copy below it."""
        copy = self.copies.get(tier)
        return copy is not None and copy.pins == 0 and any(t > tier for t in self.copies)
