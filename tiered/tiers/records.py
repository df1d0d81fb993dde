"""What a persistent tier knows of one stored object, and what a scan of a tier found."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiered.checksum import check_algorithm
from tiered.keys import Key, key_from_json
from tiered.values import ValueMeta

FORMAT = "tiered/1"  # the manifest format every persistent tier writes
Offsets = tuple[int | None, ...] | None  # where each leaf starts in a file, if not implied


@dataclasses.dataclass(frozen=True)
class Record:
    """One committed object in a persistent tier."""

    key: Key
    version: int
    meta: ValueMeta
    checksums: tuple[int, ...]
    path: Path
    file_bytes: int
    offsets: Offsets = None  # where each leaf starts, if not implied
    content: tuple[int, ...] | None = None  # each leaf's xxh3-128, where it was computed
    # leaves held by another object's file: (leaf index, that object's version, file offset)
    refs: tuple[tuple[int, int, int], ...] = ()

    def leaf_offset(self, index: int) -> int:
        """Return where leaf ``index`` starts in this object's file."""
        offset = None if self.offsets is None else self.offsets[index]
        return self.meta.leaves[index].offset if offset is None else offset

    def holders(self) -> frozenset[int]:
        """Return the versions of the objects whose files hold some of its leaves."""
        return frozenset(ver for _, ver, _ in self.refs)

    @property
    def stored_bytes(self) -> int:
        """Payload bytes its own file holds (the rest is its holders')."""
        return self.meta.nbytes - sum(self.meta.leaves[i].nbytes for i, _, _ in self.refs)


def shared_leaves(meta: ValueMeta, content: Sequence[int] | None,
                  base: Record | None) -> tuple[tuple[int, int, int], ...]:
    """Return the leaves of a new object that ``base`` (or its holders) already holds.

    A leaf is shared when its dtype, shape and size match ``base``'s leaf at the same
    place and their xxh3-128 content hashes are equal; each is named with the file that
    really holds its bytes, so a reference never leads to another reference.
    """
    if content is None or base is None or base.content is None:
        return ()
    theirs = {i: (ver, off) for i, ver, off in base.refs}
    out = []
    for i, (leaf, digest) in enumerate(zip(meta.leaves, content, strict=True)):
        if i >= len(base.meta.leaves) or not leaf.nbytes:
            continue
        old = base.meta.leaves[i]
        if ((old.dtype, old.shape, old.nbytes, old.kind) == (leaf.dtype, leaf.shape,
                                                             leaf.nbytes, leaf.kind)
                and base.content[i] == digest):
            ver, off = theirs.get(i, (base.version, base.leaf_offset(i)))
            out.append((i, ver, off))
    return tuple(out)


@dataclasses.dataclass
class ScanReport:
    """What :meth:`PersistentTier.scan` found: good records and what it set aside."""

    records: list[Record]
    problems: list[str]
    damaged: list[Path] = dataclasses.field(default_factory=list)  # object files not loaded


def record_from(path: Path, manifest: dict[str, Any], offsets: Offsets) -> Record:
    """Return the record a committed file's manifest describes; ``ValueError`` if damaged."""
    if manifest.get("format") != FORMAT:
        raise ValueError(f"unknown format {manifest.get('format')!r}")
    check_algorithm(manifest["checksum"]["algorithm"])
    meta = ValueMeta.from_json(manifest["meta"])
    sums = tuple(int(c) for c in manifest["checksum"]["leaves"])
    if len(sums) != len(meta.leaves):
        raise ValueError("checksum count does not match leaf count")
    content = manifest.get("content")
    refs = tuple((int(i), int(v), int(o)) for i, v, o in manifest.get("refs", ()))
    return Record(key_from_json(manifest["key"]), int(manifest["version"]), meta, sums,
                  path, path.stat().st_size, offsets,
                  None if content is None else tuple(int(c, 16) for c in content), refs)
