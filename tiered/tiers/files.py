"""File primitives the persistent tiers share: whole reads and writes, fsync, advice."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from tiered.errors import CorruptDataError


def unlink_quietly(path: str | os.PathLike[str]) -> None:
    """Remove a file if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def advise_file(path: Path, advice: int) -> None:
    """Give the kernel ``posix_fadvise`` ``advice`` about all of ``path``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, advice)
    finally:
        os.close(fd)


def pwrite_all(fd: int, buf: Any, offset: int) -> None:
    """Write all of ``buf`` at ``offset`` (GIL released while the kernel copies).

    ``buf`` is one buffer or a list of buffers written back to back: one ``pwritev`` in the
    common case, then piece by piece after a short write.
    """
    views = [memoryview(b).cast("B") for b in (buf if isinstance(buf, list) else [buf])]
    step = 1 << 30
    done = os.pwritev(fd, views, offset) if sum(map(len, views)) <= step else 0
    for view in views:
        if done >= len(view):
            done -= len(view)
        else:
            while done < len(view):
                done += os.pwrite(fd, view[done: done + step], offset + done)
            done = 0
        offset += len(view)


def pread_into(fd: int, buf: Any, offset: int) -> None:
    """Fill ``buf`` from ``offset``; a short file is a :class:`CorruptDataError`."""
    view = memoryview(buf).cast("B")
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done: done + (1 << 30)]], offset + done)
        if n == 0:
            raise CorruptDataError(f"file ends {len(view) - done} bytes early")
        done += n
