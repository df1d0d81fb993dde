"""Values: split a nested structure into array leaves and a JSON spec, and put it back.

A stored value is a *spec* (the tree, with scalars inline and array leaves by index) plus a
list of :class:`LeafInfo` describing each array's dtype, shape, device and its offset in the
entry's contiguous payload. Every tier stores that payload and nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections import OrderedDict
from typing import Any

import numpy as np

ALIGN = 64  # leaf alignment inside a payload: cache line, and what fast reads want
_SCALARS = (bool, int, float, str, type(None))


@dataclasses.dataclass(frozen=True)
class LeafInfo:
    """One array leaf of a value.

    Attributes
    ----------
    kind : str
        ``"numpy"``, ``"torch"`` or ``"npscalar"`` (a numpy scalar, stored as a 0-d array).
    dtype : str
        ``numpy.dtype.str`` for numpy leaves, ``str(torch.dtype)`` for torch leaves.
    shape : tuple of int
    offset : int
        Byte offset of the leaf inside the entry payload (a multiple of :data:`ALIGN`).
    nbytes : int
    device : str
        ``"cpu"`` or a torch device string such as ``"cuda:0"``.
    path : str
        Where the leaf sits in the value, e.g. ``"['model']['w']"``; used in messages.
    """

    kind: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    device: str = "cpu"
    path: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (fields are plain values: no deep copy)."""
        return dict(vars(self))

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LeafInfo:
        """Build from :meth:`to_json` output."""
        return cls(**{**obj, "shape": tuple(obj["shape"])})


@dataclasses.dataclass(frozen=True)
class ValueMeta:
    """The spec and leaves of one stored value; ``nbytes`` is the payload size."""

    spec: Any
    leaves: tuple[LeafInfo, ...]
    nbytes: int

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        return {"spec": self.spec, "leaves": [leaf.to_json() for leaf in self.leaves],
                "nbytes": self.nbytes}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ValueMeta:
        """Build from :meth:`to_json` output."""
        leaves = tuple(LeafInfo.from_json(leaf) for leaf in obj["leaves"])
        return cls(spec=obj["spec"], leaves=leaves, nbytes=int(obj["nbytes"]))


def _torch() -> Any:
    import torch  # torch is optional: only values that contain tensors need it

    return torch


def _is_tensor(obj: object) -> bool:
    mod = type(obj).__module__
    return mod.startswith("torch") and type(obj).__name__ in ("Tensor", "Parameter")


