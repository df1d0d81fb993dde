"""Run checkpoint_schedules schedules with their RAM and DISK levels in tiered caches.

Any of its schedules works: Revolve, H-Revolve, multistage, mixed, disk-revolve, two-level.

The model is the usual one of those schedules: ``forward(state, n)`` advances the state from
the start of step ``n`` to the start of step ``n + 1`` and returns a *new* state; the adjoint
over step ``n`` needs the forward state at the start of step ``n``
(``adjoint(adj, state_n, n) -> adj``), so a step's restart data and its adjoint
dependencies are the same state.

The schedule knows the future exactly: the reads it will ask for are worked out first (a dry
run of a copy of the schedule) and fed to the cache as hints a few reads ahead, so data
coming back from a slow level is already moving up when the schedule asks for it.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from tiered.cache import Cache

Forward = Callable[[Any, int], Any]
Adjoint = Callable[[Any, Any, int], Any]


def _cs() -> Any:
    try:
        import checkpoint_schedules
    except ImportError as exc:
        raise ImportError("run_schedule needs checkpoint_schedules: pip install "
                          "'tiered[adjoint]'") from exc
    return checkpoint_schedules


@dataclasses.dataclass
class ScheduleResult:
    """What a schedule run produced and cost."""

    adjoint: Any
    forward_steps: int = 0
    recomputed_steps: int = 0
    reads: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    stores: int = 0
    forward_s: float = 0.0
    backward_s: float = 0.0


class _Interpreter:
    """Carries out a schedule's actions; with ``dry=True`` only records the reads."""

    def __init__(self, schedule: Any, n_steps: int, *, dry: bool,
                 storage: Mapping[str, Cache] | None = None, forward: Forward | None = None,
                 adjoint: Adjoint | None = None, state: Any = None, adj: Any = None,
                 hint_window: int = 8, planned: list[tuple[str, int]] | None = None) -> None:
        self.cs = _cs()
        self.schedule, self.n_steps, self.dry = schedule, n_steps, dry
        self.storage, self.forward_fn, self.adjoint_fn = storage or {}, forward, adjoint
        self.state, self.n = state, 0
        self.deps: dict[int, Any] = {}
        self.result = ScheduleResult(adjoint=adj)
        self.window, self.planned = hint_window, planned or []
        self._levels = {self.cs.StorageType.RAM: "ram", self.cs.StorageType.DISK: "disk"}
        self._ended_forward = False

    # -------------------------------------------------------------- storage
    def _level(self, storage: Any) -> str | None:
        return self._levels.get(storage)

    def _store(self, level: str, n: int, state: Any) -> None:
        self.result.stores += 1
        if not self.dry:
            self.storage[level].store((level, n), state)

    def _load(self, level: str, n: int) -> Any:
        self.result.reads.append((level, n))
        if self.dry:
            return None
        value = self.storage[level].revisit((level, n))
        self._hint_ahead()
        return value

    def _hint_ahead(self) -> None:
        done = len(self.result.reads)
        ahead = self.planned[done: done + self.window]
        for level in {lvl for lvl, _ in ahead}:
            self.storage[level].hint([r for r in ahead if r[0] == level])

    # -------------------------------------------------------------- actions
    def run(self) -> ScheduleResult:
        if not self.dry:
            self._hint_ahead()
        cs = self.cs
        handlers: dict[type, Callable[[Any], None]] = {
            cs.Forward: self._forward, cs.Reverse: self._reverse, cs.Copy: self._copy,
            cs.Move: self._copy, cs.EndForward: self._end_forward}
        started = time.perf_counter()
        for action in self.schedule:
            if isinstance(action, cs.EndReverse):
                break
            handler = handlers.get(type(action))
            if handler is None:
                raise TypeError(f"unexpected checkpointing action {action!r}")
            handler(action)
        self.result.backward_s = time.perf_counter() - started - self.result.forward_s
        return self.result

    def _forward(self, action: Any) -> None:
        if action.n0 != self.n:
            raise RuntimeError(f"schedule asks to advance from step {action.n0}, the forward "
                               f"is at step {self.n}")
        started = time.perf_counter()
        n1 = min(action.n1, self.n_steps)
        level = self._level(action.storage)
        for n in range(action.n0, n1):
            keep_ics = action.write_ics and n == action.n0
            if level is not None and (keep_ics or action.write_adj_deps):
                self._store(level, n, self.state)
            elif action.write_adj_deps:  # WORK: kept for the adjoint right away
                self.deps[n] = self.state
            if not self.dry:
                assert self.forward_fn is not None
                self.state = self.forward_fn(self.state, n)
            self.result.forward_steps += 1
            self.result.recomputed_steps += self._ended_forward
            self.n = n + 1
        if self.schedule.max_n is None and n1 == self.n_steps:
            self.schedule.finalize(self.n_steps)
        if not self._ended_forward:
            self.result.forward_s += time.perf_counter() - started

    def _end_forward(self, action: Any) -> None:
        self._ended_forward = True

    def _reverse(self, action: Any) -> None:
        for n in range(action.n1 - 1, action.n0 - 1, -1):
            if n not in self.deps:
                raise RuntimeError(f"schedule reverses over step {n} without its forward data")
            if not self.dry:
                assert self.adjoint_fn is not None
                self.result.adjoint = self.adjoint_fn(self.result.adjoint, self.deps[n], n)
            if action.clear_adj_deps:
                del self.deps[n]

    def _copy(self, action: Any) -> None:
        src, dst = self._level(action.from_storage), action.to_storage
        if src is None:
            raise TypeError(f"unexpected source level in {action!r}")
        moving = isinstance(action, self.cs.Move)
        if dst is not self.cs.StorageType.NONE:
            value = self._load(src, action.n)
            if dst is self.cs.StorageType.WORK:
                self.state, self.n = value, action.n
                self.deps[action.n] = value
            else:
                level = self._level(dst)
                assert level is not None
                self._store(level, action.n, value)
        if moving and not self.dry:
            self.storage[src].discard((src, action.n))


