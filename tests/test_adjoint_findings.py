"""Reproductions of the adjoint issue's findings, one invariant each.

Each test drives the smallest setup that shows its finding: pyrevolve's multi-level and
compressing revolvers through ``use_tiered``, a bounded directory tier on top, lazy
write-back of small entries, a small directory tier, and a discard racing a drain that
waits for room. Timeouts are short so that a broken library fails in seconds.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from adjoint_models import Solver, reference
from helpers import object_files
from tiered.adapters.revolve import use_tiered

import tiered
from tiered.config import OnFull

pyrevolve = pytest.importorskip("pyrevolve", reason="needs tiered[adjoint]")

KiB = 1024
TIMEOUT_S = 2.0  # longest wait for room: a store that never gets any fails quickly


def _kib_value(i: int) -> np.ndarray:
    return np.full(128, float(i))  # 1 KiB of float64, distinct per key


def _host_dir_hdf5(tmp_path: Path) -> tiered.Cache:
    return tiered.Cache([tiered.HostTier("32KiB", prefault=False),
                         tiered.DirectoryTier(tmp_path / "bb", sync=False),
                         tiered.HDF5Tier(tmp_path / "pfs", sync=False)],
                        prefetch="reverse", full_timeout_s=TIMEOUT_S)


def _levels(ckp: Any, profiler: Any, ram: int, disk: int) -> list[Any]:
    """H-Revolve's two levels as pyrevolve storages: cheap memory, dearer disk."""
    return [pyrevolve.NumpyStorage(ckp.size, ram, ckp.dtype, profiler, wd=0, rd=0),
            pyrevolve.NumpyStorage(ckp.size, disk, ckp.dtype, profiler, wd=2, rd=2)]


def _multilevel(solver: Solver, n_steps: int, ram: int, disk: int) -> tuple[Any, list[Any]]:
    ckp, fwd, rev = solver.pyrevolve_parts()
    levels = _levels(ckp, pyrevolve.Profiler(), ram, disk)
    return pyrevolve.MultiLevelRevolver(ckp, fwd, rev, n_steps, storage_list=levels), levels


# ---------------------------------------------------------------- 1. multi-level revolvers
def test_multilevel_revolver_keeps_a_tiered_storage_per_level(tmp_path: Path) -> None:
    plain = Solver()
    revolver, _ = _multilevel(plain, 20, ram=2, disk=4)
    revolver.apply_forward()
    revolver.apply_reverse()
    mine = Solver()
    revolver, _ = _multilevel(mine, 20, ram=2, disk=4)
    with _host_dir_hdf5(tmp_path) as cache:
        use_tiered(revolver, cache)
        revolver.apply_forward()
        revolver.apply_reverse()
        stores = cache.stats().stores
    # H-Revolve planned two levels of 2 and 4 checkpoints: it still has them
    assert [s.n_ckp for s in revolver.storage_list] == [2, 4]
    np.testing.assert_array_equal(mine.adj, plain.adj)
    np.testing.assert_array_equal(mine.adj, reference(20))
    assert mine.counts() == plain.counts()
    assert stores == len(mine.saves)  # every level's checkpoints went through the cache


def test_use_tiered_leaves_the_callers_storage_list_alone(tmp_path: Path) -> None:
    revolver, levels = _multilevel(Solver(), 20, ram=2, disk=4)
    mine = list(levels)
    with _host_dir_hdf5(tmp_path) as cache:
        use_tiered(revolver, cache)
    assert len(levels) == 2 and all(a is b for a, b in zip(levels, mine, strict=True))


# ---------------------------------------------------------------- 2. compression
class _Zlib:
    """A lossless pyrevolve 'custom' compressor that counts its calls."""

    def __init__(self) -> None:
        self.compressed = 0
        self.decompressed = 0

    def params(self) -> dict[str, Any]:
        return {"scheme": "custom", "compressor": self.compress,
                "decompressor": self.decompress}

    def compress(self, params: dict[str, Any], data: np.ndarray) -> Any:
        from pyrevolve.compression import CompressedObject

        self.compressed += 1
        return CompressedObject(zlib.compress(np.ascontiguousarray(data).tobytes()),
                                shape=data.shape, dtype=data.dtype)

    def decompress(self, params: dict[str, Any], obj: Any) -> np.ndarray:
        self.decompressed += 1
        raw = zlib.decompress(bytes(memoryview(obj.data).cast("B")))
        return np.frombuffer(raw, dtype=obj.dtype).reshape(obj.shape)


def test_pyrevolve_compression_runs_before_the_cache(tmp_path: Path) -> None:
    n_steps, n_ckp, pad = 23, 3, 8192  # 64 KiB of zeros per checkpoint: zlib's easy case
    plain, plain_zlib = Solver(pad=pad), _Zlib()
    revolver = pyrevolve.Revolver(*plain.pyrevolve_parts(), n_ckp, n_steps,
                                  compression_params=plain_zlib.params())
    revolver.apply_forward()
    revolver.apply_reverse()
    mine, my_zlib = Solver(pad=pad), _Zlib()
    ckp, fwd, rev = mine.pyrevolve_parts()
    revolver = pyrevolve.Revolver(ckp, fwd, rev, n_ckp, n_steps,
                                  compression_params=my_zlib.params())
    with _host_dir_hdf5(tmp_path) as cache:
        use_tiered(revolver, cache)
        revolver.apply_forward()
        revolver.apply_reverse()
        stored = cache.stats().bytes_stored
    np.testing.assert_array_equal(mine.adj, plain.adj)
    np.testing.assert_array_equal(mine.adj, reference(n_steps))
    assert mine.counts() == plain.counts()
    # the user's compressor ran as it does in pyrevolve's own storage...
    assert (my_zlib.compressed, my_zlib.decompressed) == \
        (plain_zlib.compressed, plain_zlib.decompressed) != (0, 0)
    # ...and what reached the cache was its output, not the raw checkpoints
    assert stored < len(mine.saves) * ckp.nbytes // 4


