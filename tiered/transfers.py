"""The byte moves between tiers that lanes and revisits run (no lock held, no index changed)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from tiered.checksum import content_hash
from tiered.index import Copy, Entry
from tiered.movers import host_view, leaf_checksums, staging_buffer
from tiered.payload import copy_region, is_torch_region, leaf_bytes
from tiered.tiers.base import MemoryTier
from tiered.tiers.persistent import PersistentTier
from tiered.tiers.records import Record


def background(tiers: Sequence[MemoryTier]) -> contextlib.AbstractContextManager[Any]:
    """Enter the contexts a lane copies in for ``tiers`` (a device tier's side stream).

    Host memory has none: pass no tier and no context stack is built (this runs per
    transfer, and a lane's Python holds the GIL the caller's next step needs).
    """
    if not tiers:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    for t in tiers:
        stack.enter_context(t.background())
    return stack


def read_persistent(tier: PersistentTier, record: Record, dst: Any) -> None:
    """Read ``record`` into ``dst`` (host or device region), verifying it on the host."""
    if is_torch_region(dst):
        host = staging_buffer(record.meta.nbytes)
        tier.get_into(record, host)
        copy_region(dst, host)
    else:
        tier.get_into(record, dst)


def transfer(mem: Mapping[int, MemoryTier], disk: Mapping[int, PersistentTier], entry: Entry,
             src: Copy, dst: int, extent: Any, *, content: bool = False,
             base: Record | None = None) -> Copy:
    """Copy ``entry``'s bytes from ``src`` into tier ``dst`` and return the new copy.

    ``mem`` and ``disk``: the cache's tiers by position (:func:`~tiered.tiers.persistent.by_kind`).
    ``extent``: the room reserved in ``dst`` when it is a memory tier. A write into a
    persistent tier is checksummed per leaf on the host first (once per entry); with
    ``content`` each leaf's xxh3-128 is computed too (once), and the leaves equal to
    ``base``'s (an older kept value in ``dst``) are not written again.
    """
    meta, n = entry.meta, entry.meta.nbytes
    sregion = (mem[src.tier].region(src.extent, n)
               if src.tier in mem and src.extent is not None else None)
    if dst in mem:
        dregion = mem[dst].region(extent, n)
        if sregion is not None:
            copy_region(dregion, sregion)
        else:
            assert src.record is not None
            read_persistent(disk[src.tier], src.record, dregion)
        return Copy(dst, extent=extent)
    if sregion is not None:
        host = host_view(sregion, n)
    else:
        assert src.record is not None
        host = staging_buffer(n)
        disk[src.tier].get_into(src.record, host)
    if entry.checksums is None:
        entry.checksums = leaf_checksums(host, meta)
    if content and entry.content is None:
        entry.content = tuple(content_hash(leaf_bytes(host, leaf)) for leaf in meta.leaves)
    return Copy(dst, record=disk[dst].put(entry.key, entry.version, meta, host, entry.checksums,
                                          content=entry.content, base=base))
