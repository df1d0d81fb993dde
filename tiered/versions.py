"""Public version handles, and comparing values: what ``diff`` and ``compare`` report."""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal

import numpy as np

from tiered.keys import Key
from tiered.lineage import VersionInfo
from tiered.values import flatten

ChangeKind = Literal["added", "removed", "changed", "same"]


class Version:
    """A committed version of a cache's key space (a handle; see :meth:`tiered.Cache.commit`).

    Attributes
    ----------
    id : int
        Its number, unique in the cache's catalog (1, 2, ...).
    parent : int or None
        The version it descends from (the head when it was committed).
    label : str or None
        Its name, unique in the catalog.
    meta : dict
        What the caller attached (JSON-serialisable).
    keys : tuple
        Every key it holds.
    created : float
        When it was committed (seconds since the epoch).
    """

    def __init__(self, info: VersionInfo, done: Future[None]) -> None:
        self._info, self._done = info, done

    id = property(lambda self: self._info.id)
    parent = property(lambda self: self._info.parent)
    label = property(lambda self: self._info.label)
    meta = property(lambda self: dict(self._info.meta))
    keys = property(lambda self: tuple(self._info.objects))
    created = property(lambda self: self._info.created)
    nbytes = property(lambda self: self._info.nbytes)

    @property
    def durable(self) -> bool:
        """Whether its commit record is on disk (every object it names was durable first)."""
        return self._info.durable

    @property
    def failed(self) -> bool:
        """Whether it could not be made durable, or a copy it names is damaged."""
        return self._info.failed

    def wait(self, timeout: float | None = None) -> Version:
        """Block until the version is durable; return it.

        Raises
        ------
        VersionFailedError
            If it failed (a drain or the record's write); the previous version stays latest.
        TimeoutError
            If ``timeout`` seconds pass first.
        TieredError
            If the cache has no persistent tier (its versions live in memory only).
        """
        try:
            self._done.result(timeout)
        except TimeoutError:
            raise TimeoutError(f"version {self.id} not durable after {timeout} s") from None
        return self

    def __repr__(self) -> str:
        state = "failed" if self.failed else "durable" if self.durable else "pending"
        label = f" {self.label!r}" if self.label else ""
        return (f"<Version {self.id}{label} parent={self.parent} "
                f"keys={len(self._info.objects)} {state}>")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and other._info is self._info

    def __hash__(self) -> int:
        return id(self._info)


def describe(info: VersionInfo) -> dict[str, Any]:
    """Return a version as a plain row (for ``tiered versions`` and JSON)."""
    return {"id": info.id, "parent": info.parent, "label": info.label,
            "created": datetime.datetime.fromtimestamp(info.created).isoformat(" ", "seconds"),
            "keys": len(info.objects), "bytes": info.nbytes,
            "state": "failed" if info.failed else "durable" if info.durable else "pending"}


@dataclasses.dataclass(frozen=True)
class LeafChange:
    """How one array leaf differs between two values.

    ``max_abs`` and ``max_rel`` (relative to the largest magnitude in ``a``) and
    ``first_index`` are set for numeric arrays of one shape and dtype; ``note`` says
    otherwise why they differ (shape, dtype, structure).
    """

    path: str
    max_abs: float | None = None
    max_rel: float | None = None
    first_index: tuple[int, ...] | None = None
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Change:
    """How one key differs between two versions (``leaves``: the array leaves that differ)."""

    kind: ChangeKind
    leaves: tuple[LeafChange, ...] = ()
    note: str = ""


def _host(array: Any) -> np.ndarray:
    if isinstance(array, np.ndarray):
        return array
    return np.asarray(array.detach().cpu().numpy())  # a torch tensor


def _leaf_change(path: str, a: np.ndarray, b: np.ndarray) -> LeafChange | None:
    if a.shape != b.shape or a.dtype != b.dtype:
        return LeafChange(path, note=f"{a.dtype}{list(a.shape)} -> {b.dtype}{list(b.shape)}")
    if np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
        return None
    if a.dtype.kind not in "iufcb":
        where = np.argwhere(a != b)
        return LeafChange(path, first_index=tuple(int(i) for i in where[0]) if len(where)
                          else None, note="non-numeric")
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    delta = np.abs(a.astype(wide) - b.astype(wide))
    unequal = ~((a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind in "fc" else (a == b))
    first = tuple(int(i) for i in np.argwhere(unequal)[0])
    scale = float(np.nanmax(np.abs(a.astype(wide)))) if a.size else 0.0
    max_abs = float(np.nanmax(delta)) if np.isfinite(delta).any() else float("nan")
    return LeafChange(path, max_abs=max_abs, max_rel=max_abs / scale if scale else None,
                      first_index=first)


def compare_values(a: Any, b: Any) -> Change:
    """Return how value ``b`` differs from ``a`` (``"same"`` or ``"changed"``)."""
    meta_a, arrays_a = flatten(a)
    meta_b, arrays_b = flatten(b)
    if meta_a.spec != meta_b.spec or len(arrays_a) != len(arrays_b):
        # the tree or its scalars differ: compare the arrays that still line up
        note = "structure or scalars differ"
    else:
        note = ""
    paths = [leaf.path for leaf in meta_a.leaves]
    leaves = tuple(change for path, x, y in zip(paths, arrays_a, arrays_b, strict=False)
                   if (change := _leaf_change(path, _host(x), _host(y))) is not None)
    if not leaves and not note:
        return Change("same")
    return Change("changed", leaves, note)


def diff_objects(a: dict[Key, int], b: dict[Key, int],
                 read_a: Callable[[Key], Any], read_b: Callable[[Key], Any], *,
                 same_store: bool) -> dict[Key, Change]:
    """Compare two key spaces (key -> object version); ``read_*`` read a key's value.

    With ``same_store`` one object version is one value, and is not read to know it.
    """
    out: dict[Key, Change] = {}
    for key in a.keys() | b.keys():
        if key not in b:
            out[key] = Change("removed")
        elif key not in a:
            out[key] = Change("added")
        elif same_store and a[key] == b[key]:
            out[key] = Change("same")
        else:
            out[key] = compare_values(read_a(key), read_b(key))
    return dict(sorted(out.items(), key=lambda kv: str(kv[0])))


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Where two runs first differ (see :func:`compare`).

    ``first``: the ids of the first pair of versions that differ (``None``: none do);
    ``keys``: the keys that differ there; ``compared``: pairs compared.
    """

    first: tuple[int, int] | None
    keys: dict[Key, Change]
    compared: int


def _read(cache: Any, vid: int, key: Key) -> Any:
    return cache.revisit(key, version=vid)


def compare(a: Any, b: Any) -> Comparison:
    """Compare two runs' caches version by version, in commit order.

    The n-th version of ``a`` is compared with the n-th of ``b`` until a pair differs;
    that pair and its differing keys (with per-leaf differences) are returned. A run
    with more versions than the other is compared as far as both go.
    """
    compared = 0
    for va, vb in zip(a.versions(), b.versions(), strict=False):
        compared += 1
        changes = diff_objects(va._info.objects, vb._info.objects,
                               functools.partial(_read, a, va.id),
                               functools.partial(_read, b, vb.id), same_store=a is b)
        differ = {k: c for k, c in changes.items() if c.kind != "same"}
        if differ:
            return Comparison((va.id, vb.id), differ, compared)
    return Comparison(None, {}, compared)