# ---------------------------------------------------------------- 3. directory tier on top
@pytest.mark.parametrize("on_full", ["block", "spill"])
def test_directory_tier_on_top_evicts_durable_entries(tmp_path: Path, on_full: OnFull) -> None:
    capacity = 72 * KiB
    with tiered.Cache([tiered.DirectoryTier(tmp_path / "bb", capacity=capacity, sync=False),
                       tiered.HDF5Tier(tmp_path / "pfs", sync=False)],
                      on_full=on_full, full_timeout_s=TIMEOUT_S) as cache:
        for i in range(300):  # 300 KiB through a 72 KiB top tier
            cache.store(("k", i), _kib_value(i))
        for i in reversed(range(300)):
            np.testing.assert_array_equal(cache.revisit(("k", i)), _kib_value(i))
        assert cache.stats().tiers["directory"].used_bytes <= capacity


# ---------------------------------------------------------------- 4. lazy write-back
@pytest.mark.parametrize("host", ["8KiB", "64KiB"])
def test_lazy_write_back_counts_the_room_entries_take(tmp_path: Path, host: str) -> None:
    def value(i: int) -> np.ndarray:
        return np.full(100, float(i))  # 800 bytes, as pyrevolve's small checkpoints: a page

    with tiered.Cache([tiered.HostTier(host, prefault=False),
                       tiered.DirectoryTier(tmp_path / "bb", sync=False)],
                      write_back="lazy", full_timeout_s=TIMEOUT_S) as cache:
        for i in range(40):  # 40 pages: far more than either host tier holds
            cache.store(i, value(i))
        for i in reversed(range(40)):
            np.testing.assert_array_equal(cache.revisit(i), value(i))


# ---------------------------------------------------------------- 5. small directory tier
def test_small_directory_tier_takes_traffic(tmp_path: Path) -> None:
    capacity = 16 * KiB
    with tiered.Cache([tiered.HostTier("16KiB", prefault=False),
                       tiered.DirectoryTier(tmp_path / "bb", capacity=capacity, sync=False),
                       tiered.HDF5Tier(tmp_path / "pfs", sync=False)],
                      full_timeout_s=TIMEOUT_S) as cache:
        for i in range(40):
            cache.store(("k", i), _kib_value(i))
        cache.flush()
        tier = cache.stats().tiers["directory"]
        assert tier.bytes_in > 0  # objects went through the 16 KiB directory
        assert tier.used_bytes <= capacity
        for i in range(40):
            np.testing.assert_array_equal(cache.revisit(("k", i)), _kib_value(i))


def test_directory_tier_that_can_hold_nothing_is_refused(tmp_path: Path) -> None:
    """64 bytes hold no object (an object file alone has a 24-byte footer and a manifest)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            tier = tiered.DirectoryTier(tmp_path / "tiny", capacity=64)
        except ValueError as exc:
            assert "capacity" in str(exc)
            return
    tier.close()
    said = [str(w.message) for w in caught]
    assert any("capacity" in s for s in said), f"a 64-byte directory tier was accepted " \
                                                f"without a word (warnings: {said})"


# ---------------------------------------------------------------- 6. discards cancel drains
class _HeldTier(tiered.DirectoryTier):
    """A real directory tier whose writes wait until the test lets them go."""

    def __init__(self, path: Path, **kw: Any) -> None:
        super().__init__(path, name="deep", sync=False, **kw)
        self.go = threading.Event()

    def put(self, *args: Any, **kw: Any) -> Any:
        assert self.go.wait(30), "the test never released the deep tier"
        return super().put(*args, **kw)


def test_discard_cancels_a_drain_waiting_for_room(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    state = 256 * KiB  # the directory holds one state at a time
    directory = tiered.DirectoryTier(tmp_path / "bb", capacity=state + 68 * KiB, sync=False)
    deep = _HeldTier(tmp_path / "deep")
    cache = tiered.Cache([tiered.HostTier("4MiB", prefault=False), directory, deep],
                         full_timeout_s=10 * TIMEOUT_S)
    first, second = np.full(state // 8, 0.5), np.full(state // 8, 1.5)
    cache.store(("ram", 0), first)  # into the directory, then held on its way deeper
    cache.store(("ram", 1), second)
    with pytest.raises(TimeoutError):  # its copy waits for directory room that can come
        cache.flush(timeout=0.5)
    caplog.set_level(logging.DEBUG, logger="tiered.writes")
    cache.discard(("ram", 1))  # the schedule moved it on: nobody needs that copy now
    deadline = time.monotonic() + 5
    while not any("('ram', 1) cancelled: discarded" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "the discarded entry's transfer kept waiting"
        time.sleep(0.01)
    deep.go.set()
    np.testing.assert_array_equal(cache.revisit(("ram", 0)), first)
    cache.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert cache.stats().background_errors == 0
    assert len(object_files(tmp_path / "deep")) == 1
