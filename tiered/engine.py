"""The cache's core: the index's bookkeeping, pins, errors, deletion and retirement.

Everything here that touches ``self._index`` runs under ``self._cond`` (the single metadata
lock); nothing holds it across I/O or ``Future.result()``.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Sequence

from tiered.config import CacheConfig
from tiered.deletion import Deletions
from tiered.errors import (
    BackgroundError,
    CacheClosedError,
    CorruptDataError,
    UnknownKeyError,
)
from tiered.index import Copy, Entry
from tiered.keys import Key
from tiered.movers import Lane
from tiered.planner import Planner
from tiered.policies.base import (
    PolicySpec,
    PredictorSpec,
    Signal,
)
from tiered.stats import CacheStats, TierStats
from tiered.tiers.base import Tier
from tiered.tiers.persistent import by_kind
from tiered.tiers.records import Record

log = logging.getLogger(__name__)


class TransferCancelledError(Exception):
    """A transfer stopped before it began: its entry was discarded, or the cache closed."""


class EngineCore:
    """Index, room-making and background drains shared by the public :class:`Cache`."""

    _readonly = False  # opened to read committed versions only: no repairs, no drains

    def __init__(self, tiers: Sequence[Tier], eviction: PolicySpec, prefetch: PredictorSpec,
                 config: CacheConfig) -> None:
        tiers = list(tiers)
        if not tiers or not all(isinstance(t, Tier) for t in tiers):
            raise ValueError("tiers must be a non-empty list of tiered tiers, fastest first")
        names = [t.name for t in tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be unique, got {names}; pass name=... to tell "
                             "two tiers of one kind apart")
        self._tiers = tiers
        self._config = config
        self._models = [t.model() for t in tiers]  # what each tier declares, read once
        self._mem, self._disk = by_kind(tiers)  # the same tiers, typed, by position
        # every decision and the index behind it; the names below are its own containers
        self._plan = Planner(self._models, eviction, prefetch,
                             prefetch_depth=config.prefetch_depth)
        self._memory = self._plan.memory
        self._index = self._plan.index
        self._nbytes = self._plan.nbytes
        self._resident = self._plan.resident
        self._clean = self._plan.clean
        # memory tiers whose lanes copy inside a context of theirs (a device's side stream)
        self._contexts = frozenset(i for i, m in enumerate(self._models) if m.context)
        self._demand_reads = 0  # revisits reading from a persistent tier right now
        self._store_waiters = 0  # stores waiting for room right now
        self._ahead = 0  # prefetched copies not yet revisited
        self._cond = threading.Condition()
        self._errors: list[tuple[BaseException, str, tuple[Key, ...]]] = []
        self._closed = False
        self._next_version = 1
        self._stats = CacheStats(tiers={t.name: TierStats(capacity_bytes=t.capacity_bytes)
                                        for t in tiers})
        self._lanes = {i: Lane(f"to-{m.name}", m.writers)
                       for i, m in enumerate(self._models) if i > 0}
        self._prefetch_lane = Lane("prefetch")
        # prefetch reads at once, per source tier: the pump reads itself while every tier
        # allows one, else hands reads to a pool
        self._readers = [m.readers for m in self._models]
        self._reading = [0] * len(tiers)  # prefetch reads in flight, per source tier
        pool = sum(m.readers for m in self._models if m.persistent)
        self._read_lane = (Lane("read", pool) if max(self._readers, default=1) > 1
                           else None)
        self._deletions = Deletions(self._disk, self._cond, self._failed)
        # copies lent out as views (revisit(copy=False)) whose views are all gone
        self._returned: collections.deque[tuple[Entry, Copy]] = collections.deque()
        self._lost: dict[Key, str] = {}  # keys whose newest object was damaged at open

    # ----------------------------------------------------------------- small helpers
    def _tstats(self, tier: int) -> TierStats:
        return self._stats.tiers[self._tiers[tier].name]

    def _lookup(self, key: Key) -> Entry:
        if self._lost and key in self._lost:
            raise CorruptDataError(self._lost[key], key=key)
        entry = self._index.get(key)
        if entry is None:
            raise UnknownKeyError(f"key {key!r} is not in the cache (never stored, or "
                                  "discarded)")
        return entry

    def _home(self, nbytes: int) -> int:
        return self._plan.home(nbytes)

    def _cancelled(self, entry: Entry | None) -> None:
        """Raise :class:`TransferCancelledError` if a transfer's ``entry`` needs no room now."""
        if entry is not None and (entry.gone or self._closed):
            raise TransferCancelledError(f"transfer of {entry.key!r} cancelled: "
                            + ("discarded" if entry.gone else "the cache closed"))

    def _enter(self, call: str) -> None:
        """Do what every public call does first; raise, and ``call`` does nothing else.

        Refuse if closed, take back lent copies, raise background failures not yet
        reported.
        """
        self._check_open()
        self._settle_returned()
        self._raise_errors(call)

    def _check_open(self) -> None:
        if self._closed:
            raise CacheClosedError("the cache is closed")

    def _failed(self, exc: BaseException, what: str, keys: tuple[Key, ...]) -> None:
        """Keep a background failure for the next call to raise (under the lock)."""
        self._errors.append((exc, what, keys))
        self._stats.background_errors += 1
        self._cond.notify_all()

    def _raise_errors(self, call: str, *, done: bool = False) -> None:
        """Raise the background failures not yet reported, once (under no lock).

        ``call`` names the public call; ``done`` says whether it did its own work first
        (``flush``) or does nothing (every other call raises before its work).
        """
        with self._cond:
            if not self._errors:
                return
            errors, self._errors = self._errors, []
        raise BackgroundError.of(call, list(errors), done=done) from errors[0][0]

    def _signal(self, signal: Signal, key: Key | None, *, nbytes: int = 0,
                hints: tuple[Key, ...] = ()) -> None:
        """Tell the predictor (under the lock)."""
        self._plan.signal(signal, key, nbytes=nbytes, hints=hints)

    def _index_put(self, entry: Entry) -> None:
        self._plan.put(entry)

    def _index_pop(self, key: Key) -> Entry:
        return self._plan.pop(key)

    def _forecast_keys(self) -> list[Key]:
        """Return the coming revisits within the horizon, soonest first (memoised)."""
        return self._plan.forecast_keys()

    def _add_copy(self, entry: Entry, copy: Copy) -> None:
        self._plan.add_copy(entry, copy)
        self._tstats(copy.tier).entries += 1

    def _drop_copy(self, entry: Entry, tier: int) -> Record | None:
        """Forget ``entry``'s copy in ``tier``; return a record whose file must be deleted."""
        copy = self._plan.drop_copy(entry, tier)
        if copy.prefetched and not copy.used:
            self._stats.wasted_prefetches += 1
            self._ahead -= 1
        self._tstats(tier).entries -= 1
        if copy.extent is not None:
            self._mem[tier].free(copy.extent)
        return copy.record

    def _unpin(self, entry: Entry, copy: Copy) -> list[tuple[int, Record]]:
        copy.pins -= 1
        doomed: list[tuple[int, Record]] = []
        if entry.gone and copy.pins == 0 and entry.copies.get(copy.tier) is copy:
            record = self._drop_copy(entry, copy.tier)
            if record is not None:
                doomed = self._let_go(entry, copy.tier, record)
            if entry.holders:
                doomed += self._let_holders_go(entry)
        self._cond.notify_all()
        return doomed

    def _let_holders_go(self, gone: Entry) -> list[tuple[int, Record]]:
        """Release what a gone entry's files referred to, once no copy of it is left.

        A pinned copy is still being read, and its leaves may be read from those files.
        """
        if gone.copies or not gone.holders:
            return []
        held, gone.holders = gone.holders, ()
        return self._unhold(held)

    def _let_go(self, gone: Entry, tier: int, record: Record | None) -> list[tuple[int, Record]]:
        """Return where a gone entry's file, freed late (pinned, or drained after), goes.

        Deleted, unless the entry was replaced and its replacement is not yet home: then
        it is parked on the replacement, deleted once that is durable (a crash before
        still finds a durable older value).
        """
        if record is None:
            return []
        current = self._index.get(gone.key)
        if not gone.delete_files and current is not None and current.dirty:
            current.superseded.append((tier, record))
            return []
        return [(tier, record)]

    def _settle_returned(self) -> None:
        """Unpin the lent copies whose views are all gone (with or without the lock held)."""
        if not self._returned:
            return
        doomed: list[tuple[int, Record]] = []
        with self._cond:
            while self._returned:
                entry, copy = self._returned.popleft()
                doomed += self._unpin(entry, copy)
        self._delete(doomed)

    def _delete(self, doomed: Sequence[tuple[int, Record]], *, now: bool = False) -> None:
        """Delete persistent records, in the background or (``now``) here."""
        self._deletions.delete(doomed, now=now or self._closed)

    def _kick(self, *, force: bool = False) -> None:
        """Room or the forecast changed (under the lock); the prefetch engine looks again."""

    def _unhold(self, objs: Sequence[tuple[Key, int]]) -> list[tuple[int, Record]]:
        """Release holds on objects (under the lock); return the files of those now unused."""
        doomed: list[tuple[int, Record]] = []
        for entry in self._plan.unnamed(self._plan.lineage.release(objs)):
            doomed += self._retire(entry, delete_files=True)
        return doomed

    # ----------------------------------------------------------------- retire
    def _retire(self, old: Entry, *, delete_files: bool) -> list[tuple[int, Record]]:
        """Retire ``old`` as the planner decides (:meth:`Planner.retire`).

        Returns the records to delete now; without ``delete_files``, the records the caller
        parks on the new version (deleted once it is home).
        """
        doomed: list[tuple[int, Record]] = []
        for tier in self._plan.retire(old, delete_files=delete_files):
            record = self._drop_copy(old, tier)
            if record is not None:
                doomed.append((tier, record))
        if old.superseded:
            doomed += old.superseded
            old.superseded = []
        if old.gone and old.holders:  # the files it referred to may go with it
            doomed += self._let_holders_go(old)
        return doomed

