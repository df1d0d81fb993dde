"""Zero runs left as file holes: what is written, what comes back, what a flipped hole does."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import tiered
from tiered.tiers.directory import HOLE_BYTES, data_runs

MiB = 1 << 20


def banded(nbytes: int = 4 * MiB) -> np.ndarray:
    """A wavefield-like payload: zeros above and below a band of data, as float32."""
    u = np.zeros(nbytes // 4, dtype=np.float32)
    u[len(u) // 3: len(u) // 2] = np.linspace(1.0, 2.0, len(u) // 2 - len(u) // 3)
    return u


@pytest.mark.parametrize(("layout", "expected"), [
    ("zeros", []),
    ("one byte in the second block", [(HOLE_BYTES, 2 * HOLE_BYTES)]),
    ("first and last", [(0, HOLE_BYTES), (3 * HOLE_BYTES, 4 * HOLE_BYTES)]),
    ("ones", [(0, 4 * HOLE_BYTES)]),
])
def test_data_runs_finds_the_blocks_holding_data(layout, expected):
    region = np.zeros(4 * HOLE_BYTES, dtype=np.uint8)
    if layout == "one byte in the second block":
        region[HOLE_BYTES + 7] = 1
    elif layout == "first and last":
        region[0] = region[-1] = 9
    elif layout == "ones":
        region[:] = 1
    assert data_runs(region) == expected


def test_data_runs_always_writes_a_partial_tail_and_short_regions():
    region = np.zeros(2 * HOLE_BYTES + 100, dtype=np.uint8)
    assert data_runs(region) == [(2 * HOLE_BYTES, 2 * HOLE_BYTES + 100)]
    assert data_runs(np.zeros(10, dtype=np.uint8)) == [(0, 10)]
    assert data_runs(np.zeros(0, dtype=np.uint8)) == []
    dense = np.ones(2 * HOLE_BYTES + 100, dtype=np.uint8)  # every block, then the tail
    assert data_runs(dense) == [(0, len(dense))]
    dense[HOLE_BYTES - 8:] = 0  # the first block's last word is zero, but it holds data
    assert data_runs(dense) == [(0, HOLE_BYTES), (2 * HOLE_BYTES, len(dense))]


@pytest.mark.parametrize("most_blocks", [12, 200])  # 200: more than 64 unsure blocks,
def test_data_runs_match_a_block_by_block_reference(most_blocks):  # one numpy reduction
    rng = np.random.default_rng(7)
    block = 64
    for _ in range(300):
        n = int(rng.integers(0, most_blocks * block))
        region = np.zeros(n, dtype=np.uint8)
        for b in rng.choice(max(1, n // block + 1), size=int(rng.integers(0, 5))):
            if b * block < n:
                region[min(n - 1, b * block + int(rng.integers(block)))] = 1
        covered = np.zeros(n, dtype=bool)
        runs = data_runs(region, block)
        for start, stop in runs:
            covered[start:stop] = True
        full = n // block * block
        assert covered[full:].all()  # a partial tail is always written
        for b in range(0, full, block):  # a whole block is written iff it holds data
            assert covered[b: b + block].all() == region[b: b + block].any()
            assert covered[b: b + block].all() or not covered[b: b + block].any()
        assert all(a < b for a, b in runs)  # runs are non-empty, ordered, not adjacent
        assert all(runs[i][1] < runs[i + 1][0] for i in range(len(runs) - 1))


def test_data_runs_check_whole_blocks_whose_last_word_is_zero():
    # a mostly dense region: blocks are first told apart by their last word, and only
    # those whose last word is zero are read whole (zero, or data earlier in the block)
    block = 64
    region = np.ones(40 * block, dtype=np.uint8)
    region[3 * block: 4 * block] = 0  # a zero block
    region[7 * block + block - 8: 8 * block] = 0  # data, but not in its last word
    region[20 * block: 22 * block] = 0
    region[21 * block + 5] = 1  # data at the start of a block whose last word is zero
    assert data_runs(region, block) == [(0, 3 * block), (4 * block, 20 * block),
                                        (21 * block, 40 * block)]


def _stored_file(root: Path, value: np.ndarray, **kw: object) -> Path:
    with tiered.Cache([tiered.DirectoryTier(root, **kw)]) as cache:  # type: ignore[arg-type]
        cache.store("u", value)
    (path,) = [p for p in root.iterdir() if p.suffix == ".tdat"]
    return path


def test_zero_runs_are_not_written_and_come_back_as_zeros(tmp_path):
    value = banded()
    path = _stored_file(tmp_path / "sparse", value)
    allocated = os.stat(path).st_blocks * 512
    assert allocated < 0.3 * value.nbytes  # the band is a sixth of the payload
    dense = _stored_file(tmp_path / "dense", value, sparse=False)
    assert os.stat(dense).st_blocks * 512 >= value.nbytes
    for root in ("sparse", "dense"):  # a restart reads either back, bit for bit
        with tiered.Cache([tiered.HostTier(8 * MiB), tiered.DirectoryTier(tmp_path / root)]) as c:
            np.testing.assert_array_equal(c.revisit("u"), value)


def test_a_byte_written_into_a_hole_fails_the_checksum(tmp_path):
    path = _stored_file(tmp_path / "bb", banded())
    with open(path, "r+b") as fh:  # offset 100 lies in the leading hole
        fh.seek(100)
        fh.write(b"\x01")
    with tiered.Cache([tiered.DirectoryTier(tmp_path / "bb")]) as cache, \
            pytest.raises(tiered.CorruptDataError, match="checksum"):
        cache.revisit("u")


def test_all_zero_and_data_free_payloads_round_trip(tmp_path):
    zeros = np.zeros(3 * MiB + 12, dtype=np.uint8)
    path = _stored_file(tmp_path / "bb", zeros)
    assert os.stat(path).st_blocks * 512 < MiB
    with tiered.Cache([tiered.DirectoryTier(tmp_path / "bb")]) as cache:
        np.testing.assert_array_equal(cache.revisit("u"), zeros)

