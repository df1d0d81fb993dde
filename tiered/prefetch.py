"""Reading back: revisits served from memory or disk, and the prefetch pump ahead of them.

A revisit reads its copy from the fastest tier holding it: a memory copy is copied out or
lent as views; a persistent copy is verified on the way up, a deeper copy tried if it is
corrupt, and maybe promoted into memory.

The prefetch pump brings forecast keys up into memory tiers ahead of their revisits.

One pump runs on the prefetch lane whenever the forecast or the room changes. Each round it
asks the predictor for the coming revisits (as many bytes as the memory tiers hold) and
brings up the first one that is only on a persistent tier, into the fastest memory tier
with room, evicting only clean copies forecast to be needed *later* than the one it brings,
and asks the kernel to read the next few such objects ahead (``POSIX_FADV_WILLNEED``), so
that the device has several reads in flight. The pump reads one object at a time itself,
or, where a persistent tier allows several readers (a directory on a machine with cores to
spare), hands up to that many reads at once to a pool of reader threads.
It stands aside while a revisit reads from disk (demand first), while a ``store`` waits
for room and through a run of stores (captures first), and it never touches dirty data.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import weakref
from concurrent.futures import Future
from typing import Any

from tiered.errors import CorruptDataError
from tiered.index import Copy, Entry
from tiered.movers import staging_buffer
from tiered.payload import borrow_leaves, can_borrow, read_leaves
from tiered.tiers.persistent import PersistentTier
from tiered.tiers.records import Record
from tiered.transfers import read_persistent
from tiered.writes import WriteEngine

log = logging.getLogger(__name__)

PUMP_WAIT_BOUND_S = 1.0  # the longest the pump sleeps unwoken while it stands aside
READAHEAD = 4  # forecast objects after the one being fetched that the kernel reads ahead

Job = tuple[Entry, Copy, int, Any, "Future[None]", list[tuple[PersistentTier, Record]]]


class PrefetchEngine(WriteEngine):
    """Adds the revisit reads and the prefetch pump to the engine (see the module docstring)."""

    _pump_running = False
    _pump_again = False
    _storing = False  # no revisit or hint since the last store

    def _kick(self, *, force: bool = False) -> None:
        """Start the pump, or tell the running one to look again (under the lock).

        Unless ``force`` (new hints), nothing happens during a run of stores (nothing is
        being read, and the forecast would be recomputed per store for nothing), while the
        lead of prefetched copies is above half the prefetch depth, or while every entry
        has a memory copy. A pump that runs for nothing costs the caller: its Python work
        holds the GIL the caller's next step needs.
        """
        if self._closed or not self._memory:
            return
        if not force and (self._storing or self._ahead > self._config.prefetch_depth // 2
                          or not self._any_cold()):
            return
        if self._pump_running:
            self._pump_again = True
            return
        self._pump_running = True
        self._prefetch_lane.submit(self._pump)

    def _any_cold(self) -> bool:
        """Whether some entry may be only in persistent tiers (the pump's only work).

        Exact with one memory tier; with several it answers True (the pump looks).
        """
        if len(self._memory) != 1:
            return True
        return len(self._index) > len(self._resident[self._memory[0]])

    def _pump(self) -> None:
        while True:
            with self._cond:
                job = self._next_job()
                if job is None:
                    if self._pump_again and not self._closed:
                        self._pump_again = False
                        continue
                    self._pump_running = False
                    return
                self._reading[job[1].tier] += 1
            if self._read_lane is None:
                self._fetch(*job)
            else:
                self._read_lane.submit(self._fetch, *job)

    def _next_job(self) -> Job | None:
        """Choose the next prefetch and reserve its room (under the lock), or ``None``."""
        while (self._demand_reads or self._store_waiters) and not self._closed:
            # woken when the last demand read or waiting store is done (both notify);
            # the bound only keeps a missed notification from stalling prefetch for long
            self._cond.wait(PUMP_WAIT_BOUND_S)
        if self._closed or self._ahead >= self._config.prefetch_depth:
            return None
        for rank, entry in self._plan.prefetch_order():  # the forecast eviction shares
            tried = entry.prefetch
            if tried is not None and (not tried.done() or tried.exception() is not None):
                continue  # on its way, or failed once (the demand read reports it)
            src = entry.fastest()
            if self._reading[src.tier] >= self._readers[src.tier]:
                return None  # its tier's readers are busy: the next read waits for one
            for tier in self._memory:
                extent = self._reserve(tier, entry.meta.nbytes, wait=False, limit=rank)
                if extent is not None:
                    src.pins += 1
                    future: Future[None] = Future()
                    entry.prefetch = future
                    return entry, src, tier, extent, future, self._read_ahead(rank + 1)
            return None  # later keys are needed later still: they may not push out more
        return None

    def _read_ahead(self, start: int) -> list[tuple[PersistentTier, Record]]:
        """Return persistent copies of the next forecast keys not yet advised (locked)."""
        out: list[tuple[PersistentTier, Record]] = []
        for key in self._forecast_keys()[start:start + 2 * READAHEAD]:
            entry = self._index[key]
            if entry.gone or entry.in_memory(self._memory):
                continue
            copy = entry.fastest()
            if not copy.advised and copy.tier in self._disk and copy.record:
                copy.advised = True
                out.append((self._disk[copy.tier], copy.record))
            if len(out) == READAHEAD:
                break
        return out

    def _fetch(self, entry: Entry, src: Copy, tier: int, extent: Any,
               future: Future[None], ahead: list[tuple[PersistentTier, Record]]) -> None:
        """Read one entry into its reserved extent (no lock held) and land it."""
        t = self._mem[tier]
        error: BaseException | None = None
        for source_tier, record in ahead:  # the kernel reads these while we read this one
            source_tier.advise(record)
        try:
            source = self._disk[src.tier]
            assert src.record is not None
            with self._background(tier):
                read_persistent(source, src.record, t.region(extent, entry.meta.nbytes))
        except BaseException as exc:  # the demand read will report it (and try deeper copies)
            error = exc
            log.warning("prefetch of %r from %s failed: %s", entry.key,
                        self._tiers[src.tier].name, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            try:
                doomed = self._finish_fetch(entry, src, tier, extent, error)
            finally:  # whatever happened, nobody waits on this prefetch beyond now
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)
        self._delete(doomed)

    def _finish_fetch(self, entry: Entry, src: Copy, tier: int, extent: Any,
                      error: BaseException | None) -> list[tuple[int, Record]]:
        """Land a read copy (or free its room), unpin its source; a reader is free again."""
        with self._cond:
            self._reading[src.tier] -= 1
            try:
                if error is None:
                    self._stats.prefetches += 1
                    self._tstats(tier).prefetches += 1
                    self._land(entry, Copy(tier, extent=extent, prefetched=True))
                else:
                    self._free_landing(Copy(tier, extent=extent))
                return self._unpin(entry, src)
            finally:
                if self._read_lane is not None:
                    self._kick()  # the pump may hand the free reader the next read

    def _land(self, entry: Entry, landing: Copy) -> None:
        """Add a copy read up from a persistent tier, unless it is no longer wanted."""
        if entry.gone or landing.tier in entry.copies:
            self._free_landing(landing)
        else:
            self._add_copy(entry, landing)
            self._ahead += landing.prefetched
            self._tstats(landing.tier).bytes_in += entry.meta.nbytes
            self._tstats(landing.tier).bytes_written += entry.meta.nbytes
            self._cond.notify_all()

    def _free_landing(self, landing: Copy) -> None:
        t = self._mem[landing.tier]
        assert landing.extent is not None
        t.free(landing.extent)

    # ----------------------------------------------------------------- revisit reads

    def _borrow_memory(self, entry: Entry, where: Copy) -> list[Any] | None:
        """Lend read-only views of a memory copy (``None`` where views are not possible).

        The copy stays pinned; it is unpinned after its views are all gone.
        """
        t = self._mem[where.tier]
        assert where.extent is not None
        region = t.region(where.extent, entry.meta.nbytes)
        if not can_borrow(region, entry.meta):
            return None
        leaves, owner = borrow_leaves(region, entry.meta)
        with self._cond:
            self._served(entry, where)
            self._stats.borrowed += 1
        # the finalizer only queues the copy: it may run inside any thread's garbage
        # collection, holding any lock; the next call into the cache unpins it
        weakref.finalize(owner, self._returned.append, (entry, where)).atexit = False
        return leaves

    def _await_prefetch(self, future: Future[Any]) -> None:
        """Wait for a prefetch in flight (no lock held)."""
        if future.done():
            return
        started = time.perf_counter()
        concurrent.futures.wait([future], timeout=self._config.full_timeout_s)
        waited = time.perf_counter() - started
        with self._cond:
            self._stats.late_prefetches += 1
            self._stats.late_prefetch_wait_s += waited
            self._stats.stall_s += waited

    def _hit(self, entry: Entry, tier: int) -> None:
        self._tstats(tier).hits += 1
        self._tstats(tier).bytes_out += entry.meta.nbytes
        for above in range(tier):
            self._tstats(above).misses += 1
        self._stats.revisits += 1
        self._plan.access(entry, tier)

    def _read_memory(self, entry: Entry, copy: Copy, into: list[Any] | None) -> list[Any]:
        t = self._mem[copy.tier]
        assert copy.extent is not None
        leaves = read_leaves(t.region(copy.extent, entry.meta.nbytes), entry.meta, into)
        with self._cond:
            self._served(entry, copy)
        return leaves

    def _served(self, entry: Entry, copy: Copy) -> None:
        """Count a revisit answered from a memory copy (under the lock)."""
        self._hit(entry, copy.tier)
        if copy.prefetched and not copy.used:
            self._stats.prefetch_hits += 1
            self._ahead -= 1
        copy.used = True

    def _read_persistent(self, entry: Entry, copy: Copy, into: list[Any] | None) -> list[Any]:
        """Read a verified copy, trying deeper copies if one is corrupt; maybe promote."""
        region, landing = self._landing(entry, copy.tier)
        tier = copy.tier
        while True:
            t = self._disk[tier]
            record = entry.copies[tier].record if tier in entry.copies else None
            try:
                if record is None:
                    raise CorruptDataError(f"key {entry.key!r}: no copy left in {t.name}")
                read_persistent(t, record, region)
                break
            except CorruptDataError as exc:
                tier = self._after_corrupt(entry, tier, exc, landing)
        leaves = read_leaves(region, entry.meta, into)
        with self._cond:
            self._hit(entry, tier)
            if landing is not None:
                self._land(entry, landing)
        return leaves

    def _after_corrupt(self, entry: Entry, tier: int, exc: CorruptDataError,
                       landing: Copy | None) -> int:
        """Quarantine a corrupt copy if a deeper one exists and return its tier; else raise.

        A read-only cache renames nothing: it reads the deeper copy and leaves the file.
        """
        log.error("%s", exc)
        with self._cond:
            self._stats.corrupt_reads += 1
            deeper = [i for i in entry.copies if i > tier and i in self._disk]
            if not deeper:  # keep the entry: each revisit reports it again
                if landing is not None:
                    self._free_landing(landing)
                raise exc
            # a reader changes no file: the deeper copy answers, the corrupt one stays
            ours = entry.copies[tier].pins <= 1 and not self._readonly
            record = self._drop_copy(entry, tier) if ours else None
        if record is not None:
            t = self._disk[tier]
            t.quarantine(record)
        return min(deeper)

    def _landing(self, entry: Entry, source: int) -> tuple[Any, Copy | None]:
        """Where a persistent read lands: a promoted memory copy, or a staging buffer."""
        n = entry.meta.nbytes
        if self._config.promote:
            with self._cond:
                for i in range(source):
                    if i in self._mem and i not in entry.copies:
                        extent = self._reserve(i, n, wait=False)
                        if extent is not None:
                            return self._mem[i].region(extent, n), Copy(i, extent=extent)
        return staging_buffer(n), None
