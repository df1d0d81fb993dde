"""``tiered demo``: a small adjoint-style run through tiered, and the same with np.save/np.load.

Forward pass: a 2-D diffusion state advances step by step and every state is stored. Backward
pass: the states are revisited in reverse and folded into an adjoint-like accumulator. The
same arithmetic then runs with synchronous ``np.save`` + fsync / ``np.load`` per step, and the
two results must agree bit for bit.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tiered
from tiered.progress import Progress
from tiered.sizes import format_size


@dataclasses.dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """Problem size and the host tier's share of the history."""

    steps: int = 40
    n: int = 1024  # state is n x n float32 (4 MiB at 1024)
    host_fraction: float = 0.25


def forward_step(u: np.ndarray, out: np.ndarray) -> None:
    """One explicit diffusion step into ``out`` (periodic boundaries)."""
    np.copyto(out, u)
    out *= 0.6
    for shift, axis in ((1, 0), (-1, 0), (1, 1), (-1, 1)):
        out += 0.1 * np.roll(u, shift, axis=axis)


def adjoint_fold(acc: np.ndarray, state: np.ndarray) -> None:
    """Use a state in the backward pass: accumulate its sensitivity contribution."""
    acc *= 0.99
    acc += state * state


def _run(steps: int, u0: np.ndarray, store: Callable[[int, np.ndarray], None],
         load: Callable[[int], np.ndarray], before_backward: Callable[[], None]) -> dict[str, Any]:
    u, nxt = u0.copy(), np.empty_like(u0)
    bar = Progress(steps, "forward")
    started = time.perf_counter()
    for step in range(steps):
        store(step, u)
        forward_step(u, nxt)
        u, nxt = nxt, u
        bar.step()
    bar.done()
    forward_s = time.perf_counter() - started
    before_backward()
    acc = np.zeros_like(u0)
    bar = Progress(steps, "backward")
    started = time.perf_counter()
    for step in reversed(range(steps)):
        adjoint_fold(acc, load(step))
        bar.step()
    bar.done()
    return {"forward_s": forward_s, "backward_s": time.perf_counter() - started, "result": acc}


def _with_tiered(cfg: DemoConfig, u0: np.ndarray, root: Path) -> dict[str, Any]:
    cap = int(cfg.host_fraction * cfg.steps * u0.nbytes) + (1 << 20)
    cache = tiered.Cache([tiered.HostTier(cap), tiered.DirectoryTier(root / "burst-buffer"),
                          tiered.HDF5Tier(root / "pfs")], eviction="score", prefetch="reverse")
    out = _run(cfg.steps, u0, lambda s, u: cache.store(("state", s), u),
               lambda s: cache.revisit(("state", s), copy=False), lambda: None)
    started = time.perf_counter()
    cache.flush()
    out["flush_s"] = time.perf_counter() - started
    out["stats"] = cache.stats()
    cache.close()
    return out


def _with_numpy(cfg: DemoConfig, u0: np.ndarray, root: Path) -> dict[str, Any]:
    root.mkdir()

    def save(step: int, u: np.ndarray) -> None:
        with open(root / f"{step}.npy", "wb") as fh:
            np.save(fh, u)
            fh.flush()
            os.fsync(fh.fileno())

    return _run(cfg.steps, u0, save, lambda s: np.load(root / f"{s}.npy"), lambda: None)


def run(cfg: DemoConfig | None = None, workdir: str | None = None) -> dict[str, Any]:
    """Run both variants; return timings and statistics (and check they agree)."""
    cfg = cfg or DemoConfig()
    u0 = np.random.default_rng(0).standard_normal((cfg.n, cfg.n), dtype=np.float32)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        mine = _with_tiered(cfg, u0, Path(tmp))
        theirs = _with_numpy(cfg, u0, Path(tmp) / "npy")
    if not np.array_equal(mine["result"], theirs["result"]):
        raise AssertionError("tiered and np.save/np.load runs disagree")
    return {"config": cfg, "history_bytes": cfg.steps * u0.nbytes, "tiered": mine,
            "numpy": theirs}


def summary(res: dict[str, Any]) -> str:
    """Human-readable closing summary."""
    mine, theirs, stats = res["tiered"], res["numpy"], res["tiered"]["stats"]
    hits = ", ".join(f"{n}={s.hits}" for n, s in stats.tiers.items())
    t_total = mine["forward_s"] + mine["backward_s"]
    n_total = theirs["forward_s"] + theirs["backward_s"]
    return "\n".join([
        f"history: {res['config'].steps} states, {format_size(res['history_bytes'])}",
        f"tiered:           forward {mine['forward_s']:.2f} s, backward "
        f"{mine['backward_s']:.2f} s (then flush {mine['flush_s']:.2f} s to durability)",
        f"np.save/np.load:  forward {theirs['forward_s']:.2f} s, backward "
        f"{theirs['backward_s']:.2f} s (each save fsync'd)",
        f"speed-up of forward+backward: {n_total / t_total:.2f}x",
        f"revisit hits per tier: {hits}; stall {stats.stall_s:.3f} s, store blocked "
        f"{stats.blocked_s:.3f} s",
        f"prefetch (score eviction, reverse predictor): {stats.prefetches} issued, "
        f"{stats.prefetch_hits} hits, {stats.late_prefetches} late, "
        f"{stats.wasted_prefetches} wasted",
        f"bytes stored {format_size(stats.bytes_stored)}; results identical: yes",
    ])
