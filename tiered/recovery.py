"""Restart: what the persistent tiers hold when a cache opens over them.

Each tier's scan sets aside what a crash left (temp files, damaged files) and reports every
well-formed object; :func:`entries` decides what is current: an index entry of the newest
version of each key, with a copy in every tier that holds that version and the older
versions' records as superseded (deleted once it is home). The cache installs them and
deletes what this module says; it moves no bytes itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

from tiered.index import Copy, Entry
from tiered.keys import Key
from tiered.tiers.base import PersistentTier, Record

log = logging.getLogger(__name__)


def scan(tiers: Mapping[int, PersistentTier]) -> tuple[dict[Key, list[tuple[int, Record]]],
                                                       list[str]]:
    """Scan each tier (repairing it); return every key's records by tier, and the problems.

    Older versions of a key are reported as problems here (they are deleted once the
    newest is home).
    """
    problems: list[str] = []
    found: dict[Key, list[tuple[int, Record]]] = {}
    for i, tier in sorted(tiers.items()):
        report = tier.scan()
        problems += report.problems
        for record in report.records:
            found.setdefault(record.key, []).append((i, record))
    for copies in found.values():
        newest = max(r.version for _, r in copies)
        problems += [f"{tiers[i].name}: superseded version {r.path.name} removed"
                     for i, r in copies if r.version != newest]
    for problem in problems:
        log.warning("recovery: %s", problem)
    return found, problems


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
