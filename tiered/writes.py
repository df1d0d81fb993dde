"""Writes: a value captured into its first tier, room made for it, and drains down.

A store is flattened by the cache, then placed here where the planner says (room made by
evicting clean copies or waiting for drains, in memory and persistent tiers alike),
copied once, and installed in the index; a dirty entry drains, tier by tier, on the lane
of each tier below it (at once, or with lazy write-back once its memory is needed).
Restart without a catalog (:meth:`WriteEngine._recover`) indexes what the tiers hold.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from tiered import recovery
from tiered.engine import EngineCore, TransferCancelledError
from tiered.errors import TierFullError
from tiered.index import Copy, Entry
from tiered.keys import Key
from tiered.movers import leaf_checksums, staging_buffer
from tiered.payload import write_leaves
from tiered.room import Watch
from tiered.sizes import format_size
from tiered.tiers.records import Record
from tiered.transfers import background, transfer
from tiered.values import ValueMeta

log = logging.getLogger(__name__)


class WriteEngine(EngineCore):
    """Adds capture, room-making and drains to the engine (see the module docstring)."""

    # ----------------------------------------------------------------- capture
    def _place(self, where: list[tuple[int, bool]],
               nbytes: int) -> tuple[int, Any, list[tuple[int, Record]]]:
        """Make room where the planner places a new value (under the lock).

        ``where``: :meth:`Planner.placement`. Every tier makes room by the same rules,
        memory or persistent: evict clean copies, then wait for drains where the plan
        says to wait, else try the next tier. Returns the tier, the memory extent reserved
        (``None`` in a persistent tier) and the files to delete before writing.
        """
        for i, wait in where:
            if i in self._mem:
                extent = self._reserve(i, nbytes, wait=wait, caller=True)
                if extent is not None:
                    return i, extent, []
                continue
            doomed = self._room_persistent(i, nbytes, wait=wait)
            if doomed is not None:
                return i, None, doomed
        raise TierFullError(f"no tier has room for {format_size(nbytes)}")

    def _capture(self, key: Key, version: int, meta: ValueMeta, arrays: list[Any], tier: int,
                 extent: Any) -> Copy:
        """Make the one copy of a capture (no lock held); synchronous for a persistent tier."""
        if tier in self._mem:
            write_leaves(self._mem[tier].region(extent, meta.nbytes), meta, arrays)
            return Copy(tier, extent=extent)
        host = staging_buffer(meta.nbytes)
        write_leaves(host, meta, arrays)
        return Copy(tier, record=self._disk[tier].put(key, version, meta, host,
                                                      leaf_checksums(host, meta)))

    def _install(self, entry: Entry, copy: Copy) -> None:
        doomed: list[tuple[int, Record]] = []
        with self._cond:
            self._lost.pop(entry.key, None)  # a new value replaces a damaged one
            old = self._index.get(entry.key)
            if old is not None and old.version > entry.version:  # a racing newer store won
                entry, old = old, entry
                self._add_copy(old, copy)
                doomed = self._retire(old, delete_files=True)
            else:
                if old is not None:
                    entry.superseded = self._retire(old, delete_files=False)
                    entry.base = None if old.gone else old  # kept by a version
                self._add_copy(entry, copy)
                if copy.record is not None:
                    entry.checksums = copy.record.checksums
                self._index_put(entry)
                self._stats.stores += 1
                self._stats.bytes_stored += entry.meta.nbytes
                self._tstats(copy.tier).bytes_in += entry.meta.nbytes
                self._tstats(copy.tier).bytes_written += entry.meta.nbytes
                if entry.dirty:
                    self._dirtied(entry)
                else:
                    doomed, entry.superseded = entry.superseded, []
            self._cond.notify_all()
        self._delete(doomed)

    # ----------------------------------------------------------------- room
    def _watch(self, tier: str, nbytes: int, caller: bool) -> Watch:
        def busy() -> tuple[int, int]:
            drains = sum(entry.drain is not None for entry in self._index.values())
            return drains, self._deletions.pending
        return Watch(tier, nbytes, caller, busy, self._config.full_timeout_s)

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
                doomed += self._let_holders_go(entry)
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

    # ----------------------------------------------------------------- restart
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
