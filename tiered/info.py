"""``tiered info PATH``: what a persistent tier holds, verified or not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tiered.errors import CorruptDataError
from tiered.movers import staging_buffer
from tiered.sizes import format_size
from tiered.tiers.directory import DirectoryTier
from tiered.tiers.persistent import TMP_PREFIX, PersistentTier


class NotATierError(ValueError):
    """The path is not a directory that a persistent tier wrote."""


def open_tier(path: Path) -> PersistentTier:
    """Open the tier at ``path``: HDF5 if it holds ``.h5`` objects, else a directory tier.

    Raises
    ------
    FileNotFoundError
        If ``path`` is not a directory.
    NotATierError
        If it holds no object or temp file of a tiered tier (an empty or foreign folder).
    """
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such directory")
    names = [p.name for p in path.iterdir()]
    if not any(n.startswith(TMP_PREFIX) or n.endswith((DirectoryTier.suffix, ".h5"))
               for n in names):
        raise NotATierError(f"{path} holds no tiered objects ({len(names)} other entries): "
                            "give the directory of a DirectoryTier or HDF5Tier")
    if any(n.endswith(".h5") for n in names):
        from tiered.tiers.hdf5 import HDF5Tier

        return HDF5Tier(path)
    return DirectoryTier(path)


def inspect(path: Path, *, verify: bool = True) -> dict[str, Any]:
    """Return the tier's objects (key, version, bytes, status) and scan problems.

    Unlike opening a cache, this only reads: temp files and old versions are listed, not
    removed.
    """
    tier = open_tier(path)
    report = tier.scan(repair=False)
    rows = []
    for record in report.records:
        status = "not checked"
        if verify:
            try:
                tier.get_into(record, staging_buffer(record.meta.nbytes))
                status = "verified"
            except CorruptDataError as exc:
                status = f"CORRUPT: {exc}"
        rows.append({"key": record.key, "version": record.version,
                     "bytes": record.meta.nbytes, "leaves": len(record.meta.leaves),
                     "status": status})
    return {"tier": type(tier).__name__, "path": str(path), "objects": rows,
            "problems": report.problems, "total_bytes": int(np.sum([r["bytes"] for r in rows]))}


def open_reader(path: Path) -> Any:
    """Open a read-only cache over the persistent tier at ``path`` (see :func:`open_tier`)."""
    from tiered.cache import Cache

    return Cache([open_tier(path)], readonly=True)


def _ref(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def version_tree(cache: Any) -> list[str]:
    """Return the cache's versions as lines of a tree (children under their parent).

    Each line: id, label, time, keys, size and state; ``*`` marks the head.
    """
    from tiered.versions import describe

    infos = cache._lineage.versions
    head = cache._lineage.head
    children: dict[int | None, list[int]] = {}
    for vid in sorted(infos):
        parent = infos[vid].parent if infos[vid].parent in infos else None
        children.setdefault(parent, []).append(vid)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for vid in children.get(parent, []):
            row = describe(infos[vid])
            label = f" {row['label']!r}" if row["label"] else ""
            lines.append(f"{'*' if vid == head else ' '} {'  ' * depth}v{vid}{label}  "
                         f"{row['created']}  {row['keys']} keys  "
                         f"{format_size(row['bytes'])}  {row['state']}"
                         + (f" (parent v{infos[vid].parent}, deleted)" if depth == 0 and
                            infos[vid].parent is not None else ""))
            walk(vid, depth + 1)

    walk(None, 0)
    return lines


def change_lines(changes: dict[Any, Any]) -> list[str]:
    """Return what :meth:`tiered.Cache.diff` found as lines (keys that are the same: none)."""
    lines = []
    for key, change in changes.items():
        if change.kind == "same":
            continue
        lines.append(f"{change.kind:8} {key!r}" + (f"  ({change.note})" if change.note else ""))
        for leaf in change.leaves:
            facts = [leaf.note] if leaf.note else []
            if leaf.max_abs is not None:
                facts.append(f"max abs {leaf.max_abs:.6g}")
            if leaf.max_rel is not None:
                facts.append(f"max rel {leaf.max_rel:.6g}")
            if leaf.first_index is not None:
                facts.append(f"first at {list(leaf.first_index)}")
            lines.append(f"           {leaf.path or '(value)'}: {', '.join(facts)}")
    return lines
