"""The floor for a cache run by Python threads: the ``bare-thread`` row of ``bench adjoint``.

:class:`BareRing` does what the tiered row does to the bytes, and nothing else: a store copies
the state into a pre-faulted slot of a ring as large as the fast-level budget; when the ring
is full the oldest state is written to its own file by one I/O thread (with direct I/O in
the beyond-memory regime, as tiered's are, or fsync + ``DONTNEED`` with ``direct=False``);
the backward pass reads states back on that thread ahead of their revisits, newest first,
and a consumed state's slot is reused and its file deleted. No checksums, no manifests, no
atomic renames, no holes for zero runs, no index, no policy: what is left is the cost every
Python-threaded implementation pays on the machine (copies, device I/O, the other threads'
share of the GIL and of the memory system). tiered's distance to this row is the price of
its guarantees and its generality.
"""

from __future__ import annotations

import collections
import mmap
import os
import queue
import threading
from pathlib import Path

import numpy as np

_QUIT = ("quit", -1, -1)


class BareRing:
    """Store/revisit a history of same-sized arrays through a ring of host slots.

    For one forward pass (``store`` in step order) then one backward pass (``revisit`` in
    reverse order), as the adjoint benchmark runs them.

    Parameters
    ----------
    root : Path
        Directory for the files of states that leave the ring.
    shape, dtype
        Of every state.
    slots : int
        States the ring holds (more than ``depth``).
    cold : bool
        Keep the files' pages out of the page cache (the beyond-memory regime): with direct
        I/O (``O_DIRECT``) where ``direct`` and the states are whole pages, else each file
        fsync'd and its pages dropped (``posix_fadvise(DONTNEED)``) once written.
    depth : int
        Reads kept in flight ahead of the backward pass, and slots kept free or being
        written in the forward pass (default :attr:`DEPTH`).
    direct : bool
        With ``cold``, use direct I/O (default) rather than fsync + ``DONTNEED``.
    """

    DEPTH = 8

    def __init__(self, root: Path, shape: tuple[int, ...], dtype: np.dtype, slots: int, *,
                 cold: bool, depth: int = DEPTH, direct: bool = True) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        if slots <= depth:
            raise ValueError(f"a ring needs more slots than its depth ({depth}), got {slots}")
        self.root, self.cold, self.depth = root, cold, depth
        self.shape, self.dtype = shape, np.dtype(dtype)
        nbytes = int(np.prod(shape)) * self.dtype.itemsize
        # page-aligned (as direct I/O needs) and faulted in by the kernel, as a HostTier is
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
        self._ring = np.frombuffer(mmap.mmap(-1, slots * nbytes, flags=flags),
                                   np.uint8).reshape(slots, nbytes)
        self._direct = os.O_DIRECT if cold and direct and nbytes % 4096 == 0 else 0
        self._free = list(range(slots))
        self._slot: dict[int, int] = {}  # step -> slot, once its bytes are there
        self._resident: collections.deque[int] = collections.deque()  # store order
        self._on_disk: set[int] = set()
        self._reading: set[int] = set()
        self._writing = 0
        self._consumed: int | None = None
        self._cond = threading.Condition()
        self._jobs: queue.SimpleQueue[tuple[str, int, int]] = queue.SimpleQueue()
        self._error: BaseException | None = None
        root.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._serve, name="bare-io", daemon=True)
        self._thread.start()

    def _path(self, step: int) -> str:
        return os.path.join(self.root, f"{step}.bin")

    def _state(self, slot: int) -> np.ndarray:
        """Return a slot as a state-shaped array view."""
        return self._ring[slot].view(self.dtype).reshape(self.shape)

    # ------------------------------------------------------------ the I/O thread
    def _serve(self) -> None:
        while True:
            op, step, slot = self._jobs.get()
            if op == "quit":
                return
            try:
                if op == "write":
                    self._write(step, slot)
                else:
                    self._read(step, slot)
            except BaseException as exc:  # the caller raises it on its next call
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return

    def _write(self, step: int, slot: int) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | self._direct
        fd = os.open(self._path(step), flags, 0o644)
        try:
            if os.pwrite(fd, self._ring[slot], 0) != self._ring.shape[1]:
                raise OSError(f"short write of state {step}")
            if self.cold and not self._direct:  # by choice, or states not whole pages
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        with self._cond:
            self._writing -= 1
            self._on_disk.add(step)
            del self._slot[step]
            self._free.append(slot)
            self._cond.notify_all()

    def _read(self, step: int, slot: int) -> None:
        fd = os.open(self._path(step), os.O_RDONLY | self._direct)
        try:
            if os.preadv(fd, [self._ring[slot]], 0) != self._ring.shape[1]:
                raise OSError(f"short read of state {step}")
        finally:
            os.close(fd)
        os.unlink(self._path(step))  # read back once: consumed
        with self._cond:
            self._reading.discard(step)
            self._slot[step] = slot
            self._cond.notify_all()

    # ------------------------------------------------------------ the caller
    def _check(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"bare ring I/O failed: {self._error}") from self._error

    def _write_ahead(self) -> None:
        """Queue writes of the oldest resident states (under the lock).

        Until ``depth`` slots are free or on their way to being free, so that stores
        rarely wait.
        """
        while self._resident and len(self._free) + self._writing < self.depth:
            step = self._resident.popleft()
            self._writing += 1
            self._jobs.put(("write", step, self._slot[step]))

    def store(self, step: int, value: np.ndarray) -> None:
        """Copy ``value`` in as state ``step``; waits only while every slot is taken."""
        with self._cond:
            while not self._free:
                self._check()
                self._write_ahead()
                self._cond.wait()
            slot = self._free.pop()
        np.copyto(self._state(slot), value)
        with self._cond:
            self._slot[step] = slot
            self._resident.append(step)
            self._write_ahead()

    def revisit(self, step: int) -> np.ndarray:
        """Return state ``step`` (a view, valid until the next revisit), newest first."""
        with self._cond:
            self._release_consumed()
            while self._writing:  # the forward pass's last writes land first
                self._check()
                self._cond.wait()
            if step not in self._slot and step not in self._reading:
                if step not in self._on_disk:
                    raise KeyError(f"state {step} is not held (never stored, or already "
                                   "revisited)")
                self._start_read(step)
            self._prefetch(step - 1)
            while step not in self._slot:
                self._check()
                self._cond.wait()
            self._consumed = step
            slot = self._slot[step]
        return self._state(slot)

    def _release_consumed(self) -> None:
        if self._consumed is not None:
            self._free.append(self._slot.pop(self._consumed))
            if self._consumed in self._resident:
                self._resident.remove(self._consumed)
            self._consumed = None

    def _start_read(self, step: int) -> None:
        while not self._free:
            self._check()
            self._cond.wait()
        self._on_disk.discard(step)
        self._reading.add(step)
        self._jobs.put(("read", step, self._free.pop()))

    def _prefetch(self, below: int) -> None:
        """Queue reads of the next older states on disk while slots and depth allow."""
        step = below
        while (self._free and len(self._reading) < self.depth and step >= 0
               and step > below - 4 * self.depth):
            if step in self._on_disk:
                self._start_read(step)
            step -= 1

    def close(self) -> None:
        """Stop the I/O thread (files left behind stay); raise what it hit, if anything."""
        self._jobs.put(_QUIT)
        self._thread.join()
        self._check()
