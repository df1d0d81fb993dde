"""Whether waiting can ever make room in a tier (pure: reads the index, changes nothing).

A copy leaves a tier when it is evicted (it has a copy below), drained (then evicted), or
discarded. Copies that are their entry's home, and dirty copies whose way down is itself
full of such copies, never leave by themselves: a wait for room they hold would only run
out its timeout. The cache asks :func:`hopeless` before it waits, and raises at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tiered.index import Entry
from tiered.keys import Key
from tiered.sizes import format_size
from tiered.tiers.model import TierModel


def next_tier(tiers: Sequence[TierModel], entry: Entry) -> int | None:
    """Return the tier a dirty ``entry`` drains into next (``None``: none can take it)."""
    return next((i for i in range(max(entry.copies) + 1, entry.home + 1)
                 if tiers[i].fits(entry.meta.nbytes)), None)


def held_bytes(tier: TierModel, entry: Entry, index: int) -> int:
    """Return the capacity ``entry``'s copy in tier ``index`` really takes there.

    A persistent tier counts an object's file (its record's size), a memory tier the
    page-rounded extent: the units each tier's ``used_bytes`` counts in.
    """
    copy = entry.copies[index]
    if copy.record is not None:
        return copy.record.file_bytes
    return tier.footprint(entry.meta.nbytes)


def stuck_bytes(tiers: Sequence[TierModel], resident: Sequence[Mapping[Key, Entry]]) -> list[int]:
    """Return, per tier, the bytes held by copies that no wait will move out.

    Copies of discarded entries, copies with a copy below (evictable once unpinned) and
    copies whose drain is under way are not stuck.
    """
    stuck = [0] * len(tiers)
    for tier in reversed(range(len(tiers))):  # deepest first: a drain's target is known
        t = tiers[tier]
        for entry in resident[tier].values():
            if entry.gone or entry.drain is not None or max(entry.copies) != tier:
                continue
            if entry.home == tier or _full(tiers, stuck, next_tier(tiers, entry),
                                           entry.meta.nbytes):
                stuck[tier] += held_bytes(t, entry, tier)
    return stuck


def _full(tiers: Sequence[TierModel], stuck: list[int], tier: int | None, nbytes: int) -> bool:
    if tier is None:  # no tier below takes it (a cache reopened with smaller tiers)
        return True
    capacity = tiers[tier].capacity_bytes
    return capacity is not None and capacity - stuck[tier] < tiers[tier].footprint(nbytes)


def hopeless(tiers: Sequence[TierModel], resident: Sequence[Mapping[Key, Entry]], tier: int,
             nbytes: int) -> str | None:
    """Say why ``nbytes`` can never fit ``tier`` by waiting, or return ``None``."""
    stuck = stuck_bytes(tiers, resident)
    if not _full(tiers, stuck, tier, nbytes):
        return None
    t = tiers[tier]
    below = "no tier below can take them" if tier < len(tiers) - 1 else "no tier is below"
    return (f"{t.name}: no room for {format_size(t.footprint(nbytes))} can ever come: "
            f"{format_size(stuck[tier])} of its {format_size(t.capacity_bytes or 0)} hold "
            f"entries that cannot leave it ({below}); discard keys, add a deeper tier or "
            "raise the capacity")
