"""Write-back bookkeeping: which dirty entries wait to drain, and when they must go.

With ``write_back="eager"`` every store is drained at once. With ``"lazy"`` a store waits in
memory until its tier needs the room: the engine drains the oldest waiting entries once
they hold more than ``capacity - headroom`` of the tier, or when a store or transfer needs
room now, and :meth:`~tiered.Cache.flush`/``close`` drain the rest. An adjoint history that
is revisited (and discarded) from memory then never reaches the disk at all.

The headroom is what is written without being needed: entries drained early that are
still in memory when their revisit comes. It starts small (:data:`MIN_HEADROOM`) and
doubles, up to :data:`MAX_HEADROOM`, each time a store has to wait for a drain to make
room, so it settles where the drains keep ahead of the stores on this machine.
"""

from __future__ import annotations

from tiered.index import Entry
from tiered.keys import Key

MIN_HEADROOM = 1 / 16  # of a tier's capacity kept drainable ahead of the stores, at first
MAX_HEADROOM = 1 / 2  # ... and at most, once stores have waited for drains


class Pending:
    """Dirty entries not yet handed to a drain, oldest first, per memory tier."""

    def __init__(self, ntiers: int) -> None:
        self._waiting: list[dict[Key, Entry]] = [{} for _ in range(ntiers)]
        self._bytes = [0] * ntiers
        self._where: dict[Key, tuple[int, int]] = {}  # key -> (tier, bytes counted)
        self._headroom = [MIN_HEADROOM] * ntiers

    def __len__(self) -> int:
        return len(self._where)

    def add(self, entry: Entry, tier: int, nbytes: int) -> None:
        """Hold ``entry`` (dirty, its copy in memory tier ``tier``) until it must drain.

        ``nbytes`` is what its copy takes in that tier, in the tier's own units (its
        footprint: a host tier spends whole pages), the units its capacity is given in.
        """
        self.discard(entry)
        self._waiting[tier][entry.key] = entry
        self._bytes[tier] += nbytes
        self._where[entry.key] = (tier, nbytes)

    def discard(self, entry: Entry) -> bool:
        """Stop holding ``entry`` (it drains now, or is gone); return whether it was held."""
        where = self._where.get(entry.key)
        if where is None or self._waiting[where[0]].get(entry.key) is not entry:
            return False
        del self._where[entry.key], self._waiting[where[0]][entry.key]
        self._bytes[where[0]] -= where[1]
        return True

    def headroom(self, tier: int) -> float:
        """Return the share of ``tier`` kept drainable ahead of the stores."""
        return self._headroom[tier]

    def widen(self, tier: int) -> None:
        """Start ``tier``'s drains earlier from now on (a store waited for room there)."""
        self._headroom[tier] = min(MAX_HEADROOM, 2 * self._headroom[tier])

    def due(self, tier: int, capacity: int, need: int = 0) -> list[Entry]:
        """Take the oldest entries of ``tier`` that must drain now.

        They must while the waiting bytes exceed ``capacity - headroom - need`` (``need``:
        bytes a caller is waiting to reserve).
        """
        allowed = capacity - int(self._headroom[tier] * capacity) - need
        out: list[Entry] = []
        waiting = self._waiting[tier]
        while waiting and self._bytes[tier] > allowed:
            entry = next(iter(waiting.values()))
            self.discard(entry)
            out.append(entry)
        return out
