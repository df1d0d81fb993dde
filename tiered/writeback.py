"""Write-back bookkeeping: which dirty entries wait to drain, and when they must go.

With ``write_back="eager"`` every store is drained at once. With ``"lazy"`` a store waits in
memory until its tier needs the room: the engine drains the oldest waiting entries once
they hold more than ``capacity - headroom`` of the tier, or when a store or transfer needs
room now, and :meth:`~tiered.Cache.flush`/``close`` drain the rest. An adjoint history that
is revisited (and discarded) from memory then never reaches the disk at all.
"""

from __future__ import annotations

from tiered.index import Entry
from tiered.keys import Key

HEADROOM = 0.5  # of a tier's capacity kept drainable ahead of the stores (drains start early)


class Pending:
    """Dirty entries not yet handed to a drain, oldest first, per memory tier."""

    def __init__(self, ntiers: int) -> None:
        self._waiting: list[dict[Key, Entry]] = [{} for _ in range(ntiers)]
        self._bytes = [0] * ntiers
        self._where: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self._where)

    def add(self, entry: Entry, tier: int) -> None:
        """Hold ``entry`` (dirty, its copy in memory tier ``tier``) until it must drain."""
        self.discard(entry)
        self._waiting[tier][entry.key] = entry
        self._bytes[tier] += entry.meta.nbytes
        self._where[entry.key] = tier

    def discard(self, entry: Entry) -> bool:
        """Stop holding ``entry`` (it drains now, or is gone); return whether it was held."""
        tier = self._where.get(entry.key)
        if tier is None or self._waiting[tier].get(entry.key) is not entry:
            return False
        del self._where[entry.key], self._waiting[tier][entry.key]
        self._bytes[tier] -= entry.meta.nbytes
        return True

    def due(self, tier: int, capacity: int, need: int = 0) -> list[Entry]:
        """Take the oldest entries of ``tier`` that must drain now.

        They must while the waiting bytes exceed ``capacity - headroom - need`` (``need``:
        bytes a caller is waiting to reserve).
        """
        allowed = capacity - int(HEADROOM * capacity) - need
        out: list[Entry] = []
        waiting = self._waiting[tier]
        while waiting and self._bytes[tier] > allowed:
            entry = next(iter(waiting.values()))
            self.discard(entry)
            out.append(entry)
        return out
