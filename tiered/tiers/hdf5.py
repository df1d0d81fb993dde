"""HDF5 tier: one HDF5 file per object version, on a parallel file system.

h5py holds the GIL (and its own global lock) for its calls, so it only writes metadata: each
leaf becomes a contiguous dataset allocated early with no fill, h5py closes the file, and the
payload bytes go to the datasets' file offsets with ``os.pwrite`` (which releases the GIL).
The files are ordinary HDF5: ``h5py.File(path)["leaves/0"][...]`` reads a leaf back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tiered.tiers.files import pread_into, pwrite_all
from tiered.tiers.persistent import PersistentTier
from tiered.tiers.records import Offsets, Record
from tiered.values import LeafInfo, ValueMeta

MANIFEST = "tiered_manifest"


def _import_h5py() -> Any:
    try:
        import h5py
    except ImportError as exc:
        raise ImportError("HDF5Tier needs h5py: pip install 'tiered[hdf5]'") from exc
    return h5py


def _h5_dtype(leaf: LeafInfo) -> np.dtype[Any]:
    """Choose the dataset type: the leaf's own for plain numbers, raw bytes otherwise."""
    if leaf.kind != "torch":
        dt = np.dtype(leaf.dtype)
        if dt.kind in "iuf" and dt.isnative:
            return dt
    return np.dtype(np.uint8)


def _h5_shape(leaf: LeafInfo, dtype: np.dtype[Any]) -> tuple[int, ...]:
    return leaf.shape if dtype != np.uint8 or leaf.kind == "numpy" and \
        np.dtype(leaf.dtype) == np.uint8 else (leaf.nbytes,)


class HDF5Tier(PersistentTier):
    """Durable HDF5 files, the last tier of the hierarchy.

    Parameters
    ----------
    path : str or os.PathLike
        Directory that holds the tier's ``.h5`` files; created if missing.
    capacity : int, str or None
        Bytes allowed; ``None`` (the default) for unlimited.
    name : str
        Name used in statistics and messages.
    drop_pages, sync : bool
        See :class:`~tiered.tiers.persistent.PersistentTier`.
    """

    kind = "hdf5"
    suffix = ".h5"
    overhead_bytes = 32 * 1024  # an HDF5 file's own structures, and the manifest

    def __init__(self, path: str | os.PathLike[str], capacity: int | str | None = None, *,
                 name: str = "hdf5", drop_pages: bool = False, sync: bool = True) -> None:
        self._h5py = _import_h5py()
        super().__init__(path, capacity=capacity, name=name, drop_pages=drop_pages,
                         sync=sync)

    def _create_leaf(self, group: Any, index: int, leaf: LeafInfo) -> int | None:
        h5py = self._h5py
        dtype = _h5_dtype(leaf)
        shape = _h5_shape(leaf, dtype)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.CONTIGUOUS)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        space = h5py.h5s.create_simple(shape) if shape else h5py.h5s.create(h5py.h5s.SCALAR)
        dsid = h5py.h5d.create(group.id, str(index).encode(), h5py.h5t.py_create(dtype),
                               space, dcpl=dcpl)
        offset = dsid.get_offset()
        return None if offset is None else int(offset)

    def _write_file(self, tmp: str, manifest: dict[str, Any], meta: ValueMeta,
                    region: np.ndarray, skip: Sequence[tuple[int, int]] = ()
                    ) -> tuple[int, Offsets]:
        h5py = self._h5py
        with h5py.File(tmp, "w", alignment_threshold=65536, alignment_interval=4096) as f:
            group = f.create_group("leaves")
            offsets = [self._create_leaf(group, i, leaf) for i, leaf in enumerate(meta.leaves)]
            f.create_dataset(MANIFEST, data=self.encode_manifest(manifest).decode())
        fd = os.open(tmp, os.O_WRONLY)
        try:
            skipped = {start for start, _ in skip}  # each a whole leaf
            for leaf, offset in zip(meta.leaves, offsets, strict=True):
                if offset is not None and leaf.nbytes and leaf.offset not in skipped:
                    pwrite_all(fd, region[leaf.offset: leaf.offset + leaf.nbytes], offset)
            self.sync_file(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        return size, tuple(offsets)

    def _read_manifest(self, path: Path) -> tuple[dict[str, Any], Offsets]:
        try:
            with self._h5py.File(path, "r") as f:
                manifest: dict[str, Any] = json.loads(f[MANIFEST][()].decode())
                leaves = f["leaves"]
                offsets = [leaves[str(i)].id.get_offset()
                           for i in range(len(manifest["meta"]["leaves"]))]
        except (OSError, KeyError) as exc:
            raise ValueError(f"not a readable tiered HDF5 object: {exc}") from exc
        return manifest, tuple(offsets)

    def _read_payload(self, record: Record, region: np.ndarray) -> None:
        offsets = record.offsets
        if offsets is None:
            offsets = self._read_manifest(record.path)[1]
        assert offsets is not None  # every HDF5 object's leaves have offsets
        fd = os.open(record.path, os.O_RDONLY)
        try:
            for leaf, offset in zip(record.meta.leaves, offsets, strict=True):
                if leaf.nbytes:
                    if offset is None:
                        raise ValueError(f"leaf {leaf.path or '<root>'} has no storage")
                    pread_into(fd, region[leaf.offset: leaf.offset + leaf.nbytes], offset)
        finally:
            os.close(fd)
