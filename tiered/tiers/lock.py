"""One writer per persistent tier: an exclusive ``flock`` on the tier's root directory.

The lock is taken on the directory itself, so it leaves no file behind, and the kernel
drops it when the holder exits, however it exits (kill -9 included). A second writer is
refused at once with :class:`~tiered.errors.TierLockedError`, naming the holder's process
as the kernel lists it in ``/proc/locks``. Readers take no lock.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from tiered.errors import TierLockedError

PROC_LOCKS = Path("/proc/locks")


class WriterLock:
    """The exclusive writer lock of one directory, held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`TierLockedError` naming who holds it."""
        if self._fd is not None:
            return
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TierLockedError(
                f"{self.root} is open for writing by {holder(self.root)}; one writer per "
                "directory: close that cache first, or open this one with readonly=True"
            ) from None
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor releases the flock


def holder(root: Path) -> str:
    """Say which process holds the flock on ``root`` (pid and host), as far as it is seen."""
    st = os.stat(root)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    host = socket.gethostname()
    try:
        for line in PROC_LOCKS.read_text().splitlines():
            fields = line.split()
            if "FLOCK" in fields and ident in fields:
                pid = fields[fields.index(ident) - 1]
                return f"pid {pid} on {host}" + (" (this process)"
                                                  if pid == str(os.getpid()) else "")
    except OSError:
        pass
    return "another process (its pid is not listed here: another host, or no /proc/locks)"
