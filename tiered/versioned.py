"""Versions of the whole key space: commit, checkout, latest, diff, retain; restart from them.

The lineage (:mod:`tiered.lineage`, held by the planner) decides; this layer carries it out:
it waits on the commit lane until every object a version names is durable, then writes the
commit record (:mod:`tiered.catalog`), and at open rebuilds the index from the catalog.
A cache that never commits has no catalog and restarts from its tiers' files, as before.
"""

from __future__ import annotations

import collections
import json
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from tiered import recovery
from tiered.catalog import home_catalog
from tiered.config import CacheConfig
from tiered.errors import (
    CorruptDataError,
    ReadOnlyError,
    TieredError,
    UnknownKeyError,
    VersionFailedError,
)
from tiered.index import Entry
from tiered.keys import Key
from tiered.lineage import VersionInfo
from tiered.movers import Lane
from tiered.policies.base import PolicySpec, PredictorSpec
from tiered.prefetch import PrefetchEngine
from tiered.sizes import format_size
from tiered.tiers.base import Tier
from tiered.tiers.persistent import lock_all
from tiered.tiers.records import Record
from tiered.versions import Change, Version, diff_objects

log = logging.getLogger(__name__)
COMMIT_POLL_S = 0.5  # a commit waiting for its drains looks again at least this often


