"""``tiered demo``: an adjoint-style run through tiered, and the same through np.save/np.load.

Forward pass: a 2-D diffusion state advances step by step and every state is checkpointed.
Backward pass: the states are read back in reverse and folded into an adjoint-like
accumulator. Both runs keep every checkpoint durable on local disk: run A saves each state
with ``np.save`` and fsync (what a solver does without tiered); run B stores it in a
:class:`~tiered.Cache` whose host tier holds a quarter of the history and whose directory
tier fsyncs each state in the background. The two results must agree bit for bit.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tiered
from tiered.console import progress
from tiered.sizes import format_size

Announce = Callable[[str], object]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """Problem size and the host tier's share of the history."""

    steps: int = 100
    n: int = 1024  # state is n x n float32 (4 MiB at 1024)
    host_fraction: float = 0.25
    rounds: int = 3  # A and B alternate this many times; the median round is reported
    # (with an even count, the upper of the two middle rounds: the one less kind to B)

    def __post_init__(self) -> None:
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"steps must be a positive integer, got {self.steps!r}")
        if not isinstance(self.n, int) or self.n < 2:
            raise ValueError(f"n must be an integer >= 2, got {self.n!r}")
        if not isinstance(self.rounds, int) or self.rounds < 1:
            raise ValueError(f"rounds must be a positive integer, got {self.rounds!r}")
        if not 0 < self.host_fraction <= 1:
            raise ValueError(f"host_fraction must be in (0, 1], got {self.host_fraction!r}")


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


def _run(label: str, steps: int, u0: np.ndarray, save: Callable[[int, np.ndarray], None],
         load: Callable[[int], np.ndarray]) -> dict[str, Any]:
    """Forward then backward; time the passes and the solver's time inside save/load."""
    u, nxt = u0.copy(), np.empty_like(u0)
    blocked = 0.0
    started = time.perf_counter()
    for step in progress(range(steps), f"{label} forward"):
        t = time.perf_counter()
        save(step, u)
        blocked += time.perf_counter() - t
        forward_step(u, nxt)
        u, nxt = nxt, u
    forward_s = time.perf_counter() - started
    acc = np.zeros_like(u0)
    started = time.perf_counter()
    for step in progress(reversed(range(steps)), f"{label} backward", total=steps):
        t = time.perf_counter()
        state = load(step)
        blocked += time.perf_counter() - t
        adjoint_fold(acc, state)
    return {"forward_s": forward_s, "backward_s": time.perf_counter() - started,
            "blocked_s": blocked, "result": acc}


def _total(run: dict[str, Any]) -> float:
    """Seconds until the solver is done and every state is durable."""
    return float(run["forward_s"] + run["backward_s"] + run.get("flush_s", 0.0))


def _with_tiered(cfg: DemoConfig, u0: np.ndarray, tier_root: Path) -> dict[str, Any]:
    cap = int(cfg.host_fraction * cfg.steps * (u0.nbytes + 4096)) + (1 << 20)
    cache = tiered.Cache([tiered.HostTier(cap), tiered.DirectoryTier(tier_root)],
                         eviction="score", prefetch="reverse")
    buf = np.empty_like(u0)
    out = _run("tiered", cfg.steps, u0, lambda s, u: cache.store(("state", s), u),
               lambda s: cache.revisit(("state", s), out=buf))
    started = time.perf_counter()
    cache.flush()
    out["flush_s"] = time.perf_counter() - started
    out["stats"] = cache.stats()
    out["host_bytes"] = cap
    cache.close()
    return out


def _with_numpy(cfg: DemoConfig, u0: np.ndarray, root: Path) -> dict[str, Any]:
    root.mkdir()

    def save(step: int, u: np.ndarray) -> None:
        with open(root / f"{step}.npy", "wb") as fh:
            np.save(fh, u)
            fh.flush()
            os.fsync(fh.fileno())

    return _run("np.save", cfg.steps, u0, save, lambda s: np.load(root / f"{s}.npy"))


