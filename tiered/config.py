"""Cache configuration: one frozen, keyword-only dataclass, validated at the edge."""

from __future__ import annotations

import dataclasses
from typing import Literal

OnFull = Literal["block", "spill"]
WriteBack = Literal["eager", "lazy"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CacheConfig:
    """How the cache behaves when tiers fill and when it reads back.

    Attributes
    ----------
    on_full : {"block", "spill"}
        When the top tier is full of dirty data: ``"block"`` waits in ``store`` for a drain
        to free room (up to ``full_timeout_s``, then :class:`~tiered.TierFullError`);
        ``"spill"`` writes the value into the next tier with room instead.
    full_timeout_s : float
        Longest wait for room, in seconds (stores and background transfers alike).
    promote : bool
        Copy an entry read from a persistent tier into the fastest memory tier with room.
    prefetch_depth : int
        Most prefetched, not yet revisited copies to hold ahead of the reader. The pump
        refills once the lead falls to half of it, so it recomputes its forecast about once
        per ``prefetch_depth / 2`` revisits instead of on every one.
    write_back : {"eager", "lazy"}
        ``"eager"`` (default) drains every store to its home tier at once: checkpoints
        become durable as soon as the disk allows. ``"lazy"`` drains a store only when its
        memory tier needs the room (the oldest go first, once waiting stores fill half
        of the tier, so that drains keep ahead of the stores) and at
        :meth:`~tiered.Cache.flush`/``close``: for histories that are scratch, such as an
        adjoint's forward states, whose newest part is revisited from memory and never
        needs writing. A crash loses what has not drained.
    """

    on_full: OnFull = "block"
    full_timeout_s: float = 120.0
    promote: bool = True
    prefetch_depth: int = 16
    write_back: WriteBack = "eager"

    def __post_init__(self) -> None:
        if self.on_full not in ("block", "spill"):
            raise ValueError(f"on_full={self.on_full!r}: use 'block' or 'spill'")
        if self.write_back not in ("eager", "lazy"):
            raise ValueError(f"write_back={self.write_back!r}: use 'eager' or 'lazy'")
        if not isinstance(self.prefetch_depth, int) or self.prefetch_depth < 1:
            raise ValueError(f"prefetch_depth must be a positive integer, got "
                             f"{self.prefetch_depth!r}")
        if not self.full_timeout_s > 0:
            raise ValueError(f"full_timeout_s must be > 0 seconds, got {self.full_timeout_s}")
