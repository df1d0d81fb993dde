"""Movers: background lanes and the byte transfers they run between tiers.

A lane is one worker thread with a FIFO of transfers; every transfer is a
``concurrent.futures.Future``. Transfers hold no cache lock: the cache pins the source copy
and reserves the destination before it submits one.
"""

from __future__ import annotations

import atexit
import logging
import mmap
import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import numpy as np

from tiered.checksum import checksum
from tiered.payload import copy_region, is_torch_region, leaf_bytes
from tiered.values import ValueMeta

log = logging.getLogger(__name__)
T = TypeVar("T")
LANE_PREFIX = "tiered-"  # background lane threads are named so
_RESETS: list[Callable[[], None]] = []  # what a forked child resets, in registration order


def on_child(reset: Callable[[], None]) -> Callable[[], None]:
    """Register ``reset`` to run in every forked child (usable as a decorator).

    A child of ``fork`` has none of its parent's threads, and locks held by them at the
    fork stay held. Each module that keeps per-process state (the process id in temp
    names, the spare-file pools, the lanes) registers its reset here; this is the one place
    that asks ``os.register_at_fork``.
    """
    _RESETS.append(reset)
    return reset


def _after_fork_in_child() -> None:
    for reset in _RESETS:
        reset()


os.register_at_fork(after_in_child=_after_fork_in_child)


_LANE = threading.local()  # .on is True in the threads of tiered's background lanes


def in_lane() -> bool:
    """Whether the calling thread is one of tiered's background lanes.

    Told by a thread-local flag the lane's worker sets (:func:`mark_lane`), not by the
    thread's name, which any thread may share.
    """
    return getattr(_LANE, "on", False)


def mark_lane() -> None:
    """Mark the calling thread as a background lane's worker (for :func:`in_lane`)."""
    _LANE.on = True


def cuda_torch() -> Any:
    """Return torch if it is already imported and sees a CUDA device, else ``None``.

    Never imports torch itself: a numpy-only program does not pay for it.
    """
    torch = sys.modules.get("torch")
    return torch if torch is not None and torch.cuda.is_available() else None


def spare_cores(limit: int = 4) -> int:
    """Background threads worth running at once: half this process's cores, 1 to ``limit``.

    A 2-core machine gets 1 (the caller's compute keeps a core); a 16-core GPU node 4.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 2
    return max(1, min(limit, cores // 2))


class Lane:
    """Background worker threads (one unless ``workers`` says), named for what they move.

    A queue and threads of its own rather than a ``ThreadPoolExecutor``: a transfer is
    submitted per object, and the executor's per-job bookkeeping (two locks per submit, an
    idle semaphore taken and released around every job) is Python that holds the GIL the
    caller's next step needs. Jobs run in submission order (FIFO) on ``workers`` threads,
    started with the first job. As an executor's, the threads of a lane dropped without
    :meth:`shutdown` stop once its queue is done, and at the interpreter's exit every lane
    finishes the jobs queued before.
    """

    def __init__(self, name: str, workers: int = 1) -> None:
        self.name = name
        self._workers = workers
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        _LANES.add(self)

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(*args)``; returns its future.

        Raises
        ------
        RuntimeError
            After :meth:`shutdown`.
        """
        future: Future[T] = Future()
        with self._lock:
            if self._closed:  # by shutdown, or by the interpreter's exit
                raise RuntimeError(f"lane {self.name}: cannot queue a job after shutdown")
            if not self._threads:
                self._start()
            self._jobs.put((future, fn, args))
        return future

    def _start(self) -> None:
        for i in range(self._workers):  # the threads hold the queue, not the lane
            thread = threading.Thread(target=_serve, args=(self._jobs,), daemon=True,
                                      name=f"{LANE_PREFIX}{self.name}_{i}")
            thread.start()
            self._threads.append(thread)
            _WORKERS[thread] = self._jobs
        weakref.finalize(self, self._jobs.put, None).atexit = False  # dropped: stop

    def shutdown(self, *, cancel: bool) -> None:
        """Stop the workers after the running transfers; drop queued ones if ``cancel``."""
        with self._lock:
            self._closed = True
            if cancel:
                while True:
                    try:
                        job = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if job is not None:
                        job[0].cancel()
            self._jobs.put(None)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()


