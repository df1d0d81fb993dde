"""``tiered bench sweeps``: what a new file per object costs over several adjoint sweeps.

An optimisation loop runs the same forward and backward sweep again and again: each backward
pass deletes the files the forward pass wrote, and the next forward pass writes as many new
ones. The file system charges for every new file (ext4 looks for a free inode and skips the
ones freed in the last minute, so a create gets dearer the more files were just deleted).
:class:`~tiered.DirectoryTier` keeps deleted object files, emptied, as spares and writes
later objects into them. Rows, each ``sweeps`` sweeps of ``states`` states, alternated over
``rounds`` rounds (the median round reported):

* ``raw-new-files``: bare system calls, the floor of one file per state: a new temp file
  (``O_CREAT | O_EXCL``), one ``pwrite``, ``close``, a rename to its name; unlinked when the
  backward pass has read it back (``O_DIRECT`` both ways);
* ``raw-reused-files``: the same, but a file read back is renamed aside and emptied
  (``ftruncate``), and the next write goes into it;
* ``tiered-no-spares`` / ``tiered-spares``: a :class:`~tiered.adapters.adjoint.Checkpointer`
  over a host tier holding a quarter of the states above a directory tier (direct I/O, no
  fsync), with ``spares=0`` and the default.

``cpu_us_per_state`` is the CPU of every thread of the process per state stored. The tiered
rows' includes the cache's own work and a quarter of their states never leave memory, so
compare rows within a pair only: ``cpu_vs_new_files`` is the median over rounds of a row's
CPU over its new-file counterpart's in the same round (1 for the counterparts).
"""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tiered
from tiered.adapters.adjoint import Checkpointer
from tiered.bench.common import filled, median_round
from tiered.console import progress

ROWS = ("raw-new-files", "raw-reused-files", "tiered-no-spares", "tiered-spares")
PAIRS = {"raw-reused-files": "raw-new-files", "tiered-spares": "tiered-no-spares"}
Sweep = Callable[[Path, np.ndarray, int, int], int]  # root, state, states, sweeps -> reused


def _open(path: str, flags: int) -> int:
    """Open with ``O_DIRECT``, or without where the file system refuses it (tmpfs)."""
    try:
        return os.open(path, flags | os.O_DIRECT, 0o644)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    return os.open(path, flags, 0o644)


def _raw(reuse: bool) -> Sweep:
    def sweep(root: Path, state: np.ndarray, states: int, sweeps: int) -> int:
        buf = mmap.mmap(-1, state.nbytes)  # page-aligned, as direct I/O needs
        buf[:] = state.tobytes()
        spares: list[str] = []
        made = reused = 0
        for _ in range(sweeps):
            for i in range(states):
                if spares:
                    tmp, flags, reused = spares.pop(), os.O_TRUNC, reused + 1
                else:
                    made += 1
                    tmp, flags = os.path.join(root, f".tmp-{made}"), os.O_CREAT | os.O_EXCL
                fd = _open(tmp, os.O_WRONLY | flags)
                os.pwrite(fd, buf, 0)
                os.close(fd)
                os.replace(tmp, os.path.join(root, str(i)))
            for i in reversed(range(states)):
                path = os.path.join(root, str(i))
                fd = _open(path, os.O_RDONLY)
                os.preadv(fd, [buf], 0)
                os.close(fd)
                if reuse:
                    made += 1
                    spare = os.path.join(root, f".tmp-{made}")
                    os.replace(path, spare)
                    os.truncate(spare, 0)
                    spares.append(spare)
                else:
                    os.unlink(path)
        for spare in spares:  # removed inside the timing, as the other row's files are
            os.unlink(spare)
        return reused
    return sweep


def _tiered(spares: int) -> Sweep:
    def sweep(root: Path, state: np.ndarray, states: int, sweeps: int) -> int:
        disk = tiered.DirectoryTier(root, sync=False, direct=True, drop_pages=True,
                                    spares=spares)
        with tiered.Cache([tiered.HostTier(max(1, states // 4) * state.nbytes), disk],
                          eviction="score", write_back="lazy", prefetch="reverse") as cache:
            ckpt = Checkpointer(cache, name="sweeps")
            for _ in range(sweeps):
                for i in range(states):
                    ckpt.store(i, state)
                for i in reversed(range(states)):
                    ckpt.revisit(i, copy=False)  # the view is dropped at once
        return disk.reused
    return sweep


SWEEPS: dict[str, Sweep] = {"raw-new-files": _raw(False), "raw-reused-files": _raw(True),
                            "tiered-no-spares": _tiered(0), "tiered-spares": _tiered(256)}


def _one(name: str, state: np.ndarray, states: int, sweeps: int,
         workdir: Path | None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="tiered-sweeps-", dir=workdir))
    try:
        started, cpu = time.perf_counter(), time.process_time()
        reused = SWEEPS[name](root, state, states, sweeps)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        shutil.rmtree(root)
    written = states * sweeps
    return {"name": name, "states": states, "sweeps": sweeps, "state_mib": state.nbytes / 2**20,
            "wall_s": wall, "cpu_us_per_state": cpu / written * 1e6,
            "files_reused": reused}


def run(states: int = 200, sweeps: int = 3, state_mib: int = 1, rounds: int = 5,
        workdir: Path | None = None) -> list[dict[str, Any]]:
    """Every row ``rounds`` times, alternated; the median round of each, with its ratio."""
    if min(states, sweeps, state_mib, rounds) < 1:
        raise ValueError("states, sweeps, state_mib and rounds must be positive")
    state = filled(state_mib << 20)  # no zero runs: every byte is written
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in ROWS}
    order = [name for _ in range(rounds) for name in ROWS]
    for name in progress(order, "sweeps"):
        samples[name].append(_one(name, state, states, sweeps, workdir))
    rows = []
    for name, runs in samples.items():
        row = median_round(runs, "cpu_us_per_state")
        row["cpu_us_rounds"] = [r["cpu_us_per_state"] for r in runs]
        pair = samples[PAIRS.get(name, name)]  # the same rounds, new files
        row["cpu_vs_new_files"] = statistics.median(
            r["cpu_us_per_state"] / p["cpu_us_per_state"] for r, p in zip(runs, pair,
                                                                          strict=True))
        rows.append(row)
    return rows
