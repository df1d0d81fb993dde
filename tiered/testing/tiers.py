"""Suites for tiers: what every persistent and every memory tier must do."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tiered.checksum import content_hash
from tiered.errors import CorruptDataError, TierFullError
from tiered.movers import leaf_checksums
from tiered.payload import leaf_bytes, read_leaves, write_leaves
from tiered.tiers.base import MemoryTier
from tiered.tiers.persistent import TMP_PREFIX, PersistentTier
from tiered.tiers.records import Record
from tiered.values import ValueMeta, flatten


def _packed(value: Any) -> tuple[ValueMeta, np.ndarray, tuple[int, ...]]:
    """Return a value's meta, its payload bytes and their checksums, as the cache makes them."""
    meta, arrays = flatten(value)
    region = np.zeros(meta.nbytes, np.uint8)
    write_leaves(region, meta, arrays)
    return meta, region, leaf_checksums(region, meta)


def _sample(seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {"u": rng.standard_normal((64, 33)).astype(np.float32),
            "i": np.arange(17, dtype=np.int64) * (seed + 1), "step": seed}


class PersistentTierTests:
    """Put, get, delete and scan; atomic writes; capacity; checksums; keys kept inside.

    Subclasses define :meth:`make_tier`.
    """

    def make_tier(self, path: Path, capacity: int | str | None = None) -> PersistentTier:
        """Return a new tier over ``path`` (override this)."""
        raise NotImplementedError

    def _put(self, tier: PersistentTier, key: Any, version: int, seed: int = 0) -> Record:
        meta, region, sums = _packed(_sample(seed))
        return tier.put(key, version, meta, region, sums)

    def _get(self, tier: PersistentTier, record: Record) -> dict[str, Any]:
        region = np.empty(record.meta.nbytes, np.uint8)
        tier.get_into(record, region)
        from tiered.values import unflatten

        value: dict[str, Any] = unflatten(record.meta.spec, read_leaves(region, record.meta,
                                                                        None))
        return value

    def test_put_then_get_returns_the_bytes(self, tmp_path: Path) -> None:
        tier = self.make_tier(tmp_path)
        record = self._put(tier, ("u", 3), 1, seed=3)
        got, want = self._get(tier, record), _sample(3)
        np.testing.assert_array_equal(got["u"], want["u"])
        np.testing.assert_array_equal(got["i"], want["i"])
        assert got["step"] == 3 and record.key == ("u", 3) and record.version == 1
        assert tier.used_bytes == record.file_bytes > 0

    def test_scan_finds_every_version_of_each_key(self, tmp_path: Path) -> None:
        tier = self.make_tier(tmp_path)
        self._put(tier, "a", 1)
        self._put(tier, "a", 2, seed=2)
        self._put(tier, 7, 3)
        again = self.make_tier(tmp_path)  # a restart: which version is current is not its call
        report = again.scan()
        assert sorted((str(r.key), r.version) for r in report.records) == [
            ("7", 3), ("a", 1), ("a", 2)]
        assert report.problems == []
        assert again.used_bytes == sum(r.file_bytes for r in report.records)
        ordered = sorted(report.records, key=lambda r: r.version)
        for record, seed in zip(ordered, (0, 2, 0), strict=True):
            np.testing.assert_array_equal(self._get(again, record)["u"], _sample(seed)["u"])

    def _put_content(self, tier: PersistentTier, version: int, value: dict[str, Any],
                     base: Record | None = None) -> Record:
        meta, region, sums = _packed(value)
        content = tuple(content_hash(leaf_bytes(region, leaf)) for leaf in meta.leaves)
        return tier.put("s", version, meta, region, sums, content=content, base=base)

    def test_equal_leaves_are_not_written_again(self, tmp_path: Path) -> None:
        tier = self.make_tier(tmp_path)
        big = {f"l{i}": np.full(70_000, float(i), np.float32) for i in range(4)}
        first = self._put_content(tier, 1, big)
        big["l2"] = big["l2"] + 1  # one leaf of four changes
        second = self._put_content(tier, 2, big, base=first)
        assert [i for i, _, _ in second.refs] == [0, 1, 3]
        assert second.holders() == {1} and second.stored_bytes == 280_000
        big["l0"] = big["l0"] - 1
        third = self._put_content(tier, 3, big, base=second)  # a reference to a reference
        assert {(i, v) for i, v, _ in third.refs} == {(1, 1), (2, 2), (3, 1)}
        again = self.make_tier(tmp_path)  # the references survive a restart
        (found,) = [r for r in again.scan().records if r.version == 3]
        assert found.refs == third.refs and found.content == third.content
        got = self._get(again, found)
        for name, want in big.items():
            np.testing.assert_array_equal(got[name], want)

    def test_a_damaged_holder_fails_the_read_of_its_referrer(self, tmp_path: Path) -> None:
        tier = self.make_tier(tmp_path)
        value = {"a": np.arange(50_000, dtype=np.int64), "b": np.zeros(10)}
        first = self._put_content(tier, 1, value)
        value["b"] = value["b"] + 1
        second = self._put_content(tier, 2, value, base=first)
        assert second.holders() == {1}
        first.path.unlink()
        with pytest.raises(CorruptDataError):
            self._get(tier, second)

    def test_delete_removes_and_is_idempotent(self, tmp_path: Path) -> None:
        tier = self.make_tier(tmp_path)
        record = self._put(tier, "gone", 1)
        tier.delete(record)
        tier.delete(record)
        assert tier.used_bytes == 0
        assert [r.key for r in self.make_tier(tmp_path).scan().records] == []

    def test_a_leftover_temp_file_is_never_loaded(self, tmp_path: Path) -> None:
        tier = self.make_tier(tmp_path)
        self._put(tier, "kept", 1)
        leftover = tmp_path / f"{TMP_PREFIX}0-deadbeef{type(tier).suffix}"
        leftover.write_bytes(b"half an object, from a writer killed mid-write")
        report = self.make_tier(tmp_path).scan()
        assert [r.key for r in report.records] == ["kept"]
        assert report.problems and not leftover.exists()  # reported and removed

    def test_a_flipped_byte_is_an_error_not_a_value(self, tmp_path: Path) -> None:
        tier = self.make_tier(tmp_path)
        record = self._put(tier, "k", 1)
        data = bytearray(record.path.read_bytes())
        at = self._payload_byte(tier, record)
        data[at] ^= 0xFF
        record.path.write_bytes(bytes(data))
        with pytest.raises(CorruptDataError):
            self._get(tier, record)

    def _payload_byte(self, tier: PersistentTier, record: Record) -> int:
        """Return a file offset inside the first leaf's bytes."""
        offsets = record.offsets
        start = offsets[0] if offsets and offsets[0] is not None else 0
        return int(start) + 5

    def test_capacity_is_enforced_and_freed(self, tmp_path: Path) -> None:
        meta, _, _ = _packed(_sample())
        capacity = 4 * tier_room(self, tmp_path, meta)
        tier = self.make_tier(tmp_path / "bounded", capacity=capacity)
        records = []
        with pytest.raises(TierFullError):
            for i in range(100):
                records.append(self._put(tier, i, i + 1))
                assert tier.used_bytes <= capacity
        assert 1 <= len(records) < 100
        tier.delete(records[0])
        self._put(tier, "again", 1000)  # the room a delete gives back is usable
        assert tier.used_bytes <= capacity

    def test_keys_never_name_a_path_outside_the_root(self, tmp_path: Path) -> None:
        tier = self.make_tier(tmp_path)
        for key in ("..x", ("a", "..", "b"), "%2F..%2F", "x" * 500, ("é", 1)):
            path = tier.path_for(key, 1)
            assert path.parent == tmp_path and os.sep not in path.name


def tier_room(suite: PersistentTierTests, path: Path, meta: ValueMeta) -> int:
    """Return how much capacity one sample object takes in the tier the suite makes."""
    probe = suite.make_tier(path / "probe")
    return probe.footprint(meta.nbytes)


class MemoryTierTests:
    """Allocate, write, read back and free; capacity; no overlap between live extents.

    Subclasses define :meth:`make_tier`.
    """

    def make_tier(self, capacity: int) -> MemoryTier:
        """Return a new memory tier of ``capacity`` bytes (override this)."""
        raise NotImplementedError

    def _bytes(self, tier: MemoryTier, extent: Any, n: int) -> np.ndarray:
        region = tier.region(extent, n)
        return np.asarray(region.cpu() if hasattr(region, "cpu") else region).copy()

    def test_regions_hold_what_is_written(self, tmp_path: Path) -> None:
        tier = self.make_tier(1 << 20)
        extents = []
        for i in range(4):
            extent = tier.allocate(10_000)
            assert extent is not None
            region = tier.region(extent, 10_000)
            region[:] = i + 1
            extents.append(extent)
        for i, extent in enumerate(extents):  # no write landed in another's extent
            assert (self._bytes(tier, extent, 10_000) == i + 1).all()

    def test_capacity_and_free(self, tmp_path: Path) -> None:
        tier = self.make_tier(64 << 10)
        assert tier.fits(64 << 10) and not tier.fits((64 << 10) + 1)
        held = [tier.allocate(16 << 10) for _ in range(4)]
        assert all(e is not None for e in held) and tier.allocate(1) is None
        assert tier.used_bytes == 64 << 10
        for extent in held:
            assert extent is not None
            tier.free(extent)
        assert tier.used_bytes == 0 and tier.allocate(64 << 10) is not None
