"""Copies between caller values and an entry payload (a contiguous byte region).

A *region* is a 1-D ``uint8`` numpy array (host memory) or a 1-D ``uint8`` torch tensor
(device memory) exactly ``meta.nbytes`` long; each leaf sits at ``leaf.offset``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from tiered.values import LeafInfo, ValueMeta, structure

log = logging.getLogger(__name__)


def _torch() -> Any:
    import torch

    return torch


def torch_dtype(name: str) -> Any:
    """Return the torch dtype named like ``"torch.float32"``."""
    return getattr(_torch(), name.removeprefix("torch."))


def is_torch_region(region: Any) -> bool:
    """Return whether ``region`` is a torch tensor (a device-tier region)."""
    return not isinstance(region, np.ndarray)


def _src_bytes(arr: Any, leaf: LeafInfo) -> Any:
    """Return the leaf's bytes as a flat uint8 array/tensor (copying only if not contiguous)."""
    if leaf.kind == "torch":
        return arr.contiguous().reshape(-1).view(_torch().uint8)
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


def host_leaf_view(region: np.ndarray, leaf: LeafInfo) -> np.ndarray:
    """Return a typed numpy view of a numpy/npscalar leaf inside a host region."""
    raw = region[leaf.offset: leaf.offset + leaf.nbytes]
    return raw.view(np.dtype(leaf.dtype)).reshape(leaf.shape)


def leaf_bytes(region: np.ndarray, leaf: LeafInfo) -> np.ndarray:
    """Return the raw bytes of ``leaf`` inside a host region (a view)."""
    return region[leaf.offset: leaf.offset + leaf.nbytes]


def write_leaves(region: Any, meta: ValueMeta, arrays: list[Any]) -> None:
    """Copy the caller's leaves into ``region`` (the one copy a capture costs)."""
    for leaf, arr in zip(meta.leaves, arrays, strict=True):
        if leaf.nbytes == 0:
            continue
        dst = region[leaf.offset: leaf.offset + leaf.nbytes]
        if is_torch_region(region):
            src = _src_bytes(arr, leaf)
            dst.copy_(src if leaf.kind == "torch" else _torch().from_numpy(src))
        elif leaf.kind == "torch":
            _torch().from_numpy(dst).copy_(_src_bytes(arr, leaf))
        else:  # numpy into host: copyto handles strides without a temporary
            np.copyto(host_leaf_view(region, leaf), arr, casting="no")


def copy_region(dst: Any, src: Any) -> None:
    """Copy a whole payload between two regions of any kind (host/device)."""
    if not is_torch_region(dst) and not is_torch_region(src):
        np.copyto(dst, src)
        return
    torch = _torch()
    d = dst if is_torch_region(dst) else torch.from_numpy(dst)
    s = src if is_torch_region(src) else torch.from_numpy(src)
    d.copy_(s)


def _target_device(leaf: LeafInfo) -> str:
    if leaf.device.startswith("cuda") and not _torch().cuda.is_available():
        log.warning("leaf %s was stored from %s but CUDA is not available; returning it on "
                    "the CPU", leaf.path or "<root>", leaf.device)
        return "cpu"
    return leaf.device


def read_leaf(region: Any, leaf: LeafInfo) -> Any:
    """Return a fresh copy of one leaf, as the type, dtype, shape and device it was stored."""
    raw = region[leaf.offset: leaf.offset + leaf.nbytes]
    if leaf.kind == "torch":
        torch = _torch()
        out = torch.empty(leaf.shape, dtype=torch_dtype(leaf.dtype), device=_target_device(leaf))
        if leaf.nbytes:
            src = raw if is_torch_region(region) else torch.from_numpy(raw)
            out.reshape(-1).view(torch.uint8).copy_(src)
        return out
    out_np = np.empty(leaf.shape, dtype=np.dtype(leaf.dtype))
    if leaf.nbytes:
        flat = out_np.reshape(-1).view(np.uint8)
        if is_torch_region(region):
            _torch().from_numpy(flat).copy_(raw)
        else:
            np.copyto(flat, raw)
    return out_np[()] if leaf.kind == "npscalar" else out_np


def read_leaves(region: Any, meta: ValueMeta, into: list[Any] | None = None) -> list[Any]:
    """Return fresh copies of every leaf of a payload, or fill the arrays of ``into``."""
    if into is None:
        return [read_leaf(region, leaf) for leaf in meta.leaves]
    for leaf, dst in zip(meta.leaves, into, strict=True):
        if leaf.nbytes:
            raw = region[leaf.offset: leaf.offset + leaf.nbytes]
            if leaf.kind == "torch" or is_torch_region(region):
                torch = _torch()
                d = dst if leaf.kind == "torch" else torch.from_numpy(dst)
                d.reshape(-1).view(torch.uint8).copy_(
                    raw if is_torch_region(region) else torch.from_numpy(raw))
            else:
                np.copyto(dst.reshape(-1).view(np.uint8), raw)
    return into


class _Borrowed:
    """Owner of read-only views into a host region: numpy makes it their ``base``.

    While any view (or a view of a view) is alive, so is this object; a
    :func:`weakref.finalize` on it tells the cache when the last one is gone.
    """

    def __init__(self, region: np.ndarray) -> None:
        self._region = region  # keeps the tier's mapping alive under the views
        self.__array_interface__ = {"shape": (len(region),), "typestr": "|u1", "version": 3,
                                    "data": (region.ctypes.data, True)}  # read-only


def can_borrow(region: Any, meta: ValueMeta) -> bool:
    """Whether :func:`borrow_leaves` can view this payload (host region, numpy leaves)."""
    return not is_torch_region(region) and all(leaf.kind != "torch" for leaf in meta.leaves)


def borrow_leaves(region: np.ndarray, meta: ValueMeta) -> tuple[list[Any], object]:
    """Return read-only views of every leaf of a host payload, and the views' owner.

    Numpy scalars come back as values (copies). The owner lives as long as any view.
    """
    owner = _Borrowed(region)
    base = np.asarray(owner)
    leaves: list[Any] = []
    for leaf in meta.leaves:
        view = base[leaf.offset: leaf.offset + leaf.nbytes].view(
            np.dtype(leaf.dtype)).reshape(leaf.shape)
        leaves.append(view[()] if leaf.kind == "npscalar" else view)
    return leaves, owner


def check_out(meta: ValueMeta, out_meta: ValueMeta, arrays: list[Any]) -> None:
    """Check that ``out`` (flattened) can receive a value of ``meta`` in place.

    Raises
    ------
    ValueError
        Naming the first leaf whose kind, dtype or shape differs, or that is not
        contiguous.
    """
    if structure(out_meta.spec) != structure(meta.spec):
        raise ValueError("out= is not built like the stored value (containers, keys and "
                         f"arrays must match): stored {structure(meta.spec)}")
    for want, got, arr in zip(meta.leaves, out_meta.leaves, arrays, strict=True):
        where = want.path or "<root>"
        if (want.kind, want.dtype, tuple(want.shape)) != (got.kind, got.dtype, tuple(got.shape)):
            raise ValueError(f"out= leaf {where}: stored {want.kind} {want.dtype} "
                             f"{tuple(want.shape)}, got {got.kind} {got.dtype} "
                             f"{tuple(got.shape)}")
        if want.kind == "npscalar" or not _contiguous(arr):
            raise ValueError(f"out= leaf {where} must be a contiguous array")


def _contiguous(arr: Any) -> bool:
    if isinstance(arr, np.ndarray):
        return bool(arr.flags.c_contiguous and arr.flags.writeable)
    return bool(arr.is_contiguous())