def run(cfg: DemoConfig | None = None, workdir: str | os.PathLike[str] | None = None,
        announce: Announce | None = None) -> dict[str, Any]:
    """Run both variants; return timings and statistics (and check they agree).

    With ``workdir``, tiered's directory tier is left in a new folder there (its path is
    ``result["tier_path"]``); without it everything goes to a temporary directory that is
    removed. ``announce`` gets a line saying which run is which before they start.
    """
    cfg = cfg or DemoConfig()
    say = announce or (lambda line: None)
    u0 = np.random.default_rng(0).standard_normal((cfg.n, cfg.n), dtype=np.float32)
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(dir=workdir, prefix="tiered-demo-scratch-") as tmp:
        tier_root = (Path(tempfile.mkdtemp(prefix="tiered-demo-", dir=workdir))
                     if workdir is not None else Path(tmp) / "directory-tier")
        say(f"tiered demo: {cfg.steps} states of {cfg.n}x{cfg.n} float32 "
            f"({format_size(cfg.steps * u0.nbytes)} of history), forward then backward, "
            f"{cfg.rounds} rounds of each run, alternating")
        say("  run A  np.save + fsync per step, np.load in reverse (no tiered)")
        say(f"  run B  tiered: a host tier for {cfg.host_fraction:.0%} of the history, "
            f"then a directory tier at {tier_root}")
        for index in range(cfg.rounds):
            theirs = _with_numpy(cfg, u0, Path(tmp) / f"npy-{index}")
            shutil.rmtree(Path(tmp) / f"npy-{index}")
            if index:  # the last round's tier stays (with workdir) for tiered info
                shutil.rmtree(tier_root)
            pairs.append((theirs, _with_tiered(cfg, u0, tier_root)))
    for theirs, mine in pairs:
        if not np.array_equal(mine["result"], theirs["result"]):
            raise AssertionError("tiered and np.save/np.load runs disagree")
    ratios = [_total(mine) / _total(theirs) for theirs, mine in pairs]
    theirs, mine = pairs[sorted(range(len(pairs)), key=ratios.__getitem__)[len(pairs) // 2]]
    return {"config": cfg, "history_bytes": cfg.steps * u0.nbytes, "tiered": mine,
            "numpy": theirs, "ratios": ratios,
            "tier_path": tier_root if workdir is not None else None}


def summary(res: dict[str, Any]) -> str:
    """Human-readable closing summary: both runs' timings side by side, and the regime."""
    mine, theirs, stats = res["tiered"], res["numpy"], res["tiered"]["stats"]
    rows = [("forward pass", "forward_s"), ("backward pass", "backward_s"),
            ("solver inside save/load", "blocked_s")]
    lines = [f"{'seconds (median round)':<28}{'A  np.save/np.load':>20}{'B  tiered':>12}"]
    lines += [f"{label:<28}{theirs[key]:>20.2f}{mine[key]:>12.2f}" for label, key in rows]
    lines.append(f"{'then flush to durable':<28}{'-':>20}{mine['flush_s']:>12.2f}")
    hits = ", ".join(f"{name} {s.hits}" for name, s in stats.tiers.items())
    lines += [
        "regime: durable checkpoints on local disk. A fsyncs every np.save before the next "
        "step; B fsyncs in the background while the solver computes. Reads come from "
        "memory or the OS page cache in both.",
        f"until done and durable (the median round): B took "
        f"{_total(mine) / _total(theirs):.2f}x A's time ({_total(theirs):.2f} s -> "
        f"{_total(mine):.2f} s; every round: "
        f"{', '.join(f'{r:.2f}x' for r in res['ratios'])})",
        f"the solver's time inside save/load: B took "
        f"{mine['blocked_s'] / max(theirs['blocked_s'], 1e-9):.2f}x A's",
        f"tiered: revisits served per tier: {hits}; {stats.prefetch_hits} by prefetch; "
        f"stall {stats.stall_s:.3f} s; store blocked {stats.blocked_s:.3f} s",
        "results identical: yes",
    ]
    if res["tier_path"] is not None:
        lines.append(f"tiered's directory tier is kept at {res['tier_path']}: try "
                     f"`tiered info {res['tier_path']}`")
    return "\n".join(lines)
