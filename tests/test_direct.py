"""Direct I/O in the directory tier: payloads past the page cache, the same files as ever."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import cached_pages, in_memory_fs

import tiered
from tiered.movers import staging_buffer
from tiered.tiers import directory
from tiered.values import flatten

MiB = 1 << 20


def _device_reads() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    raise AssertionError("no read_bytes in /proc/self/io")


def _values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    sparse = np.zeros(3 * MiB // 4, np.float32)  # 3 MiB: holes, then data to the end
    sparse[-40_000:] = 1.0
    ends_in_hole = np.zeros(MiB // 4 + 5, np.float32)
    ends_in_hole[:1000] = 2.0
    return {
        "aligned": rng.standard_normal((512, 512)).astype(np.float32),  # 1 MiB exactly
        "unaligned_tail": rng.standard_normal(MiB // 8 + 3),  # a partial last page
        "tiny": np.arange(10, dtype=np.int16),  # less than a page: all buffered
        "sparse": sparse,
        "ends_in_hole": ends_in_hole,
    }


@pytest.mark.parametrize("name", list(_values()))
def test_direct_round_trip_and_restart_without_it(tmp_path: Path, name: str) -> None:
    want = _values()[name]
    with tiered.Cache([tiered.DirectoryTier(tmp_path, direct=True)]) as cache:
        cache.store(name, want)
        np.testing.assert_array_equal(cache.revisit(name), want)
    # the same file format: a tier without direct I/O restarts from it, and the other way
    with tiered.Cache([tiered.DirectoryTier(tmp_path)]) as cache:
        np.testing.assert_array_equal(cache.revisit(name), want)
        cache.store(name + "2", want)
    with tiered.Cache([tiered.DirectoryTier(tmp_path, direct=True)]) as cache:
        np.testing.assert_array_equal(cache.revisit(name + "2"), want)


def test_direct_drain_and_reverse_prefetch_through_host_memory(tmp_path: Path) -> None:
    states = [np.full((256, 1024), i, np.float32) for i in range(24)]  # 1 MiB each
    bb = tiered.DirectoryTier(tmp_path, direct=True, drop_pages=True, sync=False)
    with tiered.Cache([tiered.HostTier(6 * MiB), bb], eviction="score", write_back="lazy",
                      prefetch="reverse") as cache:
        for i, s in enumerate(states):
            cache.store(i, s)
        cache.hint(list(reversed(range(24))))
        for i in reversed(range(24)):
            np.testing.assert_array_equal(cache.revisit(i), states[i])
        assert bb.direct  # nothing fell back
        assert cache.stats().tiers["directory"].bytes_in >= 18 * MiB


def _put(tier: tiered.DirectoryTier, key: str, region: np.ndarray) -> Any:
    meta, _ = flatten(region)
    from tiered.movers import leaf_checksums

    return tier.put(key, 1, meta, region, leaf_checksums(region, meta))


@pytest.mark.skipif(in_memory_fs(Path(os.environ.get("TMPDIR", "/tmp"))),
                    reason="the temporary directory is in memory: every page is cached")
def test_direct_payload_never_enters_the_page_cache(tmp_path: Path) -> None:
    region = staging_buffer(MiB)  # page-aligned, as host tiers' extents are
    region[:] = np.arange(MiB, dtype=np.uint64).astype(np.uint8)
    buffered = _put(tiered.DirectoryTier(tmp_path / "b", sync=False), "k", region)
    assert cached_pages(buffered.path) == 257  # the control: all of it stays cached
    tier = tiered.DirectoryTier(tmp_path / "d", direct=True, sync=False)
    record = _put(tier, "k", region)
    assert tier.direct
    assert cached_pages(record.path) == 0  # the manifest and footer went direct too
    assert record.path.stat().st_size % 4096 == 0  # padded to a whole last page
    out = staging_buffer(MiB)
    before = _device_reads()
    tier.get_into(record, out)
    assert _device_reads() - before >= MiB  # read from the device
    np.testing.assert_array_equal(out, region)
    assert cached_pages(record.path) == 0  # and reading it did not bring it in


@pytest.mark.skipif(in_memory_fs(Path(os.environ.get("TMPDIR", "/tmp"))),
                    reason="the temporary directory is in memory: every page is cached")
@pytest.mark.parametrize("nbytes", [MiB + 128, 2 * 4096 - 64, 3 * 4096 - 4032])
def test_partial_last_page_goes_direct_in_the_last_block(tmp_path: Path, nbytes: int) -> None:
    # the rest of the payload, manifest and footer: one aligned block, at any fill of it
    region = staging_buffer(nbytes)
    region[:] = np.arange(nbytes, dtype=np.uint64).astype(np.uint8) | 1  # no holes
    assert flatten(region)[0].nbytes == nbytes  # a region is its value's padded size
    tier = tiered.DirectoryTier(tmp_path, direct=True, sync=False)
    record = _put(tier, "k", region)
    assert tier.direct and cached_pages(record.path) == 0
    assert record.path.stat().st_size % 4096 == 0
    out = staging_buffer(nbytes)
    out[:] = 0
    tier.get_into(record, out)
    np.testing.assert_array_equal(out, region)
    assert cached_pages(record.path) == 0
    # the padded manifest is an ordinary one to a restart, with or without direct I/O
    for direct in (False, True):
        (found,) = tiered.DirectoryTier(tmp_path, direct=direct).scan().records
        out[:] = 0
        tiered.DirectoryTier(tmp_path, direct=direct).get_into(found, out)
        np.testing.assert_array_equal(out, region)


@pytest.mark.skipif(in_memory_fs(Path(os.environ.get("TMPDIR", "/tmp"))),
                    reason="the temporary directory is in memory: every page is cached")
def test_unaligned_buffer_is_written_and_read_buffered(tmp_path: Path) -> None:
    base = staging_buffer(MiB + 4096)
    region = base[8: 8 + MiB]  # not page-aligned: direct I/O would be refused
    region[:] = 7
    tier = tiered.DirectoryTier(tmp_path, direct=True, sync=False)
    record = _put(tier, "k", region)
    assert cached_pages(record.path) == 257  # it went through the page cache
    out = base[16: 16 + MiB]
    out[:] = 0
    tier.get_into(record, out)
    assert (out == 7).all() and tier.direct  # still on for aligned buffers


def test_file_system_refusing_direct_io_falls_back_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    # Simulated: every file system this can run on here (ext4, tmpfs on Linux >= 6.6)
    # accepts O_DIRECT, so the refusal some others give (EINVAL) is raised by hand.
    real = os.open

    def refuse(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if flags & os.O_DIRECT:  # as tmpfs before Linux 6.6: the file is created, then EINVAL
            os.close(real(path, flags & ~os.O_DIRECT, *args, **kw))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(path, flags, *args, **kw)

    monkeypatch.setattr(directory.os, "open", refuse)
    want = _values()["aligned"]
    tier = tiered.DirectoryTier(tmp_path, direct=True)
    with caplog.at_level(logging.WARNING, logger="tiered.tiers.directory"):
        with tiered.Cache([tier]) as cache:
            cache.store("a", want)
            cache.store("b", want + 1)
            np.testing.assert_array_equal(cache.revisit("a"), want)
    assert not tier.direct
    assert sum("refuses direct I/O" in r.message for r in caplog.records) == 1


@pytest.mark.parametrize("damage", ["flip", "truncate_aligned", "truncate_unaligned"])
def test_damaged_direct_file_is_reported_not_returned(tmp_path: Path, damage: str) -> None:
    want = _values()["aligned"]
    with tiered.Cache([tiered.DirectoryTier(tmp_path, direct=True)]) as cache:
        cache.store("k", want)
        (path,) = list(tmp_path.iterdir())
        if damage == "flip":
            with open(path, "r+b") as fh:
                fh.seek(5000)
                byte = fh.read(1)
                fh.seek(5000)
                fh.write(bytes([byte[0] ^ 1]))
        else:
            os.truncate(path, MiB // 2 + (0 if damage == "truncate_aligned" else 100))
        with pytest.raises(tiered.CorruptDataError):
            cache.revisit("k")