_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


def _serve(jobs: queue.SimpleQueue[_Job | None]) -> None:
    """Run a lane's jobs until its queue says stop (``None``, passed on to the next)."""
    mark_lane()
    while (job := jobs.get()) is not None:
        future, fn, args = job
        del job
        if future.set_running_or_notify_cancel():
            try:
                result = fn(*args)
            except BaseException as exc:  # the future carries it to whoever waits
                future.set_exception(exc)
                del exc
            else:
                future.set_result(result)
                del result
        del future, fn, args  # nothing of a finished job stays alive here
    jobs.put(None)


_LANES: weakref.WeakSet[Lane] = weakref.WeakSet()  # every lane, for the fork and exit hooks
_WORKERS: weakref.WeakKeyDictionary[threading.Thread, queue.SimpleQueue[_Job | None]] = (
    weakref.WeakKeyDictionary())  # every lane thread and its queue, for the exit hook


@on_child
def _forget_in_child() -> None:
    """In a forked child the lanes' threads are gone: a lane used there starts its own."""
    for lane in list(_LANES):
        lane._threads, lane._lock = [], threading.Lock()
        lane._jobs = queue.SimpleQueue()  # the parent's jobs stay the parent's
    _WORKERS.clear()


@atexit.register
def _finish_at_exit() -> None:
    """Let lane threads finish the jobs queued before the interpreter goes away.

    Every lane is closed first, as an executor is at exit: a job submitted later (by an
    exit handler that runs after this one, or by a running job) is refused at once instead
    of waiting behind the threads' stop for ever.
    """
    for lane in list(_LANES):
        with lane._lock:
            lane._closed = True
    workers = list(_WORKERS.items())
    for _, jobs in workers:
        jobs.put(None)
    for thread, _ in workers:
        thread.join()


REUSE_STAGING_MAX = 256 << 20  # a lane keeps one staging buffer up to this size
_lane_local = threading.local()


def staging_buffer(nbytes: int) -> np.ndarray:
    """Return a page-aligned host buffer (for paths with no host tier to land in).

    A background lane reuses one buffer (grown as needed, up to :data:`REUSE_STAGING_MAX`),
    page-locked when torch is imported and sees a CUDA device, so device reads and writes
    through it run at DMA speed and no transfer pays page faults. The caller must be done
    with it before the lane's next transfer. Other threads, and larger payloads, get a
    fresh buffer.
    """
    if nbytes > REUSE_STAGING_MAX or not in_lane():
        return _fresh_buffer(nbytes)
    buf: np.ndarray | None = getattr(_lane_local, "staging", None)
    if buf is None or len(buf) < nbytes:
        buf = _lane_local.staging = _pinned_buffer(nbytes)
    return buf[:nbytes]


def _fresh_buffer(nbytes: int) -> np.ndarray:
    mapping = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(mapping, dtype=np.uint8)[:nbytes]


def _pinned_buffer(nbytes: int) -> np.ndarray:
    """Return a page-locked buffer from torch's host allocator with CUDA, else a fresh one."""
    torch = cuda_torch()
    if torch is None:
        return _fresh_buffer(nbytes)
    # the array's base keeps the pinned tensor alive; freed to torch's cache with the lane
    out: np.ndarray = torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=True).numpy()
    return out


def host_view(region: Any, nbytes: int) -> np.ndarray:
    """Return ``region`` as host bytes, staging device memory through a fresh buffer."""
    if not is_torch_region(region):
        return region
    out = staging_buffer(nbytes)
    copy_region(out, region)
    return out


def leaf_checksums(region: np.ndarray, meta: ValueMeta) -> tuple[int, ...]:
    """Checksum each leaf of a host region."""
    return tuple(checksum(leaf_bytes(region, leaf)) for leaf in meta.leaves)
