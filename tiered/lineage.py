"""Versions and their lineage, as decisions: no threads, locks, I/O or clock of their own.

A version is a whole key space: for every key, the object (the key's value as one store
made it, named ``(key, object version)``) that the head held at commit time. Keys unchanged
since the parent name the parent's object, so nothing is written again for them. The
lineage knows every kept version, the head (where the next commit descends from), which
versions are durable or failed, and how many kept versions name each object: an object no
kept version names and that is not current may be deleted (the planner asks
:meth:`Lineage.named`). The executor writes and reads the catalog; this module only decides.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from tiered.errors import UnknownVersionError
from tiered.keys import Key

Obj = tuple[Key, int]  # (key, object version): one stored value of one key


@dataclasses.dataclass
class VersionInfo:
    """One committed version as the lineage keeps it.

    ``objects`` maps each key to the object version the key held; ``durable``: its commit
    record is on disk; ``failed``: it can never become durable or a copy it names is
    damaged (``why`` says which).
    """

    id: int
    parent: int | None
    label: str | None
    meta: dict[str, Any]
    created: float
    objects: dict[Key, int]
    nbytes: int = 0
    durable: bool = False
    failed: bool = False
    why: str = ""

    def named(self) -> Iterable[Obj]:
        """Yield the objects this version names."""
        return self.objects.items()


class Lineage:
    """Every kept version, the head, and the objects they name (see the module docstring)."""

    def __init__(self) -> None:
        self.versions: dict[int, VersionInfo] = {}
        self.head: int | None = None
        self.next_id = 1
        self._labels: dict[str, int] = {}
        self._refs: collections.Counter[Obj] = collections.Counter()
        # the key space the catalog last recorded as durable outside a commit (a flush):
        # restart comes back to it, so it names its objects as a version does
        self.work: dict[Key, int] = {}

    def __bool__(self) -> bool:
        return bool(self.versions)

    # ----------------------------------------------------------------- events
    def add(self, info: VersionInfo) -> None:
        """Keep ``info`` (a new commit, or one read back from the catalog)."""
        if info.label is not None:
            if info.label in self._labels:
                raise ValueError(f"label {info.label!r} is taken by version "
                                 f"{self._labels[info.label]}; labels name one version each")
            self._labels[info.label] = info.id
        self.versions[info.id] = info
        self._refs.update(info.named())
        self.next_id = max(self.next_id, info.id + 1)

    def commit(self, objects: Mapping[Key, int], *, label: str | None,
               meta: dict[str, Any], created: float, nbytes: int) -> VersionInfo:
        """Make the head's key space (``objects``) a new version descending from the head."""
        info = VersionInfo(self.next_id, self.head, label, dict(meta), created,
                           dict(objects), nbytes)
        self.add(info)
        self.head = info.id
        return info

    def fail(self, vid: int, why: str) -> None:
        """Mark ``vid`` failed; the head and the versions committed on it move to a sound one.

        A failed version gets no record: the head (if it is ``vid``) and its children still
        in flight descend instead from its nearest ancestor that did not fail, so every
        branch still reaches its durable history after a restart.
        """
        info = self.versions[vid]
        info.failed, info.why = True, why
        sound = info.parent
        while sound is not None and sound in self.versions and self.versions[sound].failed:
            sound = self.versions[sound].parent
        for other in self.versions.values():
            if other.parent == vid and not other.durable:
                other.parent = sound
        if self.head == vid:
            self.head = sound

    def drop(self, vid: int) -> list[Obj]:
        """Forget version ``vid``; return the objects nothing names any more."""
        info = self.versions.pop(vid)
        if info.label is not None:
            del self._labels[info.label]
        return self._release(info.named())

    def restore(self, versions: Iterable[VersionInfo], head: int | None,
                work: Mapping[Key, int] | None) -> Mapping[Key, int]:
        """Take back what a catalog holds; return the key space a restart comes back to.

        The head is ``head`` if that version is kept, else the newest; the key space is
        the recorded working state ``work`` if there is one, else the head's.
        """
        for info in versions:
            self.add(info)
        self.head = head if head in self.versions else max(self.versions, default=None)
        if work is not None:
            self.set_work(work)
            return self.work
        return {} if self.head is None else self.versions[self.head].objects

    def set_work(self, objects: Mapping[Key, int]) -> list[Obj]:
        """Record the durable working key space (``{}``: stale once the head moved on disk).

        Returns the objects nothing names any more.
        """
        old, self.work = self.work, dict(objects)
        self._refs.update(self.work.items())
        return self._release(old.items())

    def hold(self, objs: Iterable[Obj]) -> None:
        """Name ``objs`` once more: another object's file refers to their files."""
        self._refs.update(objs)

    def release(self, objs: Iterable[Obj]) -> list[Obj]:
        """Undo :meth:`hold`; return the objects nothing names any more."""
        return self._release(objs)

    def _release(self, objs: Iterable[Obj]) -> list[Obj]:
        freed: list[Obj] = []
        for obj in objs:
            self._refs[obj] -= 1
            if self._refs[obj] <= 0:
                del self._refs[obj]
                freed.append(obj)
        return freed

    # ----------------------------------------------------------------- decisions
    def named(self, obj: Obj) -> bool:
        """Whether a kept version or the recorded working state names ``obj`` (it stays)."""
        return obj in self._refs

    def resolve(self, ref: object) -> VersionInfo:
        """Return the version ``ref`` names: a Version, an id or a label."""
        vid = getattr(ref, "id", ref)
        if isinstance(vid, str):
            found = self._labels.get(vid)
            if found is None:
                raise UnknownVersionError(f"no version is labelled {vid!r}")
            vid = found
        if isinstance(vid, bool) or not isinstance(vid, int):
            raise TypeError(f"a version is a tiered.Version, an id (int) or a label (str), "
                            f"not {type(ref).__name__}")
        info = self.versions.get(vid)
        if info is None:
            raise UnknownVersionError(f"no version {vid} (never committed, or deleted by "
                                      "retention)")
        return info

    def branch(self, start: int | None = None) -> list[VersionInfo]:
        """Return ``start`` (default: the head) and its kept ancestors, newest first."""
        out: list[VersionInfo] = []
        vid = self.head if start is None else start
        while vid is not None and vid in self.versions:
            out.append(self.versions[vid])
            vid = self.versions[vid].parent
        return out

    def latest(self, *, durable: bool = True) -> tuple[VersionInfo | None, list[VersionInfo]]:
        """Return the newest usable version on the head's branch, and the failed ones skipped.

        Usable: not failed, and durable unless ``durable`` is false (a cache without a
        persistent tier, whose versions are complete at commit).
        """
        skipped: list[VersionInfo] = []
        for info in self.branch():
            if info.failed:
                skipped.append(info)
            elif info.durable or not durable:
                return info, skipped
        return None, skipped

    def durable_head(self) -> int | None:
        """Return the id of the newest durable version on the head's branch (what HEAD says)."""
        newest, _ = self.latest()
        return None if newest is None else newest.id

    def expendable(self, keep_last: int, busy: set[int]) -> list[int]:
        """Return the versions ``retain(keep_last=...)`` deletes, oldest first.

        All but the ``keep_last`` newest, never the head, the newest durable version on
        its branch (what a restart comes back to while a newer one drains), a version in
        ``busy`` (being read) or one not yet durable (still draining), unless it failed.
        """
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, got {keep_last!r}")
        kept = {self.head, self.durable_head(), *busy}
        ordered = sorted(self.versions)
        return [vid for vid in ordered[:-keep_last]
                if vid not in kept
                and (self.versions[vid].durable or self.versions[vid].failed)]

    def naming(self, obj: Obj) -> list[int]:
        """Return the kept versions that name ``obj``."""
        key, ver = obj
        return [vid for vid, info in self.versions.items() if info.objects.get(key) == ver]
