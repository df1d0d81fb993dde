"""The cache's internals: index bookkeeping, room-making, drains, recovery.

Everything here that touches ``self._index`` runs under ``self._cond`` (the single metadata
lock); nothing holds it across I/O or ``Future.result()``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from tiered import recovery
from tiered.config import CacheConfig
from tiered.deletion import Deletions
from tiered.errors import (
    BackgroundError,
    CacheClosedError,
    CorruptDataError,
    TierFullError,
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
from tiered.room import Watch
from tiered.sizes import format_size
from tiered.stats import CacheStats, TierStats
from tiered.tiers.base import Record, Tier, by_kind
from tiered.transfers import background, transfer

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

    def _watch(self, tier: str, nbytes: int, caller: bool) -> Watch:
        def busy() -> tuple[int, int]:
            drains = sum(entry.drain is not None for entry in self._index.values())
            return drains, self._deletions.pending
        return Watch(tier, nbytes, caller, busy, self._config.full_timeout_s)

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
            doomed = self._let_go(entry, copy.tier, self._drop_copy(entry, copy.tier))
        self._cond.notify_all()
        return doomed

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

    # ----------------------------------------------------------------- room
    def _evict_one(self, tier: int, need: int, limit: float = -1.0,
                   ahead: int = 0) -> Record | None | bool:
        """Evict what the planner chooses from ``tier`` (:meth:`Planner.victims`).

        Returns ``False`` if nothing could go, else the first victim's file record (or
        ``True`` for a memory copy, which has none).
        """
        victims = self._plan.victims(tier, need, limit, ahead)
        first: Record | None | bool = False
        for key in victims:
            self._tstats(tier).evictions += 1
            record = self._drop_copy(self._plan.resident[tier][key], tier)
            if first is False:  # only a persistent tier's copy has a file to delete
                first = record if record is not None else True
        return first

    def _reserve(self, tier: int, nbytes: int, *, wait: bool, caller: bool = False,
                 limit: float = -1.0, entry: Entry | None = None) -> Any:
        """Reserve ``nbytes`` in memory tier ``tier``, evicting clean copies; maybe wait.

        Returns the extent, or ``None`` when ``wait`` is false and no room can be made.
        Raises :class:`TierFullError` at once when no wait can make room
        (:func:`~tiered.room.hopeless`), or when waiting past ``full_timeout_s``;
        :class:`TransferCancelledError` when ``entry`` (the one the room is for) is discarded
        or the cache closes meanwhile. ``limit`` is passed to :meth:`_evict_one`.
        """
        t = self._mem[tier]
        extent = t.allocate(nbytes)
        if extent is not None:  # the common case: nothing more to set up
            return extent
        deadline = time.monotonic() + self._config.full_timeout_s
        waited = False
        watch = self._watch(t.name, nbytes, caller)
        while True:
            extent = t.allocate(nbytes)
            if extent is not None:
                return extent
            if self._evict_one(tier, nbytes, limit, self._plan.ahead_bytes(tier, nbytes) if caller
                               else 0) is not False:
                continue
            if self._returned:  # lent copies given back since: unpin them and look again
                self._settle_returned()
                continue
            if not wait:
                return None
            if caller and not waited:
                waited = True
                self._plan.pending.widen(tier)  # lazy write-back: drains start too late here
            self._drain_due(tier, need=nbytes)  # lazy write-back: room must come from drains
            started = time.perf_counter()
            self._store_waiters += caller
            try:
                self._await_room(tier, nbytes, deadline, watch, entry)
            finally:
                self._store_waiters -= caller
                if caller and not self._store_waiters:
                    self._cond.notify_all()  # the prefetch pump stands aside until now
            if caller:
                self._stats.blocked_s += time.perf_counter() - started

    def _room_persistent(self, tier: int, nbytes: int, *, wait: bool = True,
                         entry: Entry | None = None) -> list[tuple[int, Record]] | None:
        """Choose clean copies to evict from a persistent tier so ``nbytes`` more fit.

        Waits (bounded) for copies to become clean when none is yet, as :meth:`_reserve`
        does (and raises as it does); without ``wait`` returns ``None`` instead. Returns
        the records whose files the caller deletes, outside the lock, before it writes;
        when it raises or returns ``None``, it has queued their deletion itself (what went
        had a verified copy below).
        """
        t = self._disk[tier]
        doomed: list[tuple[int, Record]] = []
        freed = 0
        deadline = time.monotonic() + self._config.full_timeout_s
        watch = self._watch(t.name, nbytes, entry is None)
        try:
            while self._plan.short(tier, t.used_bytes, nbytes, freed):
                record = self._evict_one(tier, nbytes)
                if isinstance(record, Record):
                    doomed.append((tier, record))
                    freed += record.file_bytes
                    continue
                if not wait:
                    self._delete(doomed)
                    return None
                self._await_room(tier, nbytes, deadline, watch, entry)
        except BaseException:
            self._delete(doomed)
            raise
        return doomed

    def _await_room(self, tier: int, nbytes: int, deadline: float, watch: Watch,
                    entry: Entry | None) -> None:
        """Wait once for room in ``tier`` (under the lock), or raise why none will come."""
        t = self._tiers[tier]
        self._cancelled(entry)
        if watch.due_check() and (reason := self._plan.hopeless(tier, nbytes)):
            raise TierFullError(reason)
        watch.log()
        remaining = deadline - time.monotonic()
        if remaining <= 0 or self._closed:
            raise TierFullError(
                f"{t.name}: no room for {format_size(t.footprint(nbytes))} after "
                f"{self._config.full_timeout_s:g} s (used {format_size(t.used_bytes)} of "
                f"{format_size(t.capacity_bytes or 0)}, all dirty or in use); raise "
                "full_timeout_s, add capacity, or use on_full='spill'")
        self._cond.wait(watch.bound(remaining))

    # ----------------------------------------------------------------- drains
    def _dirtied(self, entry: Entry) -> None:
        """Drain a freshly stored dirty ``entry`` now, or (lazy) once its tier needs room."""
        for due in self._plan.dirtied(entry, eager=self._config.write_back == "eager"):
            self._schedule_drain(due)

    def _drain_due(self, tier: int, need: int = 0) -> None:
        """Start the lazy drains tier ``tier`` needs (``need``: bytes wanted right now)."""
        for entry in self._plan.due(tier, need):
            self._schedule_drain(entry)

    def _schedule_drain(self, entry: Entry) -> None:
        self._plan.pending.discard(entry)
        if entry.gone or not entry.dirty or entry.drain is not None or self._closed:
            return
        dst = self._plan.drain_target(entry)
        if dst is None:  # no tier below takes it (reopened with smaller tiers): it stays
            log.warning("%r cannot drain: no tier below its copy can hold it", entry.key)
            return
        entry.failure = None
        entry.drain = self._lanes[dst].submit(self._run_drain, entry, dst)

    def _run_drain(self, entry: Entry, dst: int) -> None:
        try:
            self._drain(entry, dst)
        except TransferCancelledError as exc:  # nothing to report: nobody wants this copy any more
            log.debug("%s", exc)
            with self._cond:
                entry.drain = None
                self._cond.notify_all()
        except BaseException as exc:
            what = f"drain of {entry.key!r} into {self._tiers[dst].name}"
            log.error("%s failed: %s", what, exc)
            with self._cond:
                entry.drain = None
                entry.failure = exc
                self._failed(exc, what, (entry.key,))
            raise

    def _drain(self, entry: Entry, dst: int) -> None:
        nbytes = entry.meta.nbytes
        self._await_base(entry)
        with self._cond:
            if entry.gone:
                entry.drain = None
                return
            src = entry.fastest()
            src.pins += 1
            extent = None
            doomed: list[tuple[int, Record]] = []
            reserved = 0  # bytes held in a persistent tier while several writes run at once
            try:
                if dst in self._mem:
                    extent = self._reserve(dst, nbytes, wait=True, entry=entry)
                else:
                    doomed = self._room_persistent(dst, nbytes, entry=entry) or []
                    reserved = self._disk[dst].footprint(nbytes)
                    self._plan.write_started(dst, reserved)
            except BaseException:
                self._delete(self._unpin(entry, src))
                raise
            # a value kept by a version, whose equal leaves this write refers to: held
            # until the new file names the files that hold them
            base = self._plan.dedup_base(entry, dst)
            held = [] if base is None else [(base.key, base.version)]
            self._plan.lineage.hold(held)
            content = dst == entry.home and bool(self._plan.lineage)
        try:
            self._delete(doomed, now=True)  # the write below needs that room
            with self._background(src.tier, dst):
                new = self._transfer(entry, src, dst, extent, content=content,
                                     base=None if base is None else base.copies[dst].record)
        except BaseException:
            with self._cond:
                self._plan.write_ended(dst, reserved)
                self._delete(self._unpin(entry, src) + self._unhold(held))
                if extent is not None:
                    t = self._mem[dst]
                    t.free(extent)
            raise
        with self._cond:
            self._plan.write_ended(dst, reserved)  # the tier counts its file itself now
        self._finish_drain(entry, src, new, held)

    def _kick(self, *, force: bool = False) -> None:
        """Room or the forecast changed (under the lock); the prefetch engine looks again."""

    def _await_base(self, entry: Entry) -> None:
        """Let the drain of the kept value ``entry`` replaced finish, if it is running.

        Its file is what this write's equal leaves refer to. Only a running drain is
        waited for (on another of the lane's threads): one still queued may be behind
        this one.
        """
        with self._cond:
            base = entry.base
            future = None if base is None else base.drain
        if future is not None and future.running():
            concurrent.futures.wait([future], timeout=self._config.full_timeout_s)

    def _unhold(self, objs: Sequence[tuple[Key, int]]) -> list[tuple[int, Record]]:
        """Release holds on objects (under the lock); return the files of those now unused."""
        doomed: list[tuple[int, Record]] = []
        for entry in self._plan.unnamed(self._plan.lineage.release(objs)):
            doomed += self._retire(entry, delete_files=True)
        return doomed

    def _finish_drain(self, entry: Entry, src: Copy, new: Copy,
                      held: Sequence[tuple[Key, int]] = ()) -> None:
        nbytes = entry.meta.nbytes
        with self._cond:
            doomed = self._unpin(entry, src)
            record = new.record
            if not entry.gone and record is not None and record.refs:
                entry.holders = tuple((entry.key, v) for v in record.holders())
                self._plan.lineage.hold(entry.holders)
            doomed += self._unhold(held)
            entry.drain = None
            self._tstats(src.tier).bytes_out += nbytes
            stats = self._tstats(new.tier)
            stats.bytes_in += nbytes
            stats.bytes_written += nbytes if record is None else record.stored_bytes
            if entry.gone:
                self._add_copy(entry, new)
                doomed += self._let_go(entry, new.tier, self._drop_copy(entry, new.tier))
            else:
                self._add_copy(entry, new)
                if entry.dirty:
                    self._schedule_drain(entry)
                else:
                    doomed += entry.superseded
                    entry.superseded, entry.base = [], None
                    self._kick()  # a clean copy is room a prefetch may use
            self._cond.notify_all()
        self._delete(doomed)

    def _background(self, *tiers: int) -> contextlib.AbstractContextManager[Any]:
        """Enter the contexts a lane copies in for these tiers (a device tier's stream)."""
        return background([self._mem[i] for i in tiers if i in self._contexts])

    def _transfer(self, entry: Entry, src: Copy, dst: int, extent: Any, *,
                  content: bool = False, base: Record | None = None) -> Copy:
        """Move bytes from ``src`` into tier ``dst`` (no lock held; see :func:`transfer`)."""
        return transfer(self._mem, self._disk, entry, src, dst, extent, content=content,
                        base=base)

    # ----------------------------------------------------------------- retire / recover
    def _retire(self, old: Entry, *, delete_files: bool) -> list[tuple[int, Record]]:
        """Retire ``old`` as the planner decides (:meth:`Planner.retire`).

        Returns the records to delete now; without ``delete_files``, the records the caller
        parks on the new version (deleted once it is home).
        """
        doomed = [(tier, record) for tier in self._plan.retire(old, delete_files=delete_files)
                  if (record := self._drop_copy(old, tier)) is not None]
        doomed += old.superseded
        old.superseded = []
        if old.gone and old.holders:  # the files it referred to may go with it
            held, old.holders = old.holders, ()
            doomed += self._unhold(held)
        return doomed

    def _recover(self) -> list[str]:
        """Rebuild the index from the persistent tiers (this is restart)."""
        found, problems, damaged = recovery.scan(self._disk, repair=not self._readonly)
        self._lost = recovery.lost(self._disk, found, damaged)
        self._next_version = max(self._next_version, recovery.past(self._disk, damaged))
        for entry, copies in recovery.entries(found, self._home):
            if entry.key in self._lost:
                continue  # its newest object is damaged: never answered with an older one
            for copy in copies:
                self._add_copy(entry, copy)
            self._index_put(entry)
            self._next_version = max(self._next_version, entry.version + 1)
            if self._readonly:
                entry.superseded = []  # a reader changes nothing
            elif entry.dirty:
                self._schedule_drain(entry)
            elif entry.superseded:  # left by the run before: gone before this one writes
                self._deletions.unlink(entry.superseded, recycle=False)
                entry.superseded = []
        return problems
