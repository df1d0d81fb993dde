"""Burst-buffer directory tier: one file per object, payload first, manifest last.

File layout: ``payload (meta.nbytes) | manifest JSON | footer`` where the 24-byte footer is
``<manifest length u64><xxh3 of manifest u64><b"TIERED01">``. The payload is the entry's
region byte for byte, so a read lands directly in a pooled, aligned host buffer. Runs of
zero bytes of at least :data:`HOLE_BYTES` (aligned) are left as file holes: never written,
read back as zeros by the kernel without touching the device, and covered by the payload
checksum like every other byte. Files written with direct I/O pad the manifest with spaces
(which JSON ignores) so that the file ends on a page boundary.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tiered.checksum import checksum
from tiered.errors import CorruptDataError
from tiered.movers import spare_cores
from tiered.tiers.files import pread_into, pwrite_all, unlink_quietly
from tiered.tiers.persistent import SPARE_KIND, SPARE_PREFIX, PersistentTier
from tiered.tiers.records import Offsets, Record
from tiered.tiers.spares import SparePool
from tiered.values import ValueMeta

log = logging.getLogger(__name__)
MAGIC = b"TIERED01"
_FOOTER = struct.Struct("<QQ8s")
HOLE_BYTES = 64 * 1024
"""Granularity of the zero test: smaller holes would cost more system calls than they save."""
DIRECT_ALIGN = 4096
"""Alignment of buffer addresses, offsets and lengths in direct I/O (a page: enough for
every logical block size in use)."""


def data_runs(region: np.ndarray, block: int = HOLE_BYTES) -> list[tuple[int, int]]:
    """Return the ``(start, stop)`` byte ranges of ``region`` that are not all zero.

    ``region`` is a 1-D uint8 view. The test runs per aligned ``block`` (a multiple of 8); a
    trailing partial block is always data. Adjacent data blocks come back as one range.
    """
    n = len(region)
    full = n // block
    if full == 0:
        return [(0, n)] if n else []
    blocks = region[: full * block].reshape(full, block).view(np.uint64)
    if np.count_nonzero(blocks[:, -1]) == full:  # every block's last word is set: dense,
        return [(0, n)]  # as most payloads are, settled without reading more (or allocating)
    data = np.empty(full + 2, dtype=np.int8)
    data[0] = data[-1] = 0
    flags = data[1:-1].view(np.bool_)
    np.not_equal(blocks[:, -1], 0, out=flags)  # a block whose last word is set holds data
    unsure = np.flatnonzero(~flags)  # dense payloads are settled here, without a full read
    if len(unsure) > full // 4:
        np.any(blocks, axis=1, out=flags)
    else:
        for i in unsure.tolist():
            flags[i] = blocks[i].any()
    tail = full * block < n
    if tail:
        data[-1] = 1  # the partial last block is written whatever it holds
    bounds = (np.flatnonzero(np.diff(data)) * block).tolist()
    if tail:
        bounds.append(n)  # the last run (rising at a block or at the tail) ends with it
    return list(zip(bounds[::2], bounds[1::2], strict=True))


def _threads(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


class DirectoryTier(PersistentTier):
    """A node-local directory (burst buffer, local SSD, tmpfs), durable across restarts.

    Parameters
    ----------
    path : str or os.PathLike
        The tier's root directory; created if missing. Opening an existing one is a restart.
    capacity : int, str or None
        Bytes of object files allowed; ``None`` for unlimited.
    name : str
        Name used in statistics and messages.
    drop_pages, sync : bool
        See :class:`~tiered.tiers.persistent.PersistentTier`.
    writers : int, optional
        Objects written at once. Default: 4 when objects are fsync'd (``sync`` or
        ``drop_pages``: a device keeps several writes in flight faster than one); otherwise
        half the cores, 1 to 4
        (:func:`~tiered.movers.spare_cores`: writes into the page cache are CPU work,
        which on a 2-core machine would only contend with the caller's).
    readers : int, optional
        Objects the prefetcher reads from here at once (each read, checksum and copy up
        runs on its own thread). Default: half the cores, 1 to 4 — on a 16-core GPU node a
        single reader could not keep a backward pass fed.
    sparse : bool
        Leave aligned zero runs of at least :data:`HOLE_BYTES` unwritten, as file holes (the
        default). The early wavefields of a forward pass, fresh optimiser moments and padded
        tensors are largely zeros; a hole costs neither device writes nor device reads.
        ``False`` writes every byte.
    direct : bool
        Move payloads with direct I/O (``O_DIRECT``): straight between the cache's page-aligned
        buffers and the device, bypassing the OS page cache — no copy through kernel memory,
        no page cache filled with data that is read back once, if ever (a burst buffer
        or Lustre larger than memory). The payload's last partial page, the manifest and
        the footer are written as one page-aligned last block, also direct: an object is
        one ``open``, one ``pwritev`` (per data run, with holes) and a ``close``, and
        nothing of it enters the page cache. Reads always come from the device (there is
        no read-ahead to ask for). Falls back to buffered I/O, with a warning, where the
        file system refuses direct I/O, and for buffers that are not page-aligned.
        Durability is unchanged: ``sync`` still fsyncs every object. Default ``False``.
        What it measured: ``docs/benchmarks.md``.
    spares : int
        Deleted object files kept, emptied, to write later objects into (default 256; 0
        deletes them). A file system pays for every new file (ext4 skips recently freed
        inodes, so creating files right after deleting many costs more; a parallel file
        system's metadata server more still); reusing a file skips that. Spares
        hold no data blocks; they are removed at ``close`` and, after a crash, when the
        directory is next opened. Only where objects reach the device as they are written
        (``direct``, ``sync`` or ``drop_pages``): ext4 writes back a file rewritten after a
        truncation as soon as it is closed, so a buffered scratch tier unlinks instead.
    """

    kind = "directory"
    suffix = ".tdat"
    overhead_bytes = 8 * 1024  # manifest and footer, and a page of direct-I/O padding

    def __init__(self, path: str | os.PathLike[str], capacity: int | str | None = None, *,
                 name: str = "directory", drop_pages: bool = False, sync: bool = True,
                 writers: int | None = None, readers: int | None = None,
                 sparse: bool = True, direct: bool = False, spares: int = 256) -> None:
        super().__init__(path, capacity=capacity, name=name, drop_pages=drop_pages,
                         sync=sync)
        self._spares = SparePool(spares)
        self.direct = bool(direct)
        if writers is None:
            writers = 4 if sync or drop_pages else spare_cores()
        self.writers = _threads("writers", writers)
        self.readers = _threads("readers", spare_cores() if readers is None else readers)
        self.sparse = bool(sparse)

    @property
    def spares(self) -> int:
        """Deleted object files kept, emptied, for reuse (see the class docstring)."""
        return self._spares.limit

    @spares.setter
    def spares(self, value: int) -> None:
        self._spares.limit = value

    @property
    def reused(self) -> int:
        """Objects written into a spare file so far."""
        return self._spares.reused

    def _temp_path(self, kind: str = "") -> str:
        """Return a spare file to write the next object into, or a fresh temp name."""
        spare = None if kind else self._spares.take()
        return spare if spare is not None else super()._temp_path(kind)

    def delete(self, record: Record, *, recycle: bool = True) -> None:
        """Remove an object: empty its file and keep it as a spare, or unlink it."""
        if not recycle or not self._recycles() or not self._spares.has_room():
            super().delete(record)
            return
        spare = self._temp_path(SPARE_KIND)
        try:  # renamed first: a crash before the truncation leaves no object behind
            os.replace(record.path, spare)
        except FileNotFoundError:
            return
        try:
            os.truncate(spare, 0)  # frees its blocks: a spare holds no data
        except OSError:  # not a file this process may empty (read-only, a directory)
            os.replace(spare, record.path)
            super().delete(record)  # deleted as before, or failing as before
            return
        with self._lock:
            self._used -= record.file_bytes
        if not self._spares.give(spare):  # filled up or closed meanwhile
            unlink_quietly(spare)

    def _recycles(self) -> bool:
        """Whether deleted files become spares: only where writes reach the device anyway.

        Writing into an emptied file makes ext4 start writing its pages back at ``close``
        (its ``auto_da_alloc`` guard for files rewritten after a truncation): a buffered
        scratch tier would send to the device what it may delete before writeback. (With
        ``direct``, objects under a page are still written buffered; that is a page each.)
        """
        return self.direct or self.sync or self.drop_pages

    def close(self) -> None:
        """Remove the spare files, then release the writer lock; idempotent."""
        for spare in self._spares.close():
            unlink_quietly(spare)
        super().close()

    def _write_file(self, tmp: str, manifest: dict[str, Any], meta: ValueMeta,
                    region: np.ndarray, skip: Sequence[tuple[int, int]] = ()
                    ) -> tuple[int, Offsets]:
        text = self.encode_manifest(manifest)
        region = region.reshape(-1).view(np.uint8)  # byte offsets, whatever the view's dtype
        runs = data_runs(region) if self.sparse else [(0, len(region))]
        if skip:
            runs = without(runs, skip, DIRECT_ALIGN)
        # a spare is empty: written into (or created again, if someone removed it)
        reuse = os.O_TRUNC if os.path.basename(tmp).startswith(SPARE_PREFIX) else os.O_EXCL
        fd, cut = self._open(tmp, os.O_WRONLY | os.O_CREAT | reuse, region)
        try:
            if cut:
                return self._write_direct(fd, region, runs, cut, text), None
            tail = text + _FOOTER.pack(len(text), checksum(text), MAGIC)
            last = runs.pop() if runs and runs[-1][1] == meta.nbytes else None
            for start, stop in runs:
                pwrite_all(fd, region[start:stop], start)
            if last is not None:  # the manifest follows the last run: one system call
                pwrite_all(fd, [region[last[0]:], tail], last[0])
            else:
                pwrite_all(fd, tail, meta.nbytes)  # extends the file over any holes
            self.sync_file(fd)
        finally:
            os.close(fd)
        return meta.nbytes + len(tail), None  # the payload starts the file

    def _direct_cut(self, region: np.ndarray) -> int:
        """Return the payload bytes to move with direct I/O (0: none).

        0 when direct I/O is off, or the region is not page-aligned or shorter than a page.
        """
        cut = len(region) - len(region) % DIRECT_ALIGN
        if not self.direct or not cut or region.ctypes.data % DIRECT_ALIGN:
            return 0
        return cut

    def _open(self, path: Path | str, flags: int, region: np.ndarray) -> tuple[int, int]:
        """Open ``path`` to move ``region``; return the fd and the bytes to move direct.

        With ``O_DIRECT`` when :meth:`_direct_cut` allows it. A refusal (``EINVAL``) turns
        direct I/O off for this tier, with a warning, and opens buffered — without
        ``O_EXCL``: the refusing open may have created the file (tmpfs before Linux 6.6),
        empty.
        """
        cut = self._direct_cut(region)
        if cut:
            try:
                return os.open(path, flags | os.O_DIRECT, 0o644), cut
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
            self.direct = False
            log.warning("%s: %s refuses direct I/O; using buffered I/O", self.name, self.root)
            flags &= ~os.O_EXCL
        return os.open(path, flags, 0o644), 0

    def _write_direct(self, fd: int, region: np.ndarray, runs: list[tuple[int, int]],
                      cut: int, text: bytes) -> int:
        """Write an object with direct I/O only; return the file's size.

        The payload's data runs below ``cut`` go straight from ``region``; the unaligned
        rest, the manifest (padded with spaces, which JSON ignores) and the footer make one
        aligned last block, so nothing enters the page cache and the last data run and
        that block go in one system call.
        """
        rest = len(region) - cut
        text += b" " * (-(rest + len(text) + _FOOTER.size) % DIRECT_ALIGN)
        block = aligned_bytes(rest + len(text) + _FOOTER.size)
        block[:rest] = region[cut:]
        block[rest:-_FOOTER.size] = np.frombuffer(text, np.uint8)
        block[-_FOOTER.size:] = np.frombuffer(
            _FOOTER.pack(len(text), checksum(text), MAGIC), np.uint8)
        below = [(start, min(stop, cut)) for start, stop in runs if start < cut]
        if below and below[-1][1] == cut:  # the last run and the block: one system call
            start = below.pop()[0]
            pieces: list[Any] = [region[start:cut], block]
        else:
            start, pieces = cut, [block]
        for run_start, run_stop in below:
            pwrite_all(fd, region[run_start:run_stop], run_start)
        pwrite_all(fd, pieces, start)
        if self.sync:  # nothing went through the page cache: no pages to drop
            os.fsync(fd)
        return cut + len(block)

    def advise(self, record: Record) -> None:
        """Start reading ``record`` ahead (nothing with direct I/O: it bypasses the cache)."""
        if not self.direct:
            super().advise(record)

    def _read_manifest(self, path: Path) -> tuple[dict[str, Any], Offsets]:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < _FOOTER.size:
                raise ValueError("file shorter than its footer")
            fh.seek(size - _FOOTER.size)
            length, digest, magic = _FOOTER.unpack(fh.read(_FOOTER.size))
            if magic != MAGIC or length > size - _FOOTER.size:
                raise ValueError("bad footer (not a tiered object, or truncated)")
            fh.seek(size - _FOOTER.size - length)
            text = fh.read(length)
        if checksum(text) != digest:
            raise ValueError("manifest failed its checksum")
        manifest: dict[str, Any] = json.loads(text)
        if int(manifest["meta"]["nbytes"]) + length + _FOOTER.size != size:
            raise ValueError("file size does not match its manifest")
        return manifest, None  # the payload starts the file: offsets are implied

    def _read_payload(self, record: Record, region: np.ndarray) -> None:
        region = region.reshape(-1).view(np.uint8)  # a view: regions are contiguous
        fd, cut = self._open(record.path, os.O_RDONLY, region)
        try:
            if not cut:
                pread_into(fd, region, 0)
                return
            pread_into(fd, region[:cut], 0)
            if cut < len(region):  # the rest: from the aligned block that holds it
                block = aligned_bytes(DIRECT_ALIGN)
                got = os.preadv(fd, [block.data], cut)
                if got < len(region) - cut:
                    raise CorruptDataError(f"file ends {len(region) - cut - got} bytes early")
                region[cut:] = block[:len(region) - cut]
        finally:
            os.close(fd)


def without(runs: list[tuple[int, int]], skip: Sequence[tuple[int, int]],
            align: int) -> list[tuple[int, int]]:
    """Return ``runs`` less the whole ``align``-byte blocks inside each ``skip`` range.

    What is left still starts and ends on ``align`` boundaries wherever ``runs`` did, so
    direct I/O can write it; the partial blocks at a skipped range's edges are written.
    """
    cuts = sorted((-(-a // align) * align, b // align * align) for a, b in skip)
    out: list[tuple[int, int]] = []
    for start, stop in runs:
        for a, b in cuts:
            if a >= b or b <= start or a >= stop:
                continue
            if a > start:
                out.append((start, a))
            start = max(start, b)
        if start < stop:
            out.append((start, stop))
    return out


def aligned_bytes(nbytes: int) -> np.ndarray:
    """Return ``nbytes`` uninitialised bytes at a :data:`DIRECT_ALIGN`-aligned address."""
    raw = np.empty(nbytes + DIRECT_ALIGN, np.uint8)
    start = -raw.ctypes.data % DIRECT_ALIGN
    return raw[start:start + nbytes]
