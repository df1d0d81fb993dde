"""A pool of emptied object files a directory tier writes later objects into.

A file system charges for every new file: ext4 searches for a free inode and skips those
freed in the last minute, so creating files right after deleting many costs several times
more CPU than after a rest; a parallel file system's metadata server charges more. A
deleted object's file, renamed aside and truncated, is a spare: the next object is written
into it, and no inode is allocated or freed.

Thread-safe. Owned by one process: a forked child starts with an empty pool (the files it
inherited by name belong to its parent).
"""

from __future__ import annotations

import collections
import threading
import weakref

from tiered.movers import on_child

_POOLS: weakref.WeakSet[SparePool] = weakref.WeakSet()


@on_child
def _forget_in_child() -> None:
    """In a forked child: every pool starts empty, with a fresh lock (fork keeps no threads)."""
    for pool in list(_POOLS):
        pool._lock = threading.Lock()
        pool._paths.clear()


def check_count(value: object) -> int:
    """Return ``value`` if it is a non-negative integer, else raise ``ValueError``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"spares must be a non-negative integer, got {value!r}")
    return value


class SparePool:
    """Up to ``limit`` spare file paths, last in first out.

    Parameters
    ----------
    limit : int
        Spares kept at most; 0 keeps none.
    """

    def __init__(self, limit: int) -> None:
        self._limit = check_count(limit)
        self._paths: collections.deque[str] = collections.deque()
        self._lock = threading.Lock()
        self._closed = False
        self.reused = 0  # files handed out for writing so far
        _POOLS.add(self)

    @property
    def limit(self) -> int:
        """Spares kept at most (lowering it drops the surplus at the next :meth:`give`)."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = check_count(value)

    def has_room(self) -> bool:
        """Whether a spare given now would be kept (a hint: :meth:`give` decides)."""
        return not self._closed and len(self._paths) < self._limit

    def take(self) -> str | None:
        """Return a spare to write into (it is no longer in the pool), or ``None``."""
        with self._lock:
            if not self._paths:
                return None
            self.reused += 1
            return self._paths.pop()

    def give(self, path: str) -> bool:
        """Keep the emptied file ``path``; ``False`` if the pool is full or closed."""
        with self._lock:
            if self._closed or len(self._paths) >= self._limit:
                return False
            self._paths.append(path)
            return True

    def close(self) -> list[str]:
        """Stop keeping spares; return the ones held, for the caller to remove."""
        with self._lock:
            self._closed = True
            paths = list(self._paths)
            self._paths.clear()
            return paths

    def __len__(self) -> int:
        return len(self._paths)
