"""Persistent tiers: one file per object version, written atomically, verified on read.

Call sequence (thread-safe for distinct objects)::

    record = tier.put(key, version, meta, region, checksums)  # durable on return
    tier.get_into(record, region)        # verifies every leaf checksum first
    tier.delete(record)
    report = tier.scan()                 # at open: the committed, well-formed objects
"""

from __future__ import annotations

import abc
import json
import logging
import os
import random
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tiered.checksum import ALGORITHM, checksum
from tiered.errors import CorruptDataError, TierFullError
from tiered.keys import Key, key_filename, key_from_filename, key_to_json
from tiered.movers import on_child
from tiered.payload import leaf_bytes
from tiered.sizes import format_size
from tiered.tiers.base import MemoryTier, Tier
from tiered.tiers.files import advise_file, fsync_dir, pread_into, unlink_quietly
from tiered.tiers.lock import WriterLock
from tiered.tiers.records import FORMAT, Offsets, Record, ScanReport, record_from, shared_leaves
from tiered.values import ValueMeta

log = logging.getLogger(__name__)
TMP_PREFIX = ".tmp-"
SPARE_KIND = "spare-"  # the temp-name tag of an emptied object file kept to write into again
SPARE_PREFIX = f"{TMP_PREFIX}{SPARE_KIND}"
MANIFEST_SLACK = 64 * 1024  # room reserved per object beyond its payload (a tier may say less)
_PID = [os.getpid()]  # this process's id, kept current across fork (getpid is a system call)


@on_child
def _forked() -> None:
    _PID[0] = os.getpid()

def _leftover(name: str) -> str:
    """Say what a non-empty temp file found by a scan is (a process stopped mid-way)."""
    if name.startswith(SPARE_PREFIX):  # renamed aside to be emptied, or reused for a write
        return (f"{name}, a file cut short while being deleted or rewritten (left by a "
                "killed process; nothing it held is needed: a deleted object was discarded, "
                "superseded or kept deeper, a rewrite never committed)")
    return f"incomplete write {name} (left by a killed writer)"


def _empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True


