"""The planner: the cache's decisions and the state behind them, with no threads, locks or I/O.

It owns the index (each key's entry and its copies per tier, which copies are clean), is
the only caller of the eviction policies and the predictor, and keeps the forecast and a
logical clock. An executor tells it what happened (a copy added or dropped, an access, a
store, revisit, discard or hint) and asks it what to do (which copies to evict, what comes
next); it carries the answer out itself: memory, files, threads and errors are its own.

Not thread-safe: the threaded cache calls it under its metadata lock.
"""

from __future__ import annotations

import copy as _copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tiered.index import Copy, Entry
from tiered.keys import Key
from tiered.lineage import Lineage, Obj
from tiered.policies.base import (
    NEVER,
    EventContext,
    EvictionPolicy,
    PolicySpec,
    PredictContext,
    PredictorSpec,
    Signal,
    VictimContext,
    make_eviction,
    make_predictor,
)
from tiered.room import hopeless, next_tier
from tiered.tiers.model import TierModel
from tiered.writeback import Pending

HORIZON_KEYS = 256  # the fewest keys a forecast looks ahead (see Planner.horizon_keys)
EVICT_AHEAD = 3  # stores' worth of room a store that must evict frees (see ahead_bytes)


def _policies(spec: PolicySpec, count: int) -> list[EvictionPolicy]:
    first = make_eviction(spec)
    if isinstance(spec, str) or first is not spec:
        return [first] + [make_eviction(spec) for _ in range(count - 1)]
    return [first] + [_copy.deepcopy(first) for _ in range(count - 1)]  # one state per tier


