"""Whether waiting can ever make room in a tier (pure: reads the index, changes nothing).

A copy leaves a tier when it is evicted (it has a copy below), drained (then evicted), or
discarded. Copies that are their entry's home, and dirty copies whose way down is itself
full of such copies, never leave by themselves: a wait for room they hold would only run
out its timeout. The cache asks :func:`hopeless` before it waits, and raises at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from tiered.index import Entry
from tiered.keys import Key
from tiered.sizes import format_size
from tiered.tiers.model import TierModel

log = logging.getLogger(__name__)
WAIT_LOG_S = 1.0  # a wait for room says what it waits for once it has lasted this long
HOPELESS_EVERY_S = 0.05  # a waiter asks again at most this often whether room can come


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


class Watch:
    """Log, once, what a wait for room waits for when it passes :data:`WAIT_LOG_S`.

    ``busy`` returns the drains and deletions in flight (read under the caller's lock).
    """

    def __init__(self, tier: str, nbytes: int, caller: bool,
                 busy: Callable[[], tuple[int, int]], timeout_s: float) -> None:
        self._tier, self._nbytes, self._busy, self._timeout_s = tier, nbytes, busy, timeout_s
        self._who = "a store" if caller else "a background transfer"
        self._since = time.monotonic()
        self._said = False
        self._checked = -1.0
        self._skipped = False

    def due_check(self) -> bool:
        """Whether to ask :func:`~tiered.room.hopeless` now.

        At once, then at most every :data:`HOPELESS_EVERY_S`: it walks every copy, and
        every finished drain wakes a waiter. A check skipped for that reason is made up
        for as soon as it is due (see :meth:`bound`), not at the next wake-up.
        """
        now = time.monotonic()
        if self._checked >= 0 and now - self._checked < HOPELESS_EVERY_S:
            self._skipped = True
            return False
        self._checked, self._skipped = now, False
        return True

    def bound(self, remaining: float) -> float:
        """Return how long the waiter may sleep: until a skipped check is due, or 1 s."""
        longest = min(remaining, 1.0)
        if self._skipped:
            return max(0.0, min(longest, self._checked + HOPELESS_EVERY_S - time.monotonic()))
        return longest

    def log(self) -> None:
        """Log what the wait is for, if it has lasted long enough and has not said so."""
        waited = time.monotonic() - self._since
        if self._said or waited < WAIT_LOG_S:
            return
        self._said = True
        drains, deletions = self._busy()
        log.warning("%s has waited %.1f s for %s in %s: %d drains and %d deletions in flight "
                    "can make room (full_timeout_s=%g)", self._who, waited,
                    format_size(self._nbytes), self._tier, drains, deletions, self._timeout_s)
