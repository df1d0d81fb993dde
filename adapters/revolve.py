"""A pyrevolve storage backed by a :class:`tiered.Cache`.

pyrevolve's revolvers copy checkpoints in and out of a storage object through ``save(key,
data_pointers)`` and ``load(key, locations)`` (single-level revolvers) or
``push``/``peek``/``pop`` (multi-level ones, built on the same two). This class keeps each
checkpoint in the cache instead of a preallocated array or a ``.dat`` file, so the
solver's checkpoints drain to disk in the background and come back from the fastest tier::

    revolver = pyrevolve.Revolver(checkpoint, fwd, rev, n_checkpoints, n_timesteps)
    use_tiered(revolver, cache)          # swap its storages; nothing else changes
    revolver.apply_forward(); revolver.apply_reverse()
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from tiered.cache import Cache


def _storage_base() -> Any:
    try:
        from pyrevolve.storage import Storage
    except ImportError as exc:
        raise ImportError("RevolveStorage needs pyrevolve: pip install 'tiered[adjoint]'") \
            from exc
    return Storage


Compression = tuple[Callable[[Any], Any], Callable[[Any], Any]]


def revolve_storage(cache: Cache, size_ckp: int, n_ckp: int, dtype: Any, *,
                    name: str = "pyrevolve", profiler: Any = None,
                    compression: Compression | None = None, wd: float = 0,
                    rd: float = 0) -> Any:
    """Return a pyrevolve ``Storage`` whose checkpoints live in ``cache``.

    Parameters
    ----------
    cache : tiered.Cache
        Where the checkpoints go; ``prefetch="reverse"`` matches revolve's last-in-first-out
        restores.
    size_ckp, n_ckp, dtype
        As for pyrevolve's storages: entries per checkpoint, number of checkpoints, dtype.
    name : str
        Key prefix in the cache (and the storage's name in pyrevolve's profiles).
    compression : (compressor, decompressor), optional
        pyrevolve's compression pair (what ``pyrevolve.compression.init_compression``
        returns): each array is compressed before it reaches the cache, and the cache keeps
        the compressed bytes with the compressor's metadata (shape, dtype and its own).
    wd, rd : float
        Write and read costs, as pyrevolve's storages carry them for H-Revolve.
    """
    base = _storage_base()

    class RevolveStorage(base):  # type: ignore[misc, valid-type]
        """pyrevolve storage over a tiered cache (see :func:`revolve_storage`)."""

        def __init__(self) -> None:
            super().__init__(size_ckp, n_ckp, dtype, profiler, wd=wd, rd=rd, name=name)
            self.cache = cache
            self.compression = compression

        def save(self, key: int, data_pointers: Any) -> None:
            arrays = [np.asarray(p) for p in data_pointers]
            value = arrays if compression is None else [_pack(compression[0](a)) for a in arrays]
            self.cache.store((name, int(key)), value)

        def load(self, key: int, locations: Any) -> None:
            values = self.cache.revisit((name, int(key)))
            if len(values) != len(locations):
                raise ValueError(f"checkpoint {key} holds {len(values)} arrays, "
                                 f"{len(locations)} locations were given")
            for dst, src in zip(locations, values, strict=True):
                if compression is not None:
                    src = np.asarray(compression[1](_unpack(src)))
                np.copyto(dst, src.reshape(dst.shape))

    return RevolveStorage()


def _pack(compressed: Any) -> dict[str, Any]:
    """Turn a pyrevolve ``CompressedObject`` into a value the cache stores.

    Its metadata (shape, dtype and whatever the compressor adds, such as blosc's chunk
    sizes) is kept whole, pickled as pyrevolve's own byte storage keeps it.
    """
    return {"data": np.frombuffer(compressed.data, dtype=np.uint8),
            "metadata": np.frombuffer(compressed.pickled_metadata, dtype=np.uint8)}


def _unpack(value: dict[str, Any]) -> Any:
    """Invert :func:`_pack` (the decompressor gets the object pyrevolve's own would)."""
    from pyrevolve.compression import CompressedObject

    return CompressedObject(value["data"].tobytes(),
                            metadata=pickle.loads(value["metadata"].tobytes()))


def use_tiered(revolver: Any, cache: Cache, *, name: str = "pyrevolve") -> list[Any]:
    """Give each of a pyrevolve revolver's storage levels a storage backed by ``cache``.

    Single-level revolvers have one level; a ``MultiLevelRevolver`` (H-Revolve) has one per
    storage it was given, each keeping its number of checkpoints and costs, so the
    schedule planned for them still holds. Level ``k`` uses the key prefix ``name`` (level
    0) or ``f"{name}-{k}"``. A level that compresses (pyrevolve's ``compression_params``)
    keeps its compressor: the cache holds the compressed bytes. The revolver gets a new
    list; the caller's own list of storages is left as it was. Returns the new storages.

    Raises
    ------
    ValueError
        If the revolver has no storage to replace.
    """
    old = list(revolver.storage_list)
    if not old:
        raise ValueError("use_tiered: the revolver has no storage levels to replace")
    ckp = revolver.checkpoint
    new = [revolve_storage(cache, ckp.size, level.n_ckp, ckp.dtype,
                           name=name if k == 0 else f"{name}-{k}", profiler=revolver.profiler,
                           compression=_compression_of(level), wd=level.wd, rd=level.rd)
           for k, level in enumerate(old)]
    revolver.storage_list = new  # a new list: the caller's stays untouched
    for level in old:
        _close_files(level)
    return new


def _compression_of(storage: Any) -> Compression | None:
    """Return the compressor pair of a pyrevolve storage that compresses, else ``None``."""
    pair = (getattr(storage, "compressor", None), getattr(storage, "decompressor", None))
    if pair[0] is None or pair[1] is None:
        return None
    return pair[0], pair[1]


def _close_files(storage: Any) -> None:
    """Close the files a replaced pyrevolve disk storage holds open."""
    for attr in ("storage_w", "storage_r"):
        handle = getattr(storage, attr, None)
        if handle is not None and hasattr(handle, "close"):
            handle.close()
