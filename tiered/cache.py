"""The public cache: ``store`` / ``revisit`` / ``hint`` / ``flush`` over a list of tiers."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from tiered.config import CacheConfig, OnFull, WriteBack
from tiered.errors import CorruptDataError, TierFullError
from tiered.index import Copy, Entry
from tiered.keys import Key, canonical_key
from tiered.payload import check_out
from tiered.policies.base import PolicySpec, PredictorSpec
from tiered.sizes import format_size
from tiered.stats import CacheStats
from tiered.tiers.base import Tier
from tiered.values import flatten, unflatten
from tiered.versioned import VersionedEngine

log = logging.getLogger(__name__)


class Cache(VersionedEngine):
    """A write-back cache of checkpoint values over an ordered list of tiers.

    Parameters
    ----------
    tiers : sequence of Tier
        Fastest first, e.g. ``[HostTier("4GiB"), DirectoryTier(bb), HDF5Tier(pfs)]``. Any
        non-empty ordered subset of the tier kinds works; the deepest tier that can hold a
        value is its durability point.
    eviction : str, policy or factory
        ``"lru"`` (default), ``"lfu"``, ``"fifo"``, ``"score"``, ``"belady"``, or an
        :class:`~tiered.policies.EvictionPolicy` (or a factory of one); one instance per tier.
    prefetch : str, predictor, factory or None
        What forecasts the coming revisits: ``"reverse"`` (adjoint sweeps), ``"stride"``,
        ``"markov"``, ``"recent"`` (rollback), ``"auto"`` (reverse, stride and markov), each
        after the explicit :meth:`hint` order; ``"hinted"`` or ``None`` for hints only; or a
        :class:`~tiered.policies.Predictor`.
    config : CacheConfig, optional
        How the cache behaves when tiers fill and when it reads back; every default comes
        from :class:`~tiered.config.CacheConfig`.
    on_full, full_timeout_s, promote, prefetch_depth, write_back
        Override those fields of ``config`` (see :class:`~tiered.config.CacheConfig`).
    readonly : bool
        Open existing persistent tiers to read their committed versions only, beside a
        writer: no lock is taken, nothing is repaired, drained or deleted, and ``store``,
        ``discard``, ``commit`` and ``retain`` raise :class:`~tiered.errors.ReadOnlyError`.
    keep_last : int, optional
        Keep only this many versions: older ones are deleted once a new one is durable
        (see :meth:`retain`).
    comm : None
        Reserved for MPI communicators (collective commits).

    Notes
    -----
    Thread-safe: ``store``, ``revisit``, ``hint`` and ``discard`` may be called from several
    threads. Opening a cache over existing persistent tiers is a restart. Once the cache
    has committed a version, its catalog alone says what comes back: the head's key space
    (with what the last ``flush`` since made durable) and every kept version; other files
    are garbage, removed. Before any commit, the newest well-formed object of each key
    comes back. What was set aside is listed in :attr:`recovery`. A persistent tier has one
    writer at a time (:class:`~tiered.errors.TierLockedError` for a second).
    """

    def __init__(self, tiers: Sequence[Tier], *, eviction: PolicySpec = "lru",
                 prefetch: PredictorSpec = None, config: CacheConfig | None = None,
                 on_full: OnFull | None = None, full_timeout_s: float | None = None,
                 promote: bool | None = None, prefetch_depth: int | None = None,
                 write_back: WriteBack | None = None, readonly: bool = False,
                 keep_last: int | None = None, comm: Any = None) -> None:
        if comm is not None:
            raise ValueError("comm: collective MPI commits are not available in this version")
        given: dict[str, Any] = {"on_full": on_full, "full_timeout_s": full_timeout_s,
                                 "promote": promote, "prefetch_depth": prefetch_depth,
                                 "write_back": write_back}
        config = dataclasses.replace(config or CacheConfig(),
                                     **{k: v for k, v in given.items() if v is not None})
        super().__init__(tiers, eviction, prefetch, config, readonly=readonly,
                         keep_last=keep_last)
        try:
            with self._cond:
                self.recovery: list[str] = self._recover()
        except BaseException:  # the open failed: stop what restart started, then unlock
            try:
                self.close(drain=False)
            except Exception as exc:  # noqa: BLE001 - the open's own error is the one to raise
                log.error("closing a cache whose open failed: %s", exc)
            finally:
                self._release_tiers()  # the locks go, whatever closing raised
            raise

    # ----------------------------------------------------------------- store
    def store(self, key: Key, value: Any) -> None:
        """Capture ``value`` under ``key``; return once it is copied into the top tier.

        Raises
        ------
        TypeError
            If a leaf of ``value`` cannot be stored (the message names its path).
        TierFullError
            If no tier can ever hold the value, or room did not appear in time.
        """
        self._enter("store")
        self._writable("store")
        key = canonical_key(key)
        meta, arrays = flatten(value)
        with self._cond:
            where = self._plan.placement(meta.nbytes, spill=self._config.on_full == "spill")
            if not where:
                raise TierFullError(f"value for {key!r} needs {format_size(meta.nbytes)}, "
                                    "more than the capacity of every tier; nothing was stored")
            version = self._next_version
            self._next_version += 1
            tier, extent, doomed = self._place(where, meta.nbytes)
            reserved = 0 if extent is not None else self._tiers[tier].footprint(meta.nbytes)
            self._plan.write_started(tier, reserved)
        try:
            self._delete(doomed, now=True)  # the write below needs that room
            copy = self._capture(key, version, meta, arrays, tier, extent)
        except BaseException:
            with self._cond:
                self._plan.write_ended(tier, reserved)
                if extent is not None:
                    t = self._mem[tier]
                    t.free(extent)
                self._cond.notify_all()
            raise
        if reserved:  # a persistent top tier counts the object's bytes itself now
            with self._cond:
                self._plan.write_ended(tier, reserved)
        self._install(Entry(key, version, meta, self._home(meta.nbytes)), copy)
        with self._cond:
            self._signal("store", key, nbytes=meta.nbytes)
            self._storing = True  # the pump idles through a run of stores (captures first)

    # ----------------------------------------------------------------- revisit
    def revisit(self, key: Key, *, version: object = None, out: Any = None,
                copy: bool = True) -> Any:
        """Return the value stored under ``key``, from the fastest tier holding it.

        Parameters
        ----------
        key
            As given to :meth:`store`.
        version : Version, int or str, optional
            Read ``key`` as of this committed version (by handle, id or label) instead of
            the key space's current value.
        out : array, tensor or nested structure of them, optional
            Contiguous arrays shaped like the stored value to copy it into (no allocation).
            The value returned holds ``out``'s arrays (it is ``out`` for a single array) and
            the stored scalars. Without it the value is a fresh copy.
        copy : bool
            ``False``: when the value sits in a host memory tier and all its arrays are
            numpy arrays, return read-only views of the cache's memory instead of copies
            (no copy at all). That memory stays pinned (never evicted, and freed only after
            a :meth:`discard`) until every returned array and every view of one is garbage
            collected, and the next call into the cache (or a store waiting for room)
            takes it back: drop them before storing much more. Elsewhere a copy is
            returned as usual. Not with ``out``.

        Raises
        ------
        KeyError
            (:class:`~tiered.UnknownKeyError`) if ``key`` was never stored or was discarded
            (or is not in ``version``; :class:`~tiered.errors.UnknownVersionError` if there
            is no such version).
        ValueError
            If ``out`` does not match the stored value's structure, dtypes and shapes.
        CorruptDataError
            If every persistent copy fails verification (and no memory copy exists); never
            answered with another version's value. The versions naming it are marked
            failed.
        """
        self._enter("revisit")
        key = canonical_key(key)
        into = None
        if out is not None and not copy:
            raise ValueError("revisit: out= copies into your arrays; it cannot go with "
                             "copy=False")
        find = self._lookup if version is None else functools.partial(self._as_of, version)
        if out is not None:
            out_meta, into = flatten(out)
            with self._cond:
                check_out(find(key).meta, out_meta, into)
        started = time.perf_counter()
        with self._cond:
            vid = None if version is None else self._lineage.resolve(version).id
            prefetch = find(key).prefetch
        if prefetch is not None:
            self._await_prefetch(prefetch)
        with self._cond:
            entry = find(key)
            where = entry.fastest()
            where.pins += 1
            entry.consumed = True
            from_disk = where.tier in self._disk
            self._demand_reads += from_disk
            self._signal("revisit", key, nbytes=entry.meta.nbytes)
            self._storing = False
            self._kick()
            if vid is not None:
                self._versions_read[vid] += 1
        borrowed = False
        try:
            lent = None if from_disk or copy else self._borrow_memory(entry, where)
            if lent is not None:
                leaves, borrowed = lent, True
            elif not from_disk:
                leaves = self._read_memory(entry, where, into)
            else:
                leaves = self._read_persistent(entry, where, into)
                with self._cond:
                    self._stats.stall_s += time.perf_counter() - started
        except CorruptDataError as exc:
            with self._cond:
                raise self._corrupt(entry, exc) from exc
        finally:
            if not borrowed:  # a borrowed copy stays pinned until its views are gone
                self._release(entry, where, demand=from_disk)
            if vid is not None:
                with self._cond:
                    self._versions_read[vid] -= 1
        return unflatten(entry.meta.spec, leaves)

    def _release(self, entry: Entry, where: Copy, *, demand: bool = False) -> None:
        """Unpin the copy a revisit read and delete what that frees."""
        with self._cond:
            self._demand_reads -= demand
            doomed = self._unpin(entry, where)
        self._delete(doomed)

    # ----------------------------------------------------------------- hints
    def hint(self, keys: Iterable[Key] = (), *, rollback: bool = False) -> None:
        """Declare the order of coming revisits: prefetch these keys, in this order.

        Keys not (yet) in the cache are skipped when their turn comes. With
        ``rollback=True`` the keys (or, with none, the newest stored key) go first: the run
        is about to return to them.
        """
        self._enter("hint")
        named = tuple(canonical_key(k) for k in keys)
        with self._cond:
            self._signal("rollback" if rollback else "hint", None, hints=named)
            self._storing = False
            self._kick(force=True)

    # ----------------------------------------------------------------- the rest
    def discard(self, key: Key) -> None:
        """Forget ``key`` in every tier.

        Its memory is free at once; its files are deleted in the background (:meth:`flush`
        and :meth:`close` wait for that).
        """
        self._enter("discard")
        self._writable("discard")
        key = canonical_key(key)
        with self._cond:
            if self._lost.pop(key, None) is not None and key not in self._index:
                return  # its only value was damaged: nothing more to forget
            entry = self._lookup(key)
            self._index_pop(key)
            doomed = self._retire(entry, delete_files=True)
            self._signal("discard", key)
            self._cond.notify_all()
        self._delete(doomed)

    def flush(self, timeout: float | None = None) -> None:
        """Block until every entry is durable in its home (deepest) tier.

        Also waits for the commits in flight and, once the cache has versions, records
        the key space in the catalog: a restart comes back to it (stores and discards
        after the last flush are not recorded, and do not come back).

        Also waits for the files of discarded entries to be deleted (a deletion that failed
        before is tried again).

        Raises
        ------
        BackgroundError
            If a transfer or a deletion failed (the data stays in the faster tier, the
            file stays; a later ``flush`` retries it).
        TimeoutError
            If ``timeout`` seconds pass first.
        """
        self._check_open()
        self._settle_returned()
        if self._readonly:
            return  # a reader has nothing to make durable
        deadline = None if timeout is None else time.monotonic() + timeout
        self._deletions.retry()  # what failed before is tried again, and reported if it fails
        while True:
            with self._cond:
                for entry in self._index.values():
                    self._schedule_drain(entry)
                futures = [e.drain for e in self._index.values() if e.drain is not None]
            if futures:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"flush: {len(futures)} transfers still running")
                concurrent.futures.wait(futures, timeout=remaining)
            if not futures and not self._deletions.settle(deadline):
                raise TimeoutError("flush: deletions of discarded files still running")
            if not futures:
                self._settle_versions(deadline)  # commits in flight, then the key space
            self._raise_errors("flush", done=True)  # after this round settled: reported once
            if not futures:
                return

    def close(self, *, drain: bool = True) -> None:
        """Drain (unless ``drain=False``), stop the lanes and release the tiers; idempotent."""
        if self._closed:
            return
        try:
            if drain:
                self.flush()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            for lane in [self._prefetch_lane, *self._lanes.values()]:
                lane.shutdown(cancel=True)
            self._commit_lane.shutdown(cancel=False)  # a commit waiting for drains fails
            if self._read_lane is not None:  # after the pump, which feeds it; a queued
                self._read_lane.shutdown(cancel=False)  # read holds room: let it finish
            self._deletions.shutdown()  # what was discarded stays discarded
            for tier in self._tiers:
                tier.close()

    def stats(self) -> CacheStats:
        """Return a snapshot of the counters (per tier and overall)."""
        self._settle_returned()
        with self._cond:
            for tier in self._tiers:
                self._stats.tiers[tier.name].used_bytes = tier.used_bytes
            return CacheStats(**{**self._stats.__dict__, "tiers": {
                name: type(s)(**s.__dict__) for name, s in self._stats.tiers.items()}})

    def locate(self, key: Key) -> list[str]:
        """Return the names of the tiers holding a copy of ``key``, fastest first.

        Raises
        ------
        KeyError
            (:class:`~tiered.UnknownKeyError`) if ``key`` is not in the cache.
        """
        key = canonical_key(key)
        with self._cond:
            return [self._tiers[i].name for i in sorted(self._lookup(key).copies)]

    def keys(self) -> list[Key]:
        """Return the keys currently stored."""
        with self._cond:
            return list(self._index)

    def __contains__(self, key: object) -> bool:
        try:
            key = canonical_key(key)
        except (TypeError, ValueError):
            return False
        with self._cond:
            return key in self._index

    def __len__(self) -> int:
        with self._cond:
            return len(self._index)

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(drain=exc_type is None)

    @property
    def config(self) -> CacheConfig:
        """The configuration in force (frozen)."""
        return self._config

    @property
    def tiers(self) -> list[Tier]:
        """The tiers, fastest first."""
        return list(self._tiers)