class Planner:
    """Decisions over a list of modelled tiers (see the module docstring).

    Parameters
    ----------
    models : sequence of TierModel
        What each tier declares, fastest first.
    eviction, prefetch
        As for :class:`tiered.Cache`.
    prefetch_depth : int
        Prefetched copies held ahead of the reader; the forecast looks at least 16 times as
        far (and at least :data:`HORIZON_KEYS` keys).
    horizon : float, optional
        Bytes of coming revisits the eviction forecast looks at; by default what the memory
        tiers hold (later keys are "far" alike).
    horizon_keys : float, optional
        The most keys a forecast holds; by default max(:data:`HORIZON_KEYS`, 16 *
        ``prefetch_depth``), so that its cost does not grow with the history.
    """

    def __init__(self, models: Sequence[TierModel], eviction: PolicySpec,
                 prefetch: PredictorSpec, *, prefetch_depth: int,
                 horizon: float | None = None, horizon_keys: float | None = None) -> None:
        self.models = list(models)
        self.memory = [i for i, m in enumerate(self.models) if m.memory]
        self.persistent = frozenset(i for i, m in enumerate(self.models) if m.persistent)
        # per tier, the persistent tiers below it: a copy there makes one here durable
        self.persistent_below = [frozenset(p for p in self.persistent if p > i)
                                 for i in range(len(self.models))]
        self.policies = _policies(eviction, len(self.models))
        self.predictor = make_predictor(prefetch)
        self.index: dict[Key, Entry] = {}
        self.nbytes: dict[Key, int] = {}  # payload bytes per indexed key (forecast sizes)
        self.resident: list[dict[Key, Entry]] = [{} for _ in self.models]  # copies per tier
        # copies with a copy deeper down (clean: what eviction may choose from), per tier
        self.clean: list[dict[Key, Entry]] = [{} for _ in self.models]
        # what all memory tiers hold: the most a prefetch brings up ahead of the reader
        self.memory_bytes = sum(self.models[i].capacity_bytes or 0 for i in self.memory)
        # the eviction forecast looks this far ahead: anything later than what all memory
        # tiers hold is "far" alike (ties then go by recency)
        self.horizon: float = self.memory_bytes if horizon is None else horizon
        # ...and at most this many keys ahead: a forecast is recomputed per event, so its
        # cost must not grow with the number of states memory holds; further keys are
        # "far" alike too. Far more than prefetching reads ahead (prefetch_depth).
        self.horizon_keys: float = (max(HORIZON_KEYS, 16 * prefetch_depth)
                                    if horizon_keys is None else horizon_keys)
        self.lineage = Lineage()  # the versions, and which objects they name
        self.objects: dict[Obj, Entry] = {}  # every object a kept version names
        self.pending = Pending(len(self.models))  # lazy write-back: stores not yet draining
        self.writing = [0] * len(self.models)  # bytes reserved by writes in flight, per tier
        self.clock = 0.0
        self._signals = 0  # predictor events so far: the forecast is memoised on it
        self._forecast: tuple[int, list[Key], dict[Key, int]] = (-1, [], {})

    # ----------------------------------------------------------------- events
    def tick(self) -> float:
        """Advance the logical clock; return the new time."""
        self.clock += 1.0
        return self.clock

    def signal(self, signal: Signal, key: Key | None, *, nbytes: int = 0,
               hints: tuple[Key, ...] = ()) -> None:
        """Tell the predictor of a store, revisit, discard, hint or rollback."""
        self.predictor.observe(signal, key, ctx=EventContext(nbytes=nbytes, now=self.tick(),
                                                             hints=hints))
        self._signals += 1

    def put(self, entry: Entry) -> None:
        """Index ``entry`` as its key's current version."""
        self.index[entry.key] = entry
        self.nbytes[entry.key] = entry.meta.nbytes

    def pop(self, key: Key) -> Entry:
        """Remove ``key``'s current entry from the index and return it."""
        del self.nbytes[key]
        return self.index.pop(key)

    def add_copy(self, entry: Entry, copy: Copy) -> None:
        """Record a new copy of ``entry`` (the tier's policy sees it inserted)."""
        entry.copies[copy.tier] = copy
        slot = entry.slot
        self.resident[copy.tier][slot] = entry
        deepest = max(entry.copies)
        for tier in entry.copies:
            if tier < deepest:
                self.clean[tier][slot] = entry
        self.policies[copy.tier].observe("insert", slot, ctx=EventContext(
            nbytes=entry.meta.nbytes, now=self.tick()))

    def drop_copy(self, entry: Entry, tier: int) -> Copy:
        """Forget ``entry``'s copy in ``tier`` and return it (its bytes are the caller's)."""
        copy = entry.copies.pop(tier)
        key = entry.slot
        if self.resident[tier].get(key) is entry:
            del self.resident[tier][key]
        if self.clean[tier].get(key) is entry:
            del self.clean[tier][key]
        deepest = max(entry.copies, default=-1)
        if 0 <= deepest < tier and self.clean[deepest].get(key) is entry:  # none below now
            del self.clean[deepest][key]
        self.policies[tier].observe("remove", key, ctx=EventContext(now=self.tick()))
        return copy

    def retire(self, old: Entry, *, delete_files: bool) -> list[int]:
        """``old`` left the key space (discarded or replaced); return the tiers whose copies go now.

        If a kept version names it, it stays whole: filed under another slot (its copies
        stay, clean ones evictable like any other), nothing goes. Otherwise it is gone:
        its unpinned copies go now, a pinned one when its last pin is released.
        ``delete_files``: whether its files go too, or stay for the next version until that
        one is home.
        """
        if self.lineage.named((old.key, old.version)):
            self.refile(old, ("~version", old.key, old.version))
            return []
        old.gone = True
        old.delete_files = delete_files
        self.pending.discard(old)
        return [tier for tier, copy in old.copies.items() if copy.pins == 0]

    def refile(self, entry: Entry, slot: Any) -> None:
        """File ``entry``'s copies under ``slot`` (the policies see them removed and inserted)."""
        old = entry.slot
        if old == slot:
            return
        entry.slot = slot
        for tier in entry.copies:  # the same copies, clean or not as before: moved
            for where in (self.resident[tier], self.clean[tier]):
                if where.get(old) is entry:
                    del where[old]
                    where[slot] = entry
            policy = self.policies[tier]
            policy.observe("remove", old, ctx=EventContext(now=self.tick()))
            policy.observe("insert", slot, ctx=EventContext(nbytes=entry.meta.nbytes,
                                                            now=self.tick()))

    def named(self, entries: Mapping[Key, Entry]) -> None:
        """Note that a new version names each of ``entries`` (the key space at a commit)."""
        for entry in entries.values():
            self.objects[(entry.key, entry.version)] = entry

    def unnamed(self, freed: Sequence[Obj]) -> list[Entry]:
        """Forget objects no kept version names any more; return those not current.

        The caller retires what is returned (with their files): nothing refers to them.
        """
        out: list[Entry] = []
        for obj in freed:
            entry = self.objects.pop(obj, None)
            if entry is not None and self.index.get(entry.key) is not entry:
                out.append(entry)
        return out

    def reinstate(self, entry: Entry) -> None:
        """Make ``entry`` (a kept version's object) its key's current entry again.

        The key's previous entry must have been popped and retired first.
        """
        self.refile(entry, entry.key)
        self.put(entry)

    def dedup_base(self, entry: Entry, dst: int) -> Entry | None:
        """Return the kept value whose leaves ``entry``'s copy in ``dst`` may refer to.

        Only in its home tier (where copies are never evicted, so a reference cannot
        dangle) and only with versions (an unversioned value keeps no old values).
        """
        base = entry.base
        if (base is None or dst != entry.home or dst not in base.copies
                or not self.lineage.named((base.key, base.version))):
            return None
        record = base.copies[dst].record
        return base if record is not None and record.content is not None else None

    def write_started(self, tier: int, nbytes: int) -> None:
        """Count ``nbytes`` reserved in persistent ``tier`` by a write not yet committed."""
        self.writing[tier] += nbytes

    def write_ended(self, tier: int, nbytes: int) -> None:
        """Stop counting a write's reservation (the tier counts its file now, or it failed)."""
        self.writing[tier] -= nbytes

    def access(self, entry: Entry, tier: int) -> None:
        """Record that a revisit was served from ``entry``'s copy in ``tier``."""
        self.policies[tier].observe("access", entry.slot, ctx=EventContext(
            nbytes=entry.meta.nbytes, now=self.tick()))

    # ----------------------------------------------------------------- decisions
    def sizes(self) -> Mapping[Key, int]:
        """Return every indexed key with its payload bytes."""
        return self.nbytes

    def predict(self, budget: float) -> list[Key]:
        """Return the coming revisits within ``budget`` bytes, soonest first."""
        keys = self.predictor.predict(ctx=PredictContext(
            sizes=self.nbytes, budget_bytes=budget, now=self.clock,
            max_keys=self.horizon_keys))
        if len(keys) > self.horizon_keys:  # a custom predictor may not stop there itself
            keys = keys[:int(self.horizon_keys)]
        return keys

    def forecast_keys(self) -> list[Key]:
        """Return the coming revisits within the horizon, soonest first (memoised)."""
        if self._forecast[0] != self._signals:
            keys = self.predict(self.horizon)
            self._forecast = (self._signals, keys, {k: i for i, k in enumerate(keys)})
        return self._forecast[1]

    def next_use(self) -> dict[Key, int]:
        """Return each forecast key's position (memoised until the next event)."""
        self.forecast_keys()
        return self._forecast[2]

    def candidates(self, tier: int, need: int, limit: float) -> tuple[list[Key], VictimContext]:
        """Return the copies of ``tier`` that may be evicted and what the policy knows.

        Clean, unpinned copies; with ``limit`` >= 0 only those forecast after that position.
        """
        next_use = self.next_use()
        candidates: list[Key] = []
        durable: set[Key] = set()
        consumed: set[Key] = set()
        below = self.persistent_below[tier]
        for key, entry in self.clean[tier].items():  # one pass: this runs per eviction
            copies = entry.copies
            if copies[tier].pins or (limit >= 0 and next_use.get(key, NEVER) <= limit):
                continue
            candidates.append(key)
            if not below.isdisjoint(copies):
                durable.add(key)
            if entry.consumed:
                consumed.add(key)
        return candidates, VictimContext(need_bytes=need, now=self.clock, next_use=next_use,
                                         durable=durable, consumed=consumed)

    def prefetch_order(self) -> Iterator[tuple[int, Entry]]:
        """Yield the forecast entries no memory tier holds, with their forecast positions.

        Soonest first, and only while the forecast so far fits in the memory tiers (a
        prefetch beyond that would push out what is needed sooner). Read lazily: what the
        caller brings up while iterating is skipped.
        """
        total = 0
        for rank, key in enumerate(self.forecast_keys()):
            entry = self.index[key]
            total += entry.meta.nbytes
            if total > self.memory_bytes:
                return
            if not entry.gone and not entry.in_memory(self.memory):
                yield rank, entry

    def placement(self, nbytes: int, *, spill: bool) -> list[tuple[int, bool]]:
        """Return where a new value of ``nbytes`` may land, in order, and whether to wait.

        Every tier that can hold it, fastest first. The first waits for room unless
        ``spill`` (then the value goes on to the next tier with room); the last always
        waits. Empty when no tier can ever hold the value.
        """
        fits = [i for i, m in enumerate(self.models) if m.fits(nbytes)]
        last = len(fits) - 1
        return [(i, (n == 0 and not spill) or n == last) for n, i in enumerate(fits)]

    def ahead_bytes(self, tier: int, nbytes: int) -> int:
        """Return the bytes a store that must evict frees beyond its own, for the next ones.

        :data:`EVICT_AHEAD` stores like it, within a sixteenth of the tier: with many small
        states one scan serves several stores; with large ones nothing more goes.
        """
        return min(EVICT_AHEAD * nbytes, (self.models[tier].capacity_bytes or 0) // 16)

    def home(self, nbytes: int) -> int:
        """Return the deepest tier that can hold ``nbytes``: where an entry is durable."""
        return max(i for i, m in enumerate(self.models) if m.fits(nbytes))

    def short(self, tier: int, used: int, nbytes: int, freed: int = 0) -> bool:
        """Whether persistent ``tier`` lacks room for ``nbytes`` more (as the tier counts).

        ``used``: what its files take now; ``freed``: what evictions chosen since free.
        """
        model = self.models[tier]
        return (model.capacity_bytes is not None and used + self.writing[tier] - freed
                + model.footprint(nbytes) > model.capacity_bytes)

    def dirtied(self, entry: Entry, *, eager: bool) -> list[Entry]:
        """Return what must start draining now that a store left ``entry`` dirty.

        ``entry`` itself when ``eager`` or its copy is persistent; otherwise (lazy
        write-back) it waits in memory, and the oldest waiting entries go once its tier
        needs the room (:meth:`due`). Once the cache has versions, eager write-back waits
        too, for the next commit or flush: only those make a store durable at restart,
        and a drain started under the stores that precede a commit competes with them
        for the interpreter.
        """
        tier = min(entry.copies)
        if (eager and not self.lineage) or tier in self.persistent:
            return [entry]
        self.pending.add(entry, tier, self.models[tier].footprint(entry.meta.nbytes))
        return self.due(tier)

    def due(self, tier: int, need: int = 0) -> list[Entry]:
        """Return the lazy drains memory ``tier`` needs now (``need``: bytes wanted now)."""
        capacity = self.models[tier].capacity_bytes
        if capacity is None or not len(self.pending):
            return []
        return self.pending.due(tier, capacity, need)

    def drain_target(self, entry: Entry) -> int | None:
        """Return the tier a dirty ``entry`` drains into next (``None``: none can take it)."""
        return next_tier(self.models, entry)

    def hopeless(self, tier: int, nbytes: int) -> str | None:
        """Say why ``nbytes`` can never fit ``tier`` by waiting, or return ``None``."""
        return hopeless(self.models, self.resident, tier, nbytes)

    def victims(self, tier: int, need: int, limit: float = -1.0, ahead: int = 0) -> list[Key]:
        """Return the slots whose copies in ``tier`` to evict, in order (none: nothing may go).

        A slot is the key of a current entry (see :attr:`Entry.slot`); ``resident[tier]``
        maps it to the entry.

        One victim for ``need`` bytes, then more while their bytes add up to at most
        ``ahead`` (room for the stores to come, from the same scan), stopping at a
        prefetched copy not yet read. ``limit``: as for :meth:`candidates`.
        """
        candidates, ctx = self.candidates(tier, need, limit)
        policy = self.policies[tier]
        chosen: list[Key] = []
        while candidates:
            victim = policy.victim(candidates, ctx=ctx)
            if victim is None or victim not in candidates:
                break
            if chosen:  # one more, for the stores to come
                entry = self.resident[tier][victim]
                ahead -= entry.meta.nbytes
                copy = entry.copies[tier]
                if ahead < 0 or (copy.prefetched and not copy.used):
                    break  # a prefetch not yet read is not given up for a store to come
            chosen.append(victim)
            if ahead <= 0:
                break
            candidates.remove(victim)
        return chosen
