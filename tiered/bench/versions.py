"""``tiered bench versions``: commits of a state dict, what they write, and rolling back.

A state dict of ``state_mib`` in ``leaves`` float32 leaves is committed ``commits`` times,
with ``changed`` of its leaves changed before each commit, over a host tier holding a few
versions above a directory tier (fsync'd). Two layouts:

* ``keys``: each leaf under its own key; a step stores the leaves that changed, and the
  commit carries the others from the parent (what a code that knows what it changed does);
* ``state``: the whole state dict under one key, stored whole each step; the commit's
  write skips the leaves whose content equals the kept value's (leaf dedup).

Each row reports, in the same run:

* ``written_vs_full``: bytes the directory's files hold against a full copy per commit;
* ``blocking_vs_copy``: the caller's time per step in ``store`` + ``commit`` against
  ``np.copyto`` of the changed leaves into preallocated, pre-faulted buffers (the physical
  limit of keeping them). Each step starts once the previous version is durable: a run
  that commits faster than its disk writes a version is bound by the disk instead, and
  its stores wait for room;
* rolling back: ``checkout`` of an older version and reading every leaf back (as views,
  ``copy=False``), from host memory (the median of five rollbacks) and from disk (a fresh
  cache, the files' pages dropped), against ``np.load`` of the same leaves saved with
  ``np.save`` and ``torch.load`` of the same state dict saved with ``torch.save``, read the
  same way.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tiered
from tiered.bench.common import MiB
from tiered.console import counter


@dataclasses.dataclass(frozen=True)
class VersionsConfig:
    """The state committed and how it changes."""

    state_mib: int = 64
    leaves: int = 32
    commits: int = 100
    changed: float = 0.10

    @property
    def leaf_elems(self) -> int:
        """float32 elements per leaf."""
        return self.state_mib * MiB // self.leaves // 4

    @property
    def per_step(self) -> int:
        """Leaves changed before each commit (at least one)."""
        return max(1, round(self.changed * self.leaves))


def _drop_pages(root: Path) -> None:
    """Drop the page-cache pages of every file under ``root`` (a cold read follows)."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


class _Run:
    """One layout's commits over a fresh cache in ``root``."""

    def __init__(self, cfg: VersionsConfig, layout: str, root: Path) -> None:
        self.cfg, self.layout, self.root = cfg, layout, root
        rng = np.random.default_rng(0)
        self.state = {f"layer{i:02d}": rng.standard_normal(cfg.leaf_elems, dtype=np.float32)
                      for i in range(cfg.leaves)}
        self.rng = rng

    def tiers(self) -> list[Any]:
        host = 6 * self.cfg.state_mib * MiB  # a few versions stay in host memory
        return [tiered.HostTier(host), tiered.DirectoryTier(self.root / "bb")]

    def commits(self, bar: Any) -> dict[str, Any]:
        """Commit ``commits`` times; return the blocking and copy times and bytes written."""
        cfg = self.cfg
        buffers = {name: np.empty_like(a) for name, a in self.state.items()}
        for b in buffers.values():
            b.fill(0)  # preallocated and faulted, as the host tier is
        blocking, copies = [], []
        self.cache = cache = tiered.Cache(self.tiers())
        names = sorted(self.state)
        self._store(cache, names)  # the first version holds everything
        version = cache.commit(meta={"step": 0}).wait()
        first = cache.stats().tiers["directory"].bytes_written
        for step in range(1, cfg.commits):
            version.wait()  # a run commits no faster than its disk takes a version
            changed = sorted(self.rng.choice(names, cfg.per_step, replace=False).tolist())
            for name in changed:
                self.state[name] = self.state[name] + np.float32(1)
            started = time.perf_counter()
            for name in changed:
                np.copyto(buffers[name], self.state[name])
            copies.append(time.perf_counter() - started)
            started = time.perf_counter()
            self._store(cache, changed)
            version = cache.commit(meta={"step": step})
            blocking.append(time.perf_counter() - started)
            bar.update()
        drained = _timed(cache.flush)
        stats = cache.stats().tiers["directory"]
        full = cfg.commits * cfg.state_mib * MiB
        return {"layout": self.layout, "commits": cfg.commits, "state_mib": cfg.state_mib,
                "leaves": cfg.leaves, "changed_per_commit": cfg.per_step,
                "written_mib": stats.bytes_written / MiB,
                "written_vs_full": stats.bytes_written / full,
                "first_commit_mib": first / MiB,
                "blocking_ms": statistics.median(blocking) * 1e3,
                "copy_changed_ms": statistics.median(copies) * 1e3,
                "blocking_vs_copy": statistics.median(blocking) / statistics.median(copies),
                "drain_after_s": drained}

    def _store(self, cache: Any, names: list[str]) -> None:
        if self.layout == "keys":
            for name in names:
                cache.store(name, self.state[name])
        else:
            cache.store("state", self.state)

    def read_all(self, cache: Any, version: Any) -> None:
        """Check ``version`` out and read every leaf back (views where they are in memory)."""
        cache.checkout(version)
        if self.layout == "keys":
            for name in self.state:
                cache.revisit(name, copy=False)
        else:
            cache.revisit("state", copy=False)