class VersionedEngine(PrefetchEngine):
    """Adds versions to the engine (see the module docstring)."""

    if TYPE_CHECKING:  # the public read, defined by the cache
        def revisit(self, key: Key, *, version: object = None, out: Any = None,
                    copy: bool = True) -> Any:
            """See :meth:`tiered.Cache.revisit`."""

    def __init__(self, tiers: Sequence[Tier], eviction: PolicySpec, prefetch: PredictorSpec,
                 config: CacheConfig, *, readonly: bool, keep_last: int | None) -> None:
        super().__init__(tiers, eviction, prefetch, config)
        if keep_last is not None and (isinstance(keep_last, bool) or
                                      not isinstance(keep_last, int) or keep_last < 1):
            raise ValueError(f"keep_last must be a positive integer or None, got {keep_last!r}")
        self._readonly = readonly
        self._keep_last = keep_last
        self._lineage = self._plan.lineage
        self._done: dict[int, Future[None]] = {}  # per version: durable, or why not
        self._handles: dict[int, Version] = {}
        self._versions_read: collections.Counter[int] = collections.Counter()  # versions being read
        self._commit_lane = Lane("commit")
        try:
            self._catalog = home_catalog(self._disk)
            if not readonly:
                lock_all(self._disk.values())
        except BaseException:
            self._release_tiers()
            raise

    def _release_tiers(self) -> None:
        """Close the tiers (their locks with them): an open that failed."""
        for tier in self._tiers:
            tier.close()

    # ----------------------------------------------------------------- helpers
    def _writable(self, call: str) -> None:
        if self._readonly:
            raise ReadOnlyError(f"{call}: this cache was opened with readonly=True")

    def _handle(self, info: VersionInfo) -> Version:
        handle = self._handles.get(info.id)
        if handle is None:
            done = self._done.get(info.id)
            if done is None:
                done = self._done[info.id] = Future()
                done.set_result(None)
            handle = self._handles[info.id] = Version(info, done)
        return handle

    def _object(self, key: Key, version: object) -> tuple[Entry, int]:
        """Return the entry ``key`` had in ``version``, and the version's id (locked)."""
        info = self._lineage.resolve(version)
        ver = info.objects.get(key)
        if ver is None:
            raise UnknownKeyError(f"key {key!r} is not in version {info.id}")
        entry = self._plan.objects.get((key, ver))
        if entry is None:
            raise CorruptDataError(f"key {key!r} of version {info.id}: its object (version "
                                   f"{ver}) is missing", key=key)
        return entry, info.id

    def _as_of(self, version: object, key: Key) -> Entry:
        """Return the entry ``key`` had in ``version`` (locked)."""
        return self._object(key, version)[0]

    def _corrupt(self, entry: Entry, exc: CorruptDataError) -> CorruptDataError:
        """Mark the versions naming a damaged object failed; return the error to raise."""
        named = self._lineage.naming((entry.key, entry.version))
        for vid in named:
            info = self._lineage.versions[vid]
            if not info.failed:
                info.failed, info.why = True, str(exc)
                if self._catalog is not None and not self._readonly:
                    try:
                        self._catalog.mark_failed(vid, str(exc))
                    except OSError as err:
                        log.error("could not record version %d as damaged: %s", vid, err)
        if not named:
            return exc
        return CorruptDataError(f"{exc} (object version {entry.version} of key "
                                f"{entry.key!r}, named by version(s) "
                                f"{', '.join(map(str, named))}, now marked failed)",
                                key=entry.key, tier=exc.tier)

    # ----------------------------------------------------------------- commit
    def commit(self, label: str | None = None, meta: dict[str, Any] | None = None) -> Version:
        """Make the whole key space one version; return at once (like ``store``).

        Keys unchanged since the head's version are carried over: nothing is written again
        for them. The commit record is written last, in the background, once every object
        the version names is durable; :meth:`Version.wait` waits for that. If a part
        fails, the version fails (raised by ``wait`` and at the next call) and the
        previous version stays :meth:`latest`. With ``keep_last`` set, older versions are
        deleted once this one is durable.

        Parameters
        ----------
        label : str, optional
            A name for it, unique in the catalog (``checkout("before-lr-drop")``).
        meta : dict, optional
            JSON-serialisable facts to keep with it (a step, a loss, a configuration).

        Raises
        ------
        ValueError
            If ``label`` is taken or empty, or ``meta`` is not JSON-serialisable.
        """
        self._enter("commit")
        self._writable("commit")
        if label is not None and (not isinstance(label, str) or not label):
            raise ValueError(f"label must be a non-empty string, got {label!r}")
        meta = dict(meta or {})
        try:
            json.dumps(meta)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"meta must be JSON-serialisable: {exc}") from None
        done: Future[None] = Future()
        with self._cond:
            entries = dict(self._index)
            info = self._lineage.commit({k: e.version for k, e in entries.items()},
                                        label=label, meta=meta, created=time.time(),
                                        nbytes=sum(e.meta.nbytes for e in entries.values()))
            self._plan.named(entries)
            self._done[info.id] = done
            dirty = [e for e in entries.values() if e.dirty or e.home not in self._disk]
            if self._catalog is None:
                done.set_exception(TieredError(
                    f"version {info.id} lives in memory only: this cache has no persistent "
                    "tier to make it durable"))
            else:
                for entry in dirty:
                    self._schedule_drain(entry)
                # queued under the lock: records are written in commit order, whatever
                # the threads committing
                self._commit_lane.submit(self._finish_commit, info, dirty, done)
        return self._handle(info)

    def _await_durable(self, info: VersionInfo, entries: list[Entry]) -> None:
        """Wait until every entry is home, or raise why one cannot be (locked)."""
        for entry in entries:
            if entry.home not in self._disk:
                raise VersionFailedError(
                    f"version {info.id}: {entry.key!r} ({format_size(entry.meta.nbytes)}) "
                    "fits no persistent tier: it cannot be made durable")
        while True:
            dirty = [e for e in entries if e.dirty]
            if not dirty:
                return
            for entry in dirty:
                if entry.drain is None and entry.failure is not None:
                    raise VersionFailedError(f"version {info.id}: the drain of {entry.key!r} "
                                             f"failed: {entry.failure}") from entry.failure
                if self._closed:
                    raise VersionFailedError(f"version {info.id}: the cache closed before "
                                             f"{entry.key!r} was durable")
                if entry.drain is None:
                    self._schedule_drain(entry)
                    if entry.drain is None:
                        raise VersionFailedError(f"version {info.id}: {entry.key!r} cannot "
                                                 "drain (no tier below its copy can hold it)")
            self._cond.wait(COMMIT_POLL_S)

    def _finish_commit(self, info: VersionInfo, entries: list[Entry], done: Future[None]) -> None:
        """Write the commit record once the objects are durable (on the commit lane)."""
        try:
            with self._cond:
                self._await_durable(info, entries)
            assert self._catalog is not None
            self._catalog.write_version(info, seq=self._catalog.seq + 1)
        except BaseException as exc:
            # its record, if it got that far, goes
            withdrawn = self._catalog is None or self._catalog.withdraw(info.id)
            with self._cond:
                self._lineage.fail(info.id, str(exc))
                self._failed(exc, f"commit of version {info.id}", tuple(info.objects))
            if not withdrawn:  # HEAD written now, past the record, not at the next flush
                try:
                    self._flush_work()
                except OSError as err:
                    log.error("version %d: the head could not be rewritten: %s", info.id, err)
            (log.info if self._closed else log.error)("version %d failed: %s", info.id, exc)
            done.set_exception(exc if isinstance(exc, VersionFailedError) else
                               VersionFailedError(f"version {info.id}: {exc}"))
            return
        with self._cond:
            info.durable = True
        done.set_result(None)
        try:  # the record is durable: a restart finds it the head even if this fails
            self._write_head()
        except OSError as exc:
            log.error("version %d is durable but the head could not be moved on disk: %s",
                      info.id, exc)
        if self._keep_last is not None:
            self._retain(self._keep_last)

    # ----------------------------------------------------------------- reading versions
    def versions(self) -> list[Version]:
        """Return every kept version, oldest first, on every branch."""
        with self._cond:
            return [self._handle(self._lineage.versions[v]) for v in sorted(self._lineage.versions)]

    def latest(self) -> Version | None:
        """Return the newest durable version on the head's branch (``None``: none yet).

        A failed version is skipped, with a warning; :meth:`checkout` can still name it.
        Without a persistent tier, the newest committed version on the branch.
        """
        with self._cond:
            info, skipped = self._lineage.latest(durable=self._catalog is not None)
        for bad in skipped:
            log.warning("latest: version %d skipped: it failed (%s)", bad.id, bad.why)
        return None if info is None else self._handle(info)

    def checkout(self, version: object) -> Version:
        """Make ``version`` (a Version, an id or a label) the head and its keys the key space.

        Stores and discards since the last commit are dropped (commit first to keep them);
        the next commit descends from ``version``. Its keys are hinted to the prefetcher,
        most recently stored first, so what a rollback reads next is moving up already.
        """
        self._enter("checkout")
        doomed: list[tuple[int, Record]] = []
        with self._cond:
            info = self._lineage.resolve(version)
            if info.failed:
                log.warning("checkout: version %d failed before (%s)", info.id, info.why)
            targets = {k: self._object(k, info.id)[0] for k in info.objects}
            for key, entry in list(self._index.items()):
                if targets.get(key) is not entry:
                    self._plan.pop(key)
                    doomed += self._retire(entry, delete_files=True)
            for key, entry in targets.items():
                if self._index.get(key) is not entry:
                    self._plan.reinstate(entry)
            self._lineage.head = info.id
            order = sorted(targets, key=lambda k: -targets[k].version)
            self._signal("rollback", None, hints=tuple(order))
            self._storing = False
            self._kick(force=True)
        self._delete(doomed)
        if self._catalog is not None and not self._readonly:
            self._commit_lane.submit(self._write_head).result()
        return self._handle(info)

    def _write_head(self) -> None:
        """Move the head on disk; the working state recorded before it no longer counts."""
        assert self._catalog is not None
        with self._cond:  # a commit still draining is not written as the head yet
            head = self._lineage.durable_head()
        self._catalog.write_head(head)
        self._record_work({})

    def _record_work(self, objects: dict[Key, int]) -> None:
        """Name ``objects`` as the durable working state (on disk already); free the old."""
        doomed: list[tuple[int, Record]] = []
        with self._cond:
            for entry in self._plan.unnamed(self._lineage.set_work(objects)):
                doomed += self._retire(entry, delete_files=True)
        self._delete(doomed)

    def diff(self, a: object, b: object) -> dict[Key, Change]:
        """Return how version ``b`` differs from ``a``, key by key.

        Each key is ``added``, ``removed``, ``changed`` or ``same``; a changed value lists
        its array leaves that differ, with the largest absolute and relative difference
        and the first differing index when the shapes agree.
        """
        self._enter("diff")
        with self._cond:
            va, vb = self._lineage.resolve(a), self._lineage.resolve(b)
        return diff_objects(va.objects, vb.objects,
                            lambda k: self.revisit(k, version=va.id),
                            lambda k: self.revisit(k, version=vb.id), same_store=True)

    # ----------------------------------------------------------------- retention
    def retain(self, keep_last: int) -> list[int]:
        """Delete all but the ``keep_last`` newest versions; return the ids deleted.

        Never the head, a version being read, or one still draining. A deleted version's
        objects are deleted too, unless a kept version or the key space still holds them.
        """
        self._enter("retain")
        self._writable("retain")
        return self._retain(keep_last)

    def _retain(self, keep_last: int) -> list[int]:
        doomed: list[tuple[int, Record]] = []
        with self._cond:
            gone = self._lineage.expendable(keep_last, set(+self._versions_read))
            for vid in gone:
                freed = self._lineage.drop(vid)
                self._handles.pop(vid, None)
                self._done.pop(vid, None)
                for entry in self._plan.unnamed(freed):
                    doomed += self._retire(entry, delete_files=True)
        if gone and self._catalog is not None:
            for vid in gone:  # the record first: a crash then leaves garbage, not a hole
                self._catalog.delete_version(vid)
        self._delete(doomed)
        return gone

    # ----------------------------------------------------------------- flush and restart
    def _settle_versions(self, deadline: float | None) -> None:
        """Wait for the commits in flight (``flush``), then record the durable key space."""
        with self._cond:
            pending = [f for f in self._done.values() if not f.done()]
        for future in pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                future.result(remaining)
            except TimeoutError:
                raise TimeoutError("flush: a commit is still running") from None
            except Exception:  # noqa: S112 - reported through the background errors
                continue
        if self._catalog is None or self._readonly or not self._lineage:
            return
        self._commit_lane.submit(self._flush_work).result()

    def _flush_work(self) -> None:
        """Record the key space as durable (on the commit lane, after every commit)."""
        assert self._catalog is not None
        with self._cond:  # named from here: a discard meanwhile keeps their files
            head = self._lineage.durable_head()
            entries = {k: e for k, e in self._index.items()
                       if not e.dirty and e.home in self._disk}
            objects = {k: e.version for k, e in entries.items()}
            self._plan.named(entries)
            self._lineage.hold(objects.items())
        try:
            if head != self._catalog.head or self._catalog.stale:
                self._catalog.write_head(head)
            self._catalog.write_work(head, objects)
            self._record_work(objects)
        finally:
            with self._cond:
                doomed = self._unhold(list(objects.items()))
            self._delete(doomed)

    def _recover(self) -> list[str]:
        if self._catalog is None or not self._catalog.exists():
            return super()._recover()
        loaded = self._catalog.load(repair=not self._readonly)
        found, problems, damaged = recovery.scan(self._disk, repair=not self._readonly,
                                                 newest=False)
        self._next_version = max(self._next_version, recovery.past(self._disk, damaged))
        space = self._lineage.restore(loaded.versions, loaded.head,
                                      None if self._readonly else loaded.work)
        restored = recovery.from_catalog(found, loaded.versions, space, self._home,
                                         {i: t.name for i, t in enumerate(self._tiers)},
                                         repair=not self._readonly)
        self._install_restored(restored)
        for vid, why in restored.failed.items():
            info = self._lineage.versions[vid]
            info.failed, info.why = True, why
        self._lost = dict(restored.lost)
        if not self._readonly:
            self._deletions.unlink(restored.garbage, recycle=False)
        problems = loaded.problems + problems + restored.problems
        for problem in loaded.problems + restored.problems:
            log.warning("recovery: %s", problem)
        return problems

    def _install_restored(self, restored: recovery.Restored) -> None:
        for group, current in ((restored.current, True), (restored.kept, False)):
            for entry, copies in group:
                for copy in copies:
                    self._add_copy(entry, copy)
                home = entry.copies.get(entry.home)
                if home is not None and home.record is not None and home.record.refs:
                    entry.holders = tuple((entry.key, v) for v in home.record.holders())
                    self._lineage.hold(entry.holders)
                self._plan.objects[(entry.key, entry.version)] = entry
                if current:
                    self._index_put(entry)
                self._next_version = max(self._next_version, entry.version + 1)
                if entry.dirty and not self._readonly:
                    self._schedule_drain(entry)
        self._plan.objects = {obj: e for obj, e in self._plan.objects.items()
                              if self._lineage.named(obj)}

