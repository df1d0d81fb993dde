"""Adjoint solvers: store states by step in the forward pass, revisit them in reverse.

::

    ckpt = Checkpointer(cache, every=4)
    for step in range(n):                       # forward
        ckpt.store(step, u)                     # kept if step % every == 0
        u = forward(u)
    for step in reversed(range(n)):             # backward
        u_step = ckpt.revisit(step, recompute=forward)
        lam = adjoint(lam, u_step)

The checkpointer tells the cache the backward order itself (no hints to write): at the
first revisit of a backward sweep it hints the stored steps in reverse. A step that was not
stored is recomputed from the nearest stored step below it; the states recomputed on the way
are stored too, so the rest of that segment is served from memory (each segment is
recomputed once). A revisited state is discarded at once (``consume=True``), freeing its
space in every tier, and a new forward sweep simply stores again.

:func:`run_schedule` (module :mod:`tiered.adapters.schedules`) runs checkpoint_schedules
schedules over a cache and :class:`~tiered.adapters.revolve.RevolveStorage` is a pyrevolve
storage backed by one.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
from typing import Any

from tiered.cache import Cache

log = logging.getLogger(__name__)

Step = Callable[[Any], Any]  # state at step n -> state at step n + 1


class Checkpointer:
    """Store and revisit adjoint states by step number over a :class:`tiered.Cache`.

    Parameters
    ----------
    cache : tiered.Cache
        Where the states live. ``prefetch="reverse"`` and ``write_back="lazy"`` suit it
        (the newest states are then revisited from memory and never written); hints are
        sent either way.
    every : int
        Keep every ``every``-th state (step 0 always); the others are recomputed.
    name : str
        Key prefix, so several checkpointers can share a cache.
    consume : bool
        Discard a state once :meth:`revisit` has returned it.

    Notes
    -----
    Not thread-safe: one solver thread drives a checkpointer.
    """

    def __init__(self, cache: Cache, *, every: int = 1, name: str = "state",
                 consume: bool = True) -> None:
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.cache, self.every, self.name, self.consume = cache, every, name, consume
        self._order: list[int] = []  # the stored steps, ascending
        self._backward = False
        self.recomputed_steps = 0

    def key(self, step: int) -> tuple[str, int]:
        """Return the cache key of ``step``."""
        return (self.name, step)

    def store(self, step: int, state: Any) -> bool:
        """Capture the state at ``step`` if it is a checkpoint step; return whether it was.

        Storing after a backward sweep starts the next forward sweep.
        """
        _check_step(step)
        if step % self.every:
            return False
        self._put(step, state)
        self._backward = False
        return True

    def _put(self, step: int, state: Any) -> None:
        self.cache.store(self.key(step), state)
        if self._position(step) is None:
            bisect.insort(self._order, step)  # appends in a forward sweep

    def revisit(self, step: int, *, recompute: Step | None = None, out: Any = None,
                copy: bool = True) -> Any:
        """Return the state at ``step``; recompute it from a lower checkpoint if needed.

        Parameters
        ----------
        step : int
            The step whose state is wanted.
        recompute : callable, optional
            ``recompute(state_n) -> state_n_plus_1``; needed when ``step`` was not stored.
        out : optional
            Passed to :meth:`tiered.Cache.revisit` (read into your own arrays).
        copy : bool
            ``False``: read-only views of the cache's memory where possible (see
            :meth:`tiered.Cache.revisit`); a consumed state's memory is freed once they are
            all gone.

        Raises
        ------
        KeyError
            If neither ``step`` nor a lower step to recompute it from is stored.
        """
        _check_step(step)
        if not self._backward:  # set once the hint went through (it may raise first)
            self.cache.hint([self.key(s) for s in reversed(self._order)])
            self._backward = True
        if self._position(step) is None:
            self._recompute_to(step, recompute)
        value = self.cache.revisit(self.key(step), out=out, copy=copy)
        if self.consume:
            self.discard(step)
        return value

    def _recompute_to(self, step: int, recompute: Step | None) -> None:
        below = bisect.bisect_left(self._order, step)
        if below == 0:
            held = ", ".join(map(str, self._order[:8])) + (", ..." if len(self._order) > 8
                                                           else "")
            raise KeyError(f"step {step} is not held (never stored, or revisited and "
                           "discarded) and no stored step below it can recompute it "
                           f"(stored: [{held}])")
        base = self._order[below - 1]
        if recompute is None:
            raise KeyError(f"step {step} was not stored (every={self.every}); pass "
                           "recompute=forward_step to rebuild it from step "
                           f"{base}")
        state = self.cache.revisit(self.key(base))
        for s in range(base + 1, step + 1):  # keep the segment: it is revisited next
            state = recompute(state)
            self.recomputed_steps += 1
            self._put(s, state)
        log.debug("recomputed steps %d..%d from %d", base + 1, step, base)

    def discard(self, step: int) -> None:
        """Forget the state at ``step`` now (its space is freed in every tier)."""
        at = self._position(step)
        if at is not None:  # the cache first: if it raises, the step is still held here
            self.cache.discard(self.key(step))
            del self._order[at]

    def _position(self, step: int) -> int | None:
        """Where ``step`` is in the stored steps, or ``None`` if it is not held."""
        at = bisect.bisect_left(self._order, step)
        return at if at < len(self._order) and self._order[at] == step else None

    @property
    def stored_steps(self) -> list[int]:
        """The steps held now, ascending."""
        return list(self._order)


def _check_step(step: int) -> None:
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
