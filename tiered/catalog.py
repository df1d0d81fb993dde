"""The catalog: commit records, the head and the durable working state, on disk.

It lives in ``.tiered/`` under the root of the cache's deepest persistent tier, made at the
first commit (a cache that never commits has none, and restarts as before it existed)::

    .tiered/versions/v00000003.json   one commit record per version (written last, atomically)
    .tiered/versions/v00000003.failed a version found damaged (latest() skips it)
    .tiered/HEAD                      {"head": 3, "seq": 7}: where the next commit descends
    .tiered/work.json                 the key space made durable by the last flush since
                                      that head (keys stored or discarded outside commits)

Every file is written to a temp name, fsync'd, renamed into place and its directory
fsync'd: a crash leaves the old file or the new one, whole. Records that cannot be read
(cut short by a crash before the rename cannot happen; damage can) are reported, not used.
This module reads and writes; what the records mean is :mod:`tiered.lineage`'s.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiered.crashpoints import crash_point
from tiered.keys import Key, key_from_json, key_to_json
from tiered.lineage import VersionInfo
from tiered.tiers.files import fsync_dir, unlink_quietly
from tiered.tiers.persistent import PersistentTier

log = logging.getLogger(__name__)

FORMAT = "tiered-version/1"
DIRNAME = ".tiered"
TMP = ".tmp-"


@dataclasses.dataclass
class Loaded:
    """What :meth:`Catalog.load` found."""

    versions: list[VersionInfo]
    head: int | None
    seq: int
    work: dict[Key, int] | None  # the working key space, if it belongs to this head
    problems: list[str]


def _encode_objects(objects: dict[Key, int]) -> list[list[Any]]:
    return [[key_to_json(k), v] for k, v in objects.items()]


def _decode_objects(rows: list[list[Any]]) -> dict[Key, int]:
    return {key_from_json(k): int(v) for k, v in rows}


class Catalog:
    """The catalog under ``root`` (a persistent tier's root directory).

    Parameters
    ----------
    root : Path
        The tier's root; the catalog is ``root / ".tiered"``.
    sync : bool
        fsync what is written (as the tier does).
    """

    def __init__(self, root: Path, *, sync: bool = True) -> None:
        self.dir = root / DIRNAME
        self.versions_dir = self.dir / "versions"
        self.sync = sync
        self.seq = 0  # of the last HEAD written or read
        self.head: int | None = None  # what HEAD says
        self.stale = False  # a record may be newer than HEAD: write HEAD again

    def exists(self) -> bool:
        """Whether a catalog was ever made here."""
        return self.versions_dir.is_dir()

    # ----------------------------------------------------------------- writing
    def _make_dirs(self) -> None:
        """Make the catalog's directories, durably (a commit must not vanish with them)."""
        for folder in (self.dir, self.versions_dir):
            if not folder.is_dir():
                folder.mkdir(exist_ok=True)
                if self.sync:
                    fsync_dir(folder.parent)

    def _write(self, path: Path, doc: dict[str, Any], *, points: bool = False) -> None:
        """Write ``doc`` as JSON at ``path`` atomically (temp, fsync, rename, fsync dir)."""
        self._make_dirs()
        tmp = path.with_name(f"{TMP}{os.getpid():x}-{random.getrandbits(32):08x}-{path.name}")
        data = json.dumps(doc, separators=(",", ":")).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            if self.sync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            unlink_quietly(tmp)
            raise
        os.close(fd)
        if points:
            crash_point("commit.record-temp")
        os.replace(tmp, path)
        if points:
            crash_point("commit.record-renamed")
        if self.sync:
            fsync_dir(path.parent)
        if points:
            crash_point("commit.dir-synced")

    def record_path(self, vid: int) -> Path:
        """Return the path of version ``vid``'s commit record."""
        return self.versions_dir / f"v{vid:08d}.json"

    def write_version(self, info: VersionInfo, *, seq: int) -> None:
        """Write ``info``'s commit record (its objects are durable already).

        ``seq``: the sequence number of the HEAD write that makes it the head; a restart
        that finds a record newer than HEAD (a crash between the two) takes it as the head.
        """
        crash_point("commit.objects")
        self._write(self.record_path(info.id), {
            "format": FORMAT, "id": info.id, "parent": info.parent, "label": info.label,
            "meta": info.meta, "created": info.created, "nbytes": info.nbytes, "seq": seq,
            "objects": _encode_objects(info.objects)}, points=True)

    def write_head(self, head: int | None) -> None:
        """Move the head on disk (a new sequence number: older working states stop counting)."""
        self.seq += 1
        self._write(self.dir / "HEAD", {"head": head, "seq": self.seq})
        self.head, self.stale = head, False

    def withdraw(self, vid: int) -> bool:
        """Remove the record of version ``vid``, which failed after it may have been written.

        Returns whether it is gone. If not, the next HEAD write (whose sequence number
        reaches the record's) keeps a restart from taking it as the head.
        """
        self.stale = True
        try:
            unlink_quietly(self.record_path(vid))
            if self.sync and self.versions_dir.is_dir():
                fsync_dir(self.versions_dir)
        except OSError as exc:
            log.error("catalog: the record of failed version %d stays: %s", vid, exc)
            return False
        return True

    def write_work(self, head: int | None, objects: dict[Key, int]) -> None:
        """Record the working key space made durable since the head was last moved."""
        self._write(self.dir / "work.json", {"head": head, "seq": self.seq,
                                             "objects": _encode_objects(objects)})

    def mark_failed(self, vid: int, why: str) -> None:
        """Record that version ``vid`` is damaged (kept for inspection; skipped by latest)."""
        self._write(self.versions_dir / f"v{vid:08d}.failed", {"id": vid, "why": why})

    def delete_version(self, vid: int) -> None:
        """Remove version ``vid``'s record (retention); its objects are the caller's."""
        unlink_quietly(self.record_path(vid))
        unlink_quietly(self.versions_dir / f"v{vid:08d}.failed")
        if self.sync:
            fsync_dir(self.versions_dir)

    # ----------------------------------------------------------------- reading
    def load(self, *, repair: bool) -> Loaded:
        """Read every record, the head and the working state (``repair``: remove temps)."""
        problems: list[str] = []
        versions: list[VersionInfo] = []
        failed: dict[int, str] = {}
        seqs: dict[int, int] = {}
        for path in sorted(self.versions_dir.iterdir()):
            if path.name.startswith(TMP):
                problems.append(f"catalog: removed unfinished record {path.name}" if repair
                                else f"catalog: found unfinished record {path.name}")
                if repair:
                    unlink_quietly(path)
                continue
            try:
                doc = json.loads(path.read_bytes())
                if path.suffix == ".failed":
                    failed[int(doc["id"])] = str(doc.get("why", ""))
                    continue
                if doc.get("format") != FORMAT:
                    raise ValueError(f"unknown format {doc.get('format')!r}")
                versions.append(VersionInfo(
                    int(doc["id"]), doc["parent"], doc["label"], dict(doc["meta"]),
                    float(doc["created"]), _decode_objects(doc["objects"]),
                    int(doc.get("nbytes", 0)), durable=True))
                seqs[int(doc["id"])] = int(doc.get("seq", 0))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problems.append(f"catalog: damaged record {path.name} not loaded: {exc}")
        for info in versions:
            if info.id in failed:
                info.failed, info.why = True, failed[info.id] or "marked damaged"
        head, self.seq = self._read_head(problems)
        ahead = [vid for vid, seq in seqs.items() if seq > self.seq and vid not in failed]
        if ahead:  # committed, but the process stopped before it moved the head
            head = max(ahead, key=lambda vid: (seqs[vid], vid))
            self.seq = seqs[head]
        self.head = head
        return Loaded(sorted(versions, key=lambda v: v.id), head, self.seq,
                      self._read_work(head, problems), problems)

    def _read_head(self, problems: list[str]) -> tuple[int | None, int]:
        path = self.dir / "HEAD"
        try:
            doc = json.loads(path.read_bytes())
            return doc["head"], int(doc["seq"])
        except FileNotFoundError:
            return None, 0
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"catalog: damaged HEAD ({exc}); the newest version is the head")
            return None, 0

    def _read_work(self, head: int | None, problems: list[str]) -> dict[Key, int] | None:
        path = self.dir / "work.json"
        if not path.exists():
            return None
        try:
            doc = json.loads(path.read_bytes())
            if doc.get("head") != head or doc.get("seq") != self.seq:
                return None  # flushed before the head last moved: the head's keys count
            return _decode_objects(doc["objects"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"catalog: damaged working state ({exc}); the head is used")
            return None


def home_catalog(disk: Mapping[int, PersistentTier]) -> Catalog | None:
    """Return the catalog of a cache over the persistent tiers ``disk`` (by position).

    It lives in the deepest one, where every version is durable (``None``: no persistent
    tier). A catalog found in another tier is an error: the cache was opened with other
    tiers than its versions were committed with.
    """
    if not disk:
        return None
    home = max(disk)
    for i, tier in disk.items():
        if i != home and Catalog(tier.root).exists():
            raise ValueError(
                f"the versions here are catalogued in {tier.name} ({tier.root}), but the "
                f"deepest persistent tier is now {disk[home].name}: open the cache with the "
                "tiers its versions were committed with")
    return Catalog(disk[home].root, sync=disk[home].sync)
