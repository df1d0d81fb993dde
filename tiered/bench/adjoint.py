"""``tiered bench adjoint``: reverse time migration with each way of keeping its history.

Every configuration runs the same RTM problem (:mod:`tiered.bench.rtm`) in a fresh
subprocess (clean peak RSS and I/O counters), with the same memory budget for the fast
level (a quarter of the snapshot history), in two regimes:

* ``page-cache``: files stay in the OS page cache, as on a big-memory workstation;
* ``beyond-memory``: nothing read back may come from the OS page cache, as on a parallel
  file system holding more than memory. Plain files (``np.save``, the disk levels of the
  schedules and of pyrevolve) are fsync'd and their pages dropped
  (``posix_fadvise(POSIX_FADV_DONTNEED)``) right away; the tiered and bare-thread rows move
  their payloads with direct I/O (``O_DIRECT``), which never enters the page cache — what
  a cache does on such a machine, and what ``np.save`` cannot. ``cold_io="fsync"``
  (``--cold-io fsync``) makes them fsync and drop their files too, so that every row
  writes alike. ``device_read_bytes`` (from ``/proc/self/io``) shows that reads came from
  the device.

Each row starts after an ``os.sync()``, so that none is throttled by the dirty pages of the
row before it, and with glibc malloc's mmap threshold fixed (:data:`MALLOC_ENV`; a row's
``malloc_mmap_threshold`` says what it ran with): left to adjust itself, it made the same
solver arithmetic take 11–20 s at n=1024 here, depending on each process's allocation
history, so that the reference row itself could run 1.5× slower than tiered's.

With ``RTMConfig.device`` set (``tiered bench adjoint --device cuda``) the wavefields live on
that device and the rows are :data:`DEVICE_ROWS`: the recomputing peers are numpy-only, and
``host-memory`` (``u.cpu()`` per snapshot, ``.to(device)`` back) is what a GPU code keeping
its history in host memory writes. tiered then gets the budget twice, once in device memory
(a ``DeviceTier``) and once in host memory (page-locked), above the directory tier.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tiered.bench import rtm
from tiered.bench.adjoint_rows import RUNNERS, AdjointBench, check_cold_io
from tiered.bench.common import median_round

REGIMES = ("page-cache", "beyond-memory")
ROWS = ("compute-only", "in-memory", "np.save/np.load", "pyrevolve-memory",
        "pyrevolve-disk", "schedules-multistage-numpy", "tiered-reverse",
        "tiered-reverse-dense", "tiered-multistage", "bare-thread")
REFERENCE_ROWS = ("compute-only", "np.save/np.load")  # every ratio is against these two
DEVICE_ROWS = ("compute-only", "in-memory", "host-memory", "np.save/np.load", "tiered-reverse")


# ---------------------------------------------------------------- one row per process
def _solver_sched() -> tuple[float, int] | None:
    """Return this thread's run-queue wait (s) and voluntary context switches so far.

    From ``/proc/thread-self`` (Linux); ``None`` where it is not there.
    """
    try:
        with open("/proc/thread-self/schedstat") as fh:
            runq_ns = int(fh.read().split()[1])
        with open("/proc/thread-self/status") as fh:
            switches = next(int(line.split()[1]) for line in fh
                            if line.startswith("voluntary_ctxt_switches:"))
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return runq_ns / 1e9, switches


def _solver_waits(before: tuple[float, int] | None,
                  after: tuple[float, int] | None) -> dict[str, float | int | None]:
    """Split the solver's waits: ready but with no CPU free, or blocked (how often).

    ``solver_runq_s`` is time the solver's thread was runnable but waited for a CPU (the
    other threads and processes had them all); ``solver_blocks`` counts the times it went
    to sleep (for the GIL, a lock, or I/O). Both ``None`` off Linux.
    """
    if before is None or after is None:
        return {"solver_runq_s": None, "solver_blocks": None}
    return {"solver_runq_s": after[0] - before[0], "solver_blocks": after[1] - before[1]}


def _io() -> dict[str, int]:
    with open("/proc/self/io") as fh:
        return {k: int(v) for k, v in (line.split(": ") for line in fh)}


def _peak_rss() -> int:
    """Return the peak resident set of this process.

    ``VmHWM``: unlike ``ru_maxrss``, it is not inherited from the parent across exec.
    """
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_row(name: str, bench: AdjointBench) -> dict[str, Any]:
    """Run one configuration here (called in a fresh subprocess); return its row."""
    data = np.load(bench.workdir.parent / "data.npy")
    bench.cfg.ops.asarray(np.zeros(1, np.float32))  # start the device's context untimed
    bench.cfg.ops.sync()
    before, sched = _io(), _solver_sched()
    started, cpu, solver = time.perf_counter(), time.process_time(), time.thread_time()
    row = RUNNERS[name](bench, data)
    wall = time.perf_counter() - started
    solver, cpu = time.thread_time() - solver, time.process_time() - cpu
    after, sched_after = _io(), _solver_sched()
    if (bench.cfg.device or "").startswith("cuda"):
        import torch

        row["peak_device_bytes"] = torch.cuda.max_memory_allocated()
    np.save(bench.workdir.parent / f"image-{bench.regime}-{name.replace('/', '_')}.npy",
            row.pop("image"))
    # setting up and closing (tiers' memory, a page-locked host tier) is in wall_s too
    setup = wall - row["forward_s"] - row["backward_s"]
    return {"name": name, "regime": bench.regime, "wall_s": wall,
            "stall_s": row.pop("stall_s", 0.0), "recomputed_steps": 0, **row,
            "setup_s": setup, "direct_io": bench.direct,
            "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
            # the solver's thread off its CPU (GIL and lock waits, I/O it waited for,
            # interrupts and the hypervisor) and the CPU every other thread used
            "solver_wait_s": wall - solver, "background_cpu_s": cpu - solver,
            **_solver_waits(sched, sched_after), "peak_rss_bytes": _peak_rss(),
            "bytes_written": after["wchar"] - before["wchar"],
            "bytes_read": after["rchar"] - before["rchar"],
            "device_read_bytes": after["read_bytes"] - before["read_bytes"],
            "device_write_bytes": after["write_bytes"] - before["write_bytes"]}


# glibc's malloc moves its mmap threshold up as large blocks are freed, so where a solver's
# fresh arrays come from (and how fast the same arithmetic runs: 11-20 s at n=1024 here)
# depended on each row's allocation history; fixed, it is the same in every row
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20)}


def child_env() -> dict[str, str]:
    """Return the environment a row runs in: ours, with malloc's thresholds fixed.

    A threshold the caller set is kept.
    """
    return {**MALLOC_ENV, **os.environ}


def _child(name: str, regime: str, cfg: rtm.RTMConfig, root: Path,
           cold_io: str) -> dict[str, Any]:
    workdir = root / f"{regime}-{name.replace('/', '_')}"
    workdir.mkdir()
    os.sync()  # no row starts throttled by dirty pages the one before left behind
    spec = json.dumps({"name": name, "regime": regime, "root": str(workdir),
                       "cfg": dataclasses.asdict(cfg), "cold_io": cold_io})
    done = subprocess.run([sys.executable, "-m", "tiered.bench.adjoint", spec],
                          capture_output=True, text=True, check=False, env=child_env())
    if done.returncode != 0:
        raise RuntimeError(f"bench adjoint row {name} ({regime}) failed:\n{done.stderr}")
    subprocess.run(["rm", "-rf", str(workdir)], check=True)
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def round_order(rows: tuple[str, ...], index: int) -> list[str]:
    """Return the order rows run in, in round ``index``: as given first, then shuffled.

    A fixed order would hand each row the same neighbour every round (the one before it
    leaves files to delete and dirty pages behind); shuffled, that is noise, not a bias.
    Seeded by the round, so a run can be repeated.
    """
    order = list(rows)
    if index:
        random.Random(index).shuffle(order)
    return order


def run(cfg: rtm.RTMConfig, workdir: Path | None = None, rows: tuple[str, ...] = ROWS,
        rounds: int = 1, progress: Callable[[str], object] | None = None,
        cold_io: str = "direct") -> list[dict[str, Any]]:
    """Every configuration in both regimes, ``rounds`` times round-robin; median rows.

    The first round runs the rows in the order given, later ones in a shuffled order
    (:func:`round_order`).

    Each row reported is the round with the median wall time (its other fields are that
    round's, so they stay consistent); ``wall_s_rounds`` lists every round. Rows carry
    ratios to compute-only and np.save of the same regime. ``progress``, if given, gets
    one line per finished row (a full run takes minutes). ``cold_io`` is how the tiered
    and bare-thread rows keep their files out of the page cache beyond memory:
    ``"direct"`` (``O_DIRECT``) or ``"fsync"`` (fsync + ``DONTNEED``, as the plain files).
    """
    check_cold_io(cold_io)  # before any row runs
    allowed = DEVICE_ROWS if cfg.device is not None else ROWS
    if unknown := [name for name in rows if name not in allowed]:
        raise ValueError(f"rows {unknown} cannot run with device={cfg.device!r}; "
                         f"choose from {allowed}")
    if missing := [name for name in REFERENCE_ROWS if name not in rows]:
        raise ValueError(f"rows must include {missing}: every ratio is against them")
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    total, done = rounds * len(REGIMES) * len(rows), 0
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root = Path(tmp)
        data = rtm.record(cfg)
        np.save(root / "data.npy", data)
        images: list[tuple[dict[str, Any], np.ndarray]] = []
        for index in range(rounds):
            for regime in REGIMES:
                for name in round_order(rows, index):
                    row = _child(name, regime, cfg, root, cold_io)
                    done += 1
                    if progress is not None:
                        progress(f"[{done}/{total}] {regime} {name}: {row['wall_s']:.2f} s")
                    if name != "compute-only":
                        images.append((row, np.load(
                            root / f"image-{regime}-{name.replace('/', '_')}.npy")))
                    samples.setdefault((regime, name), []).append(row)
        # only now: a child inherits its parent's peak RSS, so the parent stays small
        reference = rtm.in_memory_image(cfg, data)
        for row, image in images:
            row["image_identical"] = bool(np.array_equal(image, reference))
    out = add_ratios([_median(runs) for runs in samples.values()])
    for row in out:
        row.update(history_bytes=cfg.nt * cfg.snapshot_bytes, nz=cfg.nz, nx=cfg.nx, nt=cfg.nt,
                   substeps=cfg.substeps, cold_io=cold_io)
    return out


def add_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add each row's ratios to the reference rows of its regime; return ``rows``.

    ``vs_compute`` (wall time over compute only's), ``speedup_vs_numpy`` (np.save's wall
    time over the row's), ``speedup_bound`` (np.save's over compute only's: no
    configuration beats compute only, so no speed-up over np.save exceeds it) and, where
    the bare ring ran, ``vs_bare_thread``. With several rounds, ``vs_compute_rounds`` and
    ``vs_bare_thread_rounds`` pair each round with the reference's same round (run minutes
    apart, round-robin): their spread is the machine's noise.
    """
    for row in rows:
        same = [r for r in rows if r["regime"] == row["regime"]]
        compute = next(r for r in same if r["name"] == "compute-only")
        base = compute["wall_s"]
        naive = next(r for r in same if r["name"] == "np.save/np.load")["wall_s"]
        floor = next((r for r in same if r["name"] == "bare-thread"), None)
        if floor is not None:  # what tiered's guarantees cost over the bare mechanism
            row["vs_bare_thread"] = row["wall_s"] / floor["wall_s"]
            _paired(row, floor, "vs_bare_thread_rounds")
        row.update(vs_compute=row["wall_s"] / base, speedup_vs_numpy=naive / row["wall_s"],
                   speedup_bound=naive / base)
        _paired(row, compute, "vs_compute_rounds")
    return rows


def _paired(row: dict[str, Any], reference: dict[str, Any], field: str) -> None:
    """Set ``row[field]`` to its wall time over ``reference``'s, round by round."""
    mine, theirs = row.get("wall_s_rounds", []), reference.get("wall_s_rounds", [])
    if len(mine) > 1 and len(mine) == len(theirs):
        row[field] = [a / b for a, b in zip(mine, theirs, strict=True)]


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    row = median_round(runs, "wall_s")
    row["wall_s_rounds"] = [r["wall_s"] for r in runs]
    if any("image_identical" in r for r in runs):
        row["image_identical"] = all(r.get("image_identical", False) for r in runs)
    return row


def _main() -> None:
    spec = json.loads(sys.argv[1])
    bench = AdjointBench(cfg=rtm.RTMConfig(**spec["cfg"]), regime=spec["regime"],
                         workdir=Path(spec["root"]), cold_io=spec["cold_io"])
    sys.stdout.write(json.dumps(run_row(spec["name"], bench)) + "\n")


if __name__ == "__main__":
    _main()