def _peers(state: dict[str, np.ndarray], root: Path) -> dict[str, Callable[[], Any]]:
    """Save ``state`` as np.save files and a torch.save file; return how to load each."""
    import torch

    npdir = root / "npy"
    npdir.mkdir()
    for name, array in state.items():
        np.save(npdir / f"{name}.npy", array)
    torch.save({k: torch.from_numpy(v) for k, v in state.items()}, root / "state.pt")
    return {"np.load": lambda: [np.load(npdir / f"{n}.npy") for n in state],
            "torch.load": lambda: torch.load(root / "state.pt", weights_only=True)}


def _rollbacks(run: _Run, root: Path) -> dict[str, float]:
    """Seconds to roll back to an older version from host and from disk, and the peers'."""
    cache = run.cache
    versions = cache.versions()
    held = versions[-3]  # recent: its objects are still in host memory
    times = []
    for _ in range(5):  # roll back, then forward again (untimed), five times
        times.append(_timed(lambda: run.read_all(cache, held)))
        run.read_all(cache, versions[-1])
    out = {"checkout_host_s": statistics.median(times)}
    cache.close()
    peers = _peers({k: v.copy() for k, v in run.state.items()}, root)
    for name, load in peers.items():  # from the page cache, as the host version is in memory
        load()
        out[f"{name}_warm_s"] = statistics.median(_timed(load) for _ in range(3))
    _drop_pages(root)
    again = tiered.Cache(run.tiers())  # nothing in host memory: every leaf from disk
    try:
        out["checkout_disk_s"] = _timed(lambda: run.read_all(again, held.id))
    finally:
        again.close()
    for name, load in peers.items():
        _drop_pages(root)
        out[f"{name}_cold_s"] = _timed(load)
    return out


def run(cfg: VersionsConfig, workdir: Path | None = None) -> list[dict[str, Any]]:
    """One row per layout (see the module docstring)."""
    rows = []
    with counter(2 * (cfg.commits - 1), "versions") as bar:
        for layout in ("keys", "state"):
            with tempfile.TemporaryDirectory(dir=workdir) as tmp:
                one = _Run(cfg, layout, Path(tmp))
                row = one.commits(bar)
                back = _rollbacks(one, Path(tmp))
                row.update(back)
                row["host_vs_torch_load"] = back["torch.load_warm_s"] / back["checkout_host_s"]
                row["host_vs_np_load"] = back["np.load_warm_s"] / back["checkout_host_s"]
                row["disk_vs_torch_load"] = back["torch.load_cold_s"] / back["checkout_disk_s"]
                row["disk_vs_np_load"] = back["np.load_cold_s"] / back["checkout_disk_s"]
                rows.append(row)
    return rows