def planned_reads(schedule: Any, n_steps: int) -> list[tuple[str, int]]:
    """Return the ``(level, step)`` reads ``schedule`` will make, in order (dry run of a copy).

    Raises
    ------
    ValueError
        If the schedule has already started (its future is no longer all there).
    """
    # checkpoint_schedules 1.0.4 keeps its generator in ``iter`` while ``is_running`` looks
    # for ``_iter`` (always False), so check both
    if schedule.is_running or hasattr(schedule, "iter"):
        raise ValueError("the schedule has already yielded actions; pass a fresh one")
    return _Interpreter(copy.deepcopy(schedule), n_steps, dry=True).run().reads


def run_schedule(schedule: Any, storage: Cache | Mapping[str, Cache], *, n_steps: int,
                 state: Any, forward: Forward, adjoint: Adjoint, adjoint_state: Any,
                 hint_window: int = 8) -> ScheduleResult:
    """Run a fresh checkpoint_schedules ``schedule`` with its storage in tiered caches.

    Parameters
    ----------
    schedule : checkpoint_schedules.CheckpointSchedule
        Any schedule: Revolve, HRevolve, MultistageCheckpointSchedule,
        MixedCheckpointSchedule, DiskRevolve, PeriodicDiskRevolve,
        TwoLevelCheckpointSchedule, SingleMemoryStorageSchedule, SingleDiskStorageSchedule.
    storage : tiered.Cache or mapping
        One cache for both levels (keys ``("ram", n)`` and ``("disk", n)``), or
        ``{"ram": fast_cache, "disk": durable_cache}`` to keep each level on its own tiers.
    n_steps : int
        Forward steps.
    state, adjoint_state
        The initial forward state and the adjoint's final-time condition.
    forward, adjoint
        ``forward(state, n) -> new state``; ``adjoint(adj, state_n, n) -> adj``.
    hint_window : int
        How many of the schedule's future reads are hinted ahead.

    Returns
    -------
    ScheduleResult
        The adjoint at step 0, step counts, the reads made, timings.
    """
    if n_steps < 1:
        raise ValueError(f"n_steps must be at least 1, got {n_steps}")
    levels = storage if isinstance(storage, Mapping) else {"ram": storage, "disk": storage}
    missing = {"ram", "disk"} - set(levels)
    if missing:
        raise ValueError(f"storage mapping lacks {sorted(missing)}; give 'ram' and 'disk'")
    plan = planned_reads(schedule, n_steps)
    return _Interpreter(schedule, n_steps, dry=False, storage=levels, forward=forward,
                        adjoint=adjoint, state=state, adj=adjoint_state,
                        hint_window=hint_window, planned=plan).run()
