"""Restart: what the persistent tiers hold when a cache opens over them.

Each tier's scan sets aside what a crash left (temp files, damaged files) and reports every
well-formed object; :func:`entries` decides what is current: an index entry of the newest
version of each key, with a copy in every tier that holds that version and the older
versions' records as superseded (deleted once it is home). The cache installs them and
deletes what this module says; it moves no bytes itself.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from tiered.index import Copy, Entry
from tiered.keys import Key, key_filename
from tiered.lineage import VersionInfo
from tiered.tiers.persistent import PersistentTier
from tiered.tiers.records import Record

log = logging.getLogger(__name__)


Found = dict[Key, list[tuple[int, Record]]]  # every key's records, with their tiers
Damaged = list[tuple[int, Path]]  # object files that could not be loaded, with their tiers


def scan(tiers: Mapping[int, PersistentTier], *, repair: bool = True,
         newest: bool = True) -> tuple[Found, list[str], Damaged]:
    """Scan each tier; return every key's records by tier, and the problems.

    ``repair``: let each tier remove its temp files. ``newest``: report a key's older
    versions as superseded (without a catalog, they are deleted once the newest is home).
    """
    problems: list[str] = []
    found: Found = {}
    damaged: Damaged = []
    for i, tier in sorted(tiers.items()):
        report = tier.scan(repair=repair)
        problems += report.problems
        damaged += [(i, path) for path in report.damaged]
        for record in report.records:
            found.setdefault(record.key, []).append((i, record))
    for copies in found.values() if newest else ():
        last = max(r.version for _, r in copies)
        problems += [f"{tiers[i].name}: superseded version {r.path.name} removed"
                     for i, r in copies if r.version != last]
    for problem in problems:
        log.warning("recovery: %s", problem)
    return found, problems, damaged


def entries(found: Mapping[Key, list[tuple[int, Record]]],
            home: Callable[[int], int]) -> Iterator[tuple[Entry, list[Copy]]]:
    """Yield each key's newest version as an entry, with the copies it has.

    ``home`` maps a payload size to the tier where it is durable. The entry's
    ``superseded`` lists the records of its older versions.
    """
    for key, copies in found.items():
        newest = max(r.version for _, r in copies)
        current = [(i, r) for i, r in copies if r.version == newest]
        meta = current[0][1].meta
        entry = Entry(key, newest, meta, home(meta.nbytes), checksums=current[0][1].checksums)
        entry.superseded = [(i, r) for i, r in copies if r.version != newest]
        yield entry, [Copy(i, record=record) for i, record in current]


def lost(tiers: Mapping[int, PersistentTier], found: Found,
         damaged: Damaged) -> dict[Key, str]:
    """Return the keys whose newest object is damaged, each with what to raise for it.

    Without a catalog the newest well-formed version of a key would come back: older
    than the one the damaged file holds. Such a key comes back as corrupt instead, and so
    does a key whose only object is damaged.
    """
    stems = {key_filename(key): key for key in found}
    out: dict[Key, str] = {}
    for i, path in damaged:
        named = tiers[i].object_of(path)
        if named is None:
            continue
        key, stem, version = named
        key = stems.get(stem, key)
        if key is None:
            continue
        newest = max((r.version for _, r in found.get(key, ())), default=-1)
        if version > newest:
            out[key] = (f"key {key!r}: its newest object {path.name} in {tiers[i].name} is "
                        "damaged (set aside at open); no older value is returned instead")
    return out


def past(tiers: Mapping[int, PersistentTier], damaged: Damaged) -> int:
    """Return a version number above every damaged object's (new stores must sort after)."""
    versions = [named[2] for i, path in damaged if (named := tiers[i].object_of(path))]
    return max(versions, default=0) + 1


@dataclasses.dataclass
class Restored:
    """What :func:`from_catalog` decided: the objects to index and what to set aside."""

    current: list[tuple[Entry, list[Copy]]]  # the key space
    kept: list[tuple[Entry, list[Copy]]]  # objects only a kept version names
    garbage: list[tuple[int, Record]]  # files no version and no working state names
    failed: dict[int, str]  # versions naming an object that is missing
    lost: dict[Key, str]  # keys of the key space whose object is missing
    problems: list[str]


def from_catalog(found: Found, versions: list[VersionInfo], space: Mapping[Key, int],
                 home: Callable[[int], int], names: Mapping[int, str], *,
                 repair: bool = True) -> Restored:
    """Decide a restart from the catalog: it alone says what exists.

    ``space``: the key space to restore (the head's, or the working state recorded
    since); ``names``: tier names by position, for the report. Without ``repair`` (a
    reader) files the catalog does not name are neither collected nor reported: a
    writer beside it may be writing them.
    """
    by_obj: dict[tuple[Key, int], list[tuple[int, Record]]] = {}
    for key, copies in found.items():
        for i, record in copies:
            by_obj.setdefault((key, record.version), []).append((i, record))
    named = {obj for info in versions for obj in info.named()} | set(space.items())
    stack = list(named)
    while stack:  # and the objects whose files hold leaves of a named one
        key, ver = stack.pop()
        for _, record in by_obj.get((key, ver), ()):
            for holder in record.holders():
                if (key, holder) not in named:
                    named.add((key, holder))
                    stack.append((key, holder))
    out = Restored([], [], [], {}, {}, [])
    for obj in sorted(named, key=lambda o: o[1]):
        held = by_obj.get(obj, [])
        if not held:
            continue
        record = held[0][1]
        entry = Entry(obj[0], obj[1], record.meta, home(record.meta.nbytes),
                      checksums=record.checksums)
        made = [Copy(i, record=r) for i, r in held]
        if space.get(obj[0]) == obj[1]:
            out.current.append((entry, made))
        else:
            entry.slot = ("~version", obj[0], obj[1])
            out.kept.append((entry, made))
    for obj, copies in by_obj.items() if repair else ():
        if obj not in named:
            out.garbage += copies
            out.problems += [f"{names[i]}: {r.path.name} is named by no version: removed"
                             for i, r in copies]
    for info in versions:
        missing = [k for k, v in info.objects.items() if (k, v) not in by_obj]
        if missing:
            out.failed[info.id] = f"object of {missing[0]!r} missing"
    for key, ver in space.items():
        if (key, ver) not in by_obj:
            out.lost[key] = f"key {key!r}: its object (version {ver}) is missing or damaged"
    out.problems += [f"version {vid}: {why}" for vid, why in out.failed.items()]
    out.problems += list(out.lost.values())
    return out
