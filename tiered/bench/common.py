"""Shared benchmark helpers: timing, result rows, JSON output, a temp directory choice."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MiB = 1 << 20


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    """Median wall seconds of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def filled(nbytes: int, seed: int = 0) -> np.ndarray:
    """Return a float32 array of ``nbytes`` with non-trivial, touched contents."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(nbytes // 4, dtype=np.float32)


def write_fsync(path: Path, data: np.ndarray) -> None:
    """Write ``data`` the raw-baseline way: one new file, write, fsync, close."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data).cast("B")  # type: ignore[arg-type]
        done = 0
        while done < len(view):
            done += os.write(fd, view[done: done + (1 << 30)])
        os.fsync(fd)
    finally:
        os.close(fd)


def clear_dir(path: Path) -> None:
    """Remove every file in ``path`` (benchmarks write fresh files each round)."""
    for child in path.iterdir():
        if child.is_file():
            child.unlink()


def machine() -> dict[str, Any]:
    """Describe the machine the numbers were measured on."""
    return {"python": platform.python_version(), "numpy": np.__version__,
            "cpus": os.cpu_count(), "platform": platform.platform()}


def save_json(name: str, rows: list[dict[str, Any]], path: str | None,
              extra: dict[str, Any] | None = None) -> Path:
    """Write a benchmark's rows (and the machine description) as JSON; return the path."""
    out = Path(path or f"tiered-bench-{name}.json")
    payload = {"benchmark": name, "machine": machine(), "rows": rows, **(extra or {})}
    out.write_text(json.dumps(payload, indent=2))
    return out


def median_round(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Return a copy of the round whose ``key`` is the median (the lower one of an even count).

    A whole round, not per-field medians, so the row's fields stay consistent.
    """
    return dict(sorted(runs, key=lambda r: r[key])[(len(runs) - 1) // 2])

