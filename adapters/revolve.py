"""A pyrevolve storage backed by a :class:`tiered.Cache`.

pyrevolve's revolvers copy checkpoints in and out of a storage object through ``save(key,
data_pointers)`` and ``load(key, locations)`` (single-level revolvers) or
``push``/``peek``/``pop`` (multi-level ones, built on the same two). This class keeps each
checkpoint in the cache instead of a preallocated array or a ``.dat`` file, so the
solver's checkpoints drain to disk in the background and come back from the fastest tier::

    revolver = pyrevolve.Revolver(checkpoint, fwd, rev, n_checkpoints, n_timesteps)
    use_tiered(revolver, cache)          # swap its storage; nothing else changes
    revolver.apply_forward(); revolver.apply_reverse()
"""

from __future__ import annotations

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


def revolve_storage(cache: Cache, size_ckp: int, n_ckp: int, dtype: Any, *,
                    name: str = "pyrevolve", profiler: Any = None) -> Any:
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
    """
    base = _storage_base()

    class RevolveStorage(base):  # type: ignore[misc, valid-type]
        """pyrevolve storage over a tiered cache (see :func:`revolve_storage`)."""

        def __init__(self) -> None:
            super().__init__(size_ckp, n_ckp, dtype, profiler, name=name)
            self.cache = cache

        def save(self, key: int, data_pointers: Any) -> None:
            arrays = [np.asarray(p) for p in data_pointers]
            self.cache.store((name, int(key)), arrays)

        def load(self, key: int, locations: Any) -> None:
            values = self.cache.revisit((name, int(key)))
            if len(values) != len(locations):
                raise ValueError(f"checkpoint {key} holds {len(values)} arrays, "
                                 f"{len(locations)} locations were given")
            for dst, src in zip(locations, values, strict=True):
                np.copyto(dst, src.reshape(dst.shape))

    return RevolveStorage()


def use_tiered(revolver: Any, cache: Cache, *, name: str = "pyrevolve") -> Any:
    """Replace a pyrevolve revolver's storages with one backed by ``cache``; return it."""
    ckp = revolver.checkpoint
    storage = revolve_storage(cache, ckp.size, revolver.n_checkpoints, ckp.dtype, name=name,
                              profiler=revolver.profiler)
    revolver.resetStorageList()
    revolver.addStorage(storage)
    return storage
