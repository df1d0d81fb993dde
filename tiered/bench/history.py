"""``tiered bench history``: cost per ``store``/``revisit`` call as the history grows.

An adjoint with many small states (a 1-D or ODE adjoint, a fine time grid) makes thousands
of calls per sweep; their cost must not grow with the number of states held. Each row runs a
forward pass of ``count`` stores and a backward pass of ``count`` revisits, everything in
host memory, three ways:

* ``limit``: ``np.copyto`` into a pre-faulted pool, a view back (the physical limit);
* ``dict``: ``states[i] = u.copy()`` and ``states.pop(i)`` (what users write);
* ``tiered``: :class:`~tiered.adapters.adjoint.Checkpointer` over a host tier holding it
  all above a directory tier (``write_back="lazy"``: nothing is written),
  ``prefetch="reverse"``, ``revisit(copy=False)``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tiered
from tiered.bench.common import filled
from tiered.console import progress


def _passes(store: Callable[[int, np.ndarray], object], revisit: Callable[[int], object],
            value: np.ndarray, count: int) -> tuple[float, float]:
    """Mean seconds per store call and per revisit call."""
    started = time.perf_counter()
    for i in range(count):
        store(i, value)
    forward = time.perf_counter() - started
    started = time.perf_counter()
    for i in reversed(range(count)):
        revisit(i)
    return forward / count, (time.perf_counter() - started) / count


def _limit(value: np.ndarray, count: int) -> tuple[float, float]:
    pool = np.empty((count, value.size), dtype=value.dtype)
    pool.fill(0)  # pre-faulted, as the host tier is
    return _passes(lambda i, u: np.copyto(pool[i], u), lambda i: pool[i], value, count)


def _dict(value: np.ndarray, count: int) -> tuple[float, float]:
    states: dict[int, np.ndarray] = {}
    return _passes(lambda i, u: states.__setitem__(i, u.copy()), states.pop, value, count)


def _tiered(value: np.ndarray, count: int, workdir: Path | None) -> tuple[float, float]:
    from tiered.adapters.adjoint import Checkpointer

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        host = tiered.HostTier(count * (value.nbytes + 4096))
        cache = tiered.Cache([host, tiered.DirectoryTier(Path(tmp) / "bb", sync=False)],
                             eviction="score", prefetch="reverse", write_back="lazy")
        ckpt = Checkpointer(cache, name="u")
        try:
            return _passes(ckpt.store, lambda i: ckpt.revisit(i, copy=False), value, count)
        finally:
            cache.close(drain=False)


def run(counts: list[int], state_kib: int, workdir: Path | None = None) -> list[dict[str, Any]]:
    """One row per history length, each way side by side; ``growth`` compares the first."""
    value = filled(state_kib << 10)
    rows: list[dict[str, Any]] = []
    for count in progress(counts, "history"):
        limit, naive, ours = _limit(value, count), _dict(value, count), \
            _tiered(value, count, workdir)
        rows.append({"states": count, "state_kib": state_kib,
                     "limit_store_us": limit[0] * 1e6, "limit_revisit_us": limit[1] * 1e6,
                     "dict_store_us": naive[0] * 1e6, "dict_revisit_us": naive[1] * 1e6,
                     "store_us": ours[0] * 1e6, "revisit_us": ours[1] * 1e6,
                     "store_vs_dict": ours[0] / naive[0]})
    first = rows[0]
    for row in rows:  # 1.0: a call costs the same however long the history
        row["store_growth"] = row["store_us"] / first["store_us"]
        row["revisit_growth"] = row["revisit_us"] / first["revisit_us"]
    return rows