class _Flattener:
    def __init__(self) -> None:
        self.arrays: list[Any] = []
        self.leaves: list[LeafInfo] = []
        self.offset = 0

    def add(self, arr: Any, kind: str, dtype: str, device: str, path: str) -> dict[str, Any]:
        nbytes = int(arr.nbytes) if kind != "torch" else int(arr.numel() * arr.element_size())
        shape = tuple(int(n) for n in arr.shape)
        self.leaves.append(LeafInfo(kind, dtype, shape, self.offset, nbytes, device, path))
        self.arrays.append(arr)
        self.offset += -(-nbytes // ALIGN) * ALIGN
        return {"t": "leaf", "i": len(self.leaves) - 1}

    def visit(self, obj: Any, path: str) -> Any:
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject or obj.dtype.fields is not None:
                raise TypeError(f"value{path}: numpy dtype {obj.dtype} is not supported "
                                "(object and structured dtypes cannot be stored)")
            return self.add(obj, "numpy", obj.dtype.str, "cpu", path)
        if isinstance(obj, np.generic) and not isinstance(obj, (np.object_, np.void)):
            return self.add(np.asarray(obj), "npscalar", obj.dtype.str, "cpu", path)
        if _is_tensor(obj):
            return self.tensor(obj, path)
        if isinstance(obj, _SCALARS):
            if isinstance(obj, float) and not math.isfinite(obj):
                return {"t": "float", "v": repr(obj)}
            return obj
        if type(obj) in (dict, OrderedDict):
            items = [[self.dict_key(k, path), self.visit(v, f"{path}[{k!r}]")]
                     for k, v in obj.items()]
            if type(obj) is dict:
                return {"t": "dict", "v": items}
            # torch state_dicts are OrderedDicts carrying per-module versions in _metadata
            return {"t": "odict", "v": items, "m": _jsonable(getattr(obj, "_metadata", None))}
        if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
            kind = "list" if isinstance(obj, list) else "tuple"
            return {"t": kind, "v": [self.visit(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
        raise TypeError(f"value{path or ''}: cannot store {type(obj).__module__}."
                        f"{type(obj).__qualname__}; leaves must be numpy arrays, torch tensors "
                        "or plain scalars/strings inside dict/list/tuple")

    def tensor(self, t: Any, path: str) -> dict[str, Any]:
        if t.is_sparse or t.layout != _torch().strided:
            raise TypeError(f"value{path}: only dense (strided) torch tensors can be stored")
        if t.is_quantized:
            raise TypeError(f"value{path}: quantized torch tensors are not supported")
        t = t.resolve_conj().resolve_neg()
        return self.add(t.detach(), "torch", str(t.dtype), str(t.device), path)

    @staticmethod
    def dict_key(key: Any, path: str) -> Any:
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise TypeError(f"value{path}: dict key {key!r} must be str or int")
        return key if isinstance(key, str) else {"t": "int", "v": key}


def _jsonable(obj: Any) -> Any:
    try:
        json.dumps(obj)
    except (TypeError, ValueError):
        return None
    return obj


def flatten(value: Any) -> tuple[ValueMeta, list[Any]]:
    """Split ``value`` into its meta and the list of array leaves (not copied).

    Raises
    ------
    TypeError
        Naming the path of the first leaf that cannot be stored.
    """
    if type(value) is np.ndarray:  # a bare array, as adjoint states are: one meta per kind
        return _array_meta(value.dtype, value.shape), [value]
    return _flatten(value)


def _flatten(value: Any) -> tuple[ValueMeta, list[Any]]:
    flat = _Flattener()
    spec = flat.visit(value, "")
    json.dumps(spec)  # every spec must round-trip through a manifest
    return ValueMeta(spec, tuple(flat.leaves), flat.offset), flat.arrays


@functools.lru_cache(maxsize=64)
def _array_meta(dtype: np.dtype[Any], shape: tuple[int, ...]) -> ValueMeta:
    """Return the meta of a bare numpy array of this dtype and shape (shared: it is frozen).

    A store runs this per call; building it afresh (two frozen dataclasses, a JSON check)
    cost more than the rest of the bookkeeping of a 1 MiB store here. It is the general
    path's meta of a stand-in: a broadcast view of one element, which holds no memory.
    """
    return _flatten(np.broadcast_to(np.empty((), dtype), shape))[0]


def structure(spec: Any) -> Any:
    """Return the containers and leaves of a spec with scalar values left out."""
    if not isinstance(spec, dict):
        return type(spec).__name__
    tag = spec["t"]
    if tag in ("list", "tuple"):
        return tag, tuple(structure(v) for v in spec["v"])
    if tag in ("dict", "odict"):
        return tag, tuple((json.dumps(k), structure(v)) for k, v in spec["v"])
    return (tag, spec["i"]) if tag == "leaf" else tag


def unflatten(spec: Any, leaves: list[Any]) -> Any:
    """Rebuild a value from its spec and the already materialised leaves."""
    if not isinstance(spec, dict):
        return spec
    tag = spec["t"]
    if tag == "leaf":
        return leaves[spec["i"]]
    if tag == "float":
        return float(spec["v"])
    if tag == "int":
        return spec["v"]
    if tag == "list":
        return [unflatten(v, leaves) for v in spec["v"]]
    if tag == "tuple":
        return tuple(unflatten(v, leaves) for v in spec["v"])
    if tag == "dict":
        return {unflatten(k, leaves): unflatten(v, leaves) for k, v in spec["v"]}
    if tag == "odict":
        out = OrderedDict((unflatten(k, leaves), unflatten(v, leaves)) for k, v in spec["v"])
        if spec.get("m") is not None:
            out._metadata = spec["m"]  # type: ignore[attr-defined]
        return out
    raise ValueError(f"unknown spec tag {tag!r}")
