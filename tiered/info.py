"""``tiered info PATH``: what a persistent tier holds, verified or not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tiered.errors import CorruptDataError
from tiered.movers import staging_buffer
from tiered.tiers.base import TMP_PREFIX, PersistentTier
from tiered.tiers.directory import DirectoryTier


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