class PersistentTier(Tier):
    """A durable tier: one file per object version, written atomically, checksummed.

    Parameters
    ----------
    path : str or os.PathLike
        The tier's root directory; created if missing.
    capacity : int, str or None
        Bytes of object files allowed; ``None`` for unlimited.
    name : str
        Name used in statistics and messages.
    drop_pages : bool
        Drop each object's pages from the OS page cache once it is durable, so that later
        reads come from the device (a file system larger than memory; benchmarks use it).
    sync : bool
        fsync every object and its directory entry (the default: what is drained survives
        a crash). ``False`` for scratch space whose contents need not outlive the node, e.g.
        an adjoint history: objects are still written atomically and checksummed, so a crash
        leaves missing or detectably broken objects, never wrong ones.
    """

    persistent = True
    overhead_bytes: ClassVar[int] = MANIFEST_SLACK  # reserved per object beyond its payload
    suffix: ClassVar[str] = ".bin"

    def __init__(self, path: str | os.PathLike[str], *, capacity: int | str | None,
                 name: str, drop_pages: bool = False, sync: bool = True) -> None:
        super().__init__(capacity=capacity, name=name)
        if self.capacity_bytes is not None and not self.fits(1):
            raise ValueError(f"{name}: capacity={format_size(self.capacity_bytes)} cannot hold "
                             f"one object (each takes its payload plus "
                             f"{format_size(self.overhead_bytes)}); give at least "
                             f"{format_size(self.footprint(1))}, or None for unlimited")
        self.drop_pages, self.sync = drop_pages, sync
        self.root = Path(path)
        self.root.mkdir(parents=True, exist_ok=True)
        self._root_str = os.fspath(self.root)
        self._lock = threading.Lock()
        self._used = 0
        self._writer = WriterLock(self.root)

    def lock_for_writing(self) -> None:
        """Take the directory's one-writer lock until :meth:`close` (a cache does this).

        Raises
        ------
        TierLockedError
            If another writer holds it; the message names its pid and host.
        """
        self._writer.acquire()

    def close(self) -> None:
        """Release the writer lock, if held; idempotent."""
        super().close()
        self._writer.release()

    @property
    def used_bytes(self) -> int:
        """Bytes of committed object files this process knows of."""
        return self._used

    def has_room(self, nbytes: int) -> bool:
        """Return whether ``nbytes`` more would still fit."""
        return self.capacity_bytes is None or self._used + nbytes <= self.capacity_bytes

    def object_of(self, path: Path) -> tuple[Key | None, str, int] | None:
        """Return what an object file's name says: its key, name stem and version.

        The key is ``None`` when the name is shortened (a long key's hash is in it, not the
        key); the whole answer is ``None`` for a name no object file has.
        """
        stem, sep, tail = path.name.removesuffix(self.suffix).rpartition("~")
        if not sep or not path.name.endswith(self.suffix):
            return None
        try:
            version = int(tail, 16)
        except ValueError:
            return None
        return key_from_filename(stem), stem, version

    def path_for(self, key: Key, version: int) -> Path:
        """Return the committed path of ``key`` at ``version`` (always inside the root)."""
        name = f"{key_filename(key)}~{version:016x}{self.suffix}"
        if os.sep in name:  # key_filename never yields a separator; keep it so
            raise AssertionError(f"key {key!r} escaped the tier root")
        return self.root / name

    def put(self, key: Key, version: int, meta: ValueMeta, region: np.ndarray,
            checksums: tuple[int, ...], *, content: Sequence[int] | None = None,
            base: Record | None = None) -> Record:
        """Write an object atomically: temp file, fsync, rename, fsync the directory.

        ``content``: each leaf's xxh3-128 (:func:`~tiered.checksum.content_hash`), kept in
        the manifest. With ``base`` (an older object of the same key in this tier, kept
        while this one is) the leaves whose content equals base's are not written: the
        file names the file that holds them (:attr:`Record.refs`), and reading follows it.

        Raises
        ------
        TierFullError
            If the tier's capacity would be exceeded (the disk itself reports ``OSError``).
        """
        if not self.has_room(self.footprint(meta.nbytes)):  # what the file may take
            raise TierFullError(f"{self.name}: {format_size(meta.nbytes)} more would exceed "
                                f"capacity {format_size(self.capacity_bytes or 0)}")
        manifest: dict[str, Any] = {
            "format": FORMAT, "key": key_to_json(key), "version": version,
            "meta": meta.to_json(), "checksum": {"algorithm": ALGORITHM,
                                                 "leaves": list(checksums)}}
        refs = shared_leaves(meta, content, base)
        if content is not None:
            manifest["content"] = [f"{c:032x}" for c in content]
        if refs:
            manifest["refs"] = [list(r) for r in refs]
        skip = [(meta.leaves[i].offset, meta.leaves[i].offset + meta.leaves[i].nbytes)
                for i, _, _ in refs]
        tmp = self._temp_path()
        final = self.path_for(key, version)
        try:
            size, offsets = self._write_file(tmp, manifest, meta, region, skip)
            if not self.has_room(size):  # a file larger than its footprint (many leaves)
                raise TierFullError(f"{self.name}: an object of {format_size(size)} would "
                                    f"exceed capacity {format_size(self.capacity_bytes or 0)}")
            os.replace(tmp, final)
        except BaseException:
            unlink_quietly(tmp)
            raise
        if self.sync:
            fsync_dir(self.root)
        record = Record(key, version, meta, checksums, final, size, offsets,
                        None if content is None else tuple(content), refs)
        with self._lock:
            self._used += record.file_bytes
        return record

    def _temp_path(self, kind: str = "") -> str:
        """Return a fresh temp-file path in the root (``kind`` tags what it is for).

        A random name, not uuid4, and the process id kept, not asked for: no system call
        per object (each one is a GIL hand-off the caller's thread pays for); random
        reseeds in a forked child. A string: a ``Path`` costs several microseconds of
        Python to build and format, and the name never leaves the tier.
        """
        return (f"{self._root_str}{os.sep}{TMP_PREFIX}{kind}{_PID[0]:x}-"
                f"{random.getrandbits(64):016x}{self.suffix}")

    def sync_file(self, fd: int) -> None:
        """Make a written object file durable and, with ``drop_pages``, drop its pages.

        Pages can only be dropped once written back, hence the fsync in either case; the
        open ``fd`` serves both (no second open of the file).
        """
        if self.sync or self.drop_pages:
            os.fsync(fd)
        if self.drop_pages:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def get_into(self, record: Record, region: np.ndarray) -> None:
        """Read ``record``'s payload into a host region and verify every leaf.

        Raises
        ------
        CorruptDataError
            If the file is missing, short or any leaf fails its checksum.
        """
        try:
            self._read_payload(record, region)
            for i, ver, off in record.refs:  # leaves another object's file holds
                leaf = record.meta.leaves[i]
                fd = os.open(self.path_for(record.key, ver), os.O_RDONLY)
                try:
                    pread_into(fd, leaf_bytes(region, leaf), off)
                finally:
                    os.close(fd)
        except (OSError, ValueError, KeyError) as exc:
            if isinstance(exc, CorruptDataError):
                exc.key, exc.tier = record.key, self.name
                raise
            raise CorruptDataError(f"{self.name}: cannot read key {record.key!r} from "
                                   f"{record.path}: {exc}", key=record.key,
                                   tier=self.name) from exc
        for i, leaf in enumerate(record.meta.leaves):
            if checksum(leaf_bytes(region, leaf)) != record.checksums[i]:
                raise CorruptDataError(
                    f"{self.name}: key {record.key!r} failed its checksum at leaf "
                    f"{leaf.path or '<root>'} in {record.path}", key=record.key, tier=self.name)

    def advise(self, record: Record) -> None:
        """Ask the kernel to start reading ``record``'s file now (``POSIX_FADV_WILLNEED``).

        Advisory: the read-ahead runs in the kernel, so several objects are in flight while
        one thread reads them in order; errors are ignored (the read reports them).
        """
        try:
            advise_file(record.path, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass

    def delete(self, record: Record, *, recycle: bool = True) -> None:
        """Remove an object (missing files are fine: deleting is idempotent).

        ``recycle``: whether its file may be kept, emptied, to write into again (a tier
        that keeps no spares ignores it).
        """
        try:
            record.path.unlink()
        except FileNotFoundError:
            return
        with self._lock:
            self._used -= record.file_bytes

    def quarantine(self, record: Record) -> None:
        """Set a corrupt object aside as ``<name>.corrupt`` (kept for inspection)."""
        try:
            record.path.replace(record.path.with_name(record.path.name + ".corrupt"))
        except FileNotFoundError:
            return
        with self._lock:
            self._used -= record.file_bytes
        log.error("%s: quarantined %s", self.name, record.path.name)

    def scan(self, *, repair: bool = True) -> ScanReport:
        """Find every committed, well-formed object (all versions); set aside the rest.

        Which versions are current is not the tier's to decide (see :mod:`tiered.recovery`).
        With ``repair`` (what opening a cache does), temp files are deleted; without it
        they are only reported. Damaged files are reported and left.
        """
        problems: list[str] = []
        records: list[Record] = []
        damaged: list[Path] = []
        for path in sorted(self.root.iterdir()):
            if path.name.startswith(SPARE_PREFIX) and _empty(path):  # kept for reuse
                if repair:
                    path.unlink(missing_ok=True)
            elif path.name.startswith(TMP_PREFIX) and not path.is_file():
                problems.append(f"{self.name}: left alone {path.name}, which is not a file")
            elif path.name.startswith(TMP_PREFIX):
                verb = "removed" if repair else "found"
                problems.append(f"{self.name}: {verb} {_leftover(path.name)}")
                if repair:
                    path.unlink(missing_ok=True)
            elif path.suffix == self.suffix and path.is_file():
                try:
                    records.append(record_from(path, *self._read_manifest(path)))
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    problems.append(f"{self.name}: damaged object {path.name} not loaded: {exc}")
                    damaged.append(path)
        with self._lock:
            self._used = sum(r.file_bytes for r in records)
        return ScanReport(sorted(records, key=lambda r: r.version), problems, damaged)

    @staticmethod
    def encode_manifest(manifest: dict[str, Any]) -> bytes:
        """Serialise a manifest."""
        return json.dumps(manifest, separators=(",", ":")).encode()

    @abc.abstractmethod
    def _write_file(self, tmp: str, manifest: dict[str, Any], meta: ValueMeta,
                    region: np.ndarray, skip: Sequence[tuple[int, int]] = ()
                    ) -> tuple[int, Offsets]:
        """Write payload and manifest (manifest last) to ``tmp``.

        ``skip``: byte ranges of the payload not to write (leaves another file holds;
        reading them from this file gives anything).

        Returns the file's size and where each leaf starts in it (``None`` where the layout
        implies it). Ends with :meth:`sync_file` on the open file.
        """

    @abc.abstractmethod
    def _read_manifest(self, path: Path) -> tuple[dict[str, Any], Offsets]:
        """Return a committed file's manifest and leaf offsets; ``ValueError`` if damaged."""

    @abc.abstractmethod
    def _read_payload(self, record: Record, region: np.ndarray) -> None:
        """Read the payload bytes of ``record`` into ``region`` (no verification)."""


def lock_all(tiers: Iterable[PersistentTier]) -> None:
    """Take every tier's one-writer lock, or none of them (the ones taken are closed)."""
    taken: list[PersistentTier] = []
    try:
        for tier in tiers:
            tier.lock_for_writing()
            taken.append(tier)
    except BaseException:
        for tier in taken:
            tier.close()
        raise


def by_kind(tiers: Sequence[Tier]) -> tuple[dict[int, MemoryTier], dict[int, PersistentTier]]:
    """Split a cache's tiers, by position, into its memory and its persistent ones."""
    memory = {i: t for i, t in enumerate(tiers) if isinstance(t, MemoryTier)}
    persistent = {i: t for i, t in enumerate(tiers) if isinstance(t, PersistentTier)}
    return memory, persistent
