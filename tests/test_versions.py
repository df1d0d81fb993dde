"""Versions: commit, latest, checkout, revisit(version=), diff, retain, restart, readers."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest
import torch

import tiered
from tiered.errors import (
    ReadOnlyError,
    TierLockedError,
    UnknownKeyError,
    UnknownVersionError,
    VersionFailedError,
)


def _tiers(root, host="64MiB"):
    return [tiered.HostTier(host), tiered.DirectoryTier(root / "bb")]


def _object_files(root):
    return sorted(p.name for p in (root / "bb").iterdir() if p.suffix == ".tdat")


def test_a_version_is_the_whole_key_space_and_unchanged_keys_are_not_written_again(tmp_path):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        cache.store("w", np.zeros(1000))
        cache.store("step", 1)
        v1 = cache.commit(label="first", meta={"step": 1}).wait()
        written = cache.stats().tiers["directory"].bytes_in
        cache.store("w", np.ones(1000))
        v2 = cache.commit().wait()
        assert (v1.id, v1.parent, v1.label, v1.meta) == (1, None, "first", {"step": 1})
        assert (v2.id, v2.parent) == (2, 1) and set(v2.keys) == {"w", "step"}
        assert v1.durable and v2.durable and cache.latest() == v2
        # only the changed key reached the directory again
        assert cache.stats().tiers["directory"].bytes_in - written == 8000
        assert cache.revisit("w", version=v1)[0] == 0 and cache.revisit("w", version=2)[0] == 1
        assert cache.revisit("step", version="first") == 1


def test_bad_version_arguments_are_clear_errors(tmp_path):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        cache.store("a", 1)
        cache.commit(label="x").wait()
        with pytest.raises(ValueError, match="taken"):
            cache.commit(label="x")
        with pytest.raises(ValueError, match="non-empty"):
            cache.commit(label="")
        with pytest.raises(ValueError, match="JSON"):
            cache.commit(meta={"f": object()})
        with pytest.raises(UnknownVersionError, match="no version 9"):
            cache.revisit("a", version=9)
        with pytest.raises(UnknownVersionError, match="labelled 'nope'"):
            cache.checkout("nope")
        with pytest.raises(TypeError, match="a version is"):
            cache.checkout(1.5)
        with pytest.raises(UnknownKeyError, match="not in version 1"):
            cache.revisit("b", version=1)
        with pytest.raises(ValueError, match="keep_last"):
            cache.retain(keep_last=0)
    assert isinstance(UnknownVersionError("x"), KeyError)


def test_checkout_then_commit_branches_and_the_head_survives_restart(tmp_path):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        for step in range(1, 4):
            cache.store("w", np.full(100, step))
            cache.commit(label=f"s{step}").wait()
        cache.store("uncommitted", 5)  # dropped by the checkout
        cache.checkout("s2")
        assert cache.keys() == ["w"] and cache.revisit("w")[0] == 2
        cache.store("w", np.full(100, 20))
        branch = cache.commit(label="alt").wait()
        assert branch.parent == 2 and cache.latest() == branch
        assert cache.revisit("w", version="s3")[0] == 3  # the other branch stays readable
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert [(v.id, v.parent) for v in again.versions()] == [(1, None), (2, 1), (3, 2),
                                                               (4, 2)]
        assert again.latest().label == "alt" and again.revisit("w")[0] == 20
        assert "uncommitted" not in again
        again.store("w", np.full(100, 21))
        assert again.commit().wait().parent == 4


def test_restart_sees_the_last_flushed_key_space_and_nothing_else(tmp_path):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        cache.store("a", np.zeros(10))
        cache.commit().wait()
        cache.store("b", np.ones(10))  # outside a commit, made durable by the flush
        cache.discard("a")
        cache.flush()
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert again.keys() == ["b"]
        assert again.revisit("a", version=1)[0] == 0  # still in its version
    assert len(_object_files(tmp_path)) == 2


def test_files_the_catalog_does_not_name_are_garbage(tmp_path):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        cache.store("a", np.zeros(10))
        cache.commit().wait()
    stray = tiered.DirectoryTier(tmp_path / "bb")  # a file written behind the catalog's back
    cache_meta, arrays = tiered.values.flatten(np.ones(10))
    region = np.zeros(cache_meta.nbytes, np.uint8)
    from tiered.movers import leaf_checksums
    from tiered.payload import write_leaves

    write_leaves(region, cache_meta, arrays)
    stray.put("ghost", 99, cache_meta, region, leaf_checksums(region, cache_meta))
    stray.close()
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert again.keys() == ["a"]
        assert any("ghost" in p and "named by no version" in p for p in again.recovery)
    assert not any("ghost" in name for name in _object_files(tmp_path))


def test_a_damaged_copy_is_an_error_never_an_older_version(tmp_path, caplog):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        cache.store("w", np.full(4096, 1.0))
        cache.commit(label="old").wait()
        cache.store("w", np.full(4096, 2.0))
        cache.commit(label="new").wait()
    newest = max((tmp_path / "bb").glob("*w*.tdat"))
    data = bytearray(newest.read_bytes())
    data[100] ^= 0xFF
    newest.write_bytes(bytes(data))
    with tiered.Cache(_tiers(tmp_path)) as again:
        with pytest.raises(tiered.CorruptDataError, match="version 2") as info:
            again.revisit("w")
        assert newest.name in str(info.value) or "w" in str(info.value)
        with caplog.at_level(logging.WARNING):
            latest = again.latest()
        assert latest is not None and latest.label == "old"
        assert "skipped" in caplog.text
        assert again.checkout("old").failed is False  # on purpose: allowed
        assert again.revisit("w")[0] == 1.0
    with tiered.Cache(_tiers(tmp_path)) as third:  # the mark survives restart
        assert [v.failed for v in third.versions()] == [False, True]


def test_a_version_whose_drain_fails_fails_and_the_previous_stays_latest(tmp_path):
    class Breaks(tiered.DirectoryTier):
        broken = False

        def put(self, key, version, meta, region, checksums, **kw):
            if self.broken:
                raise OSError(28, "No space left on device")
            return super().put(key, version, meta, region, checksums, **kw)

    disk = Breaks(tmp_path / "bb")
    cache = tiered.Cache([tiered.HostTier("16MiB"), disk])
    cache.store("a", np.zeros(100))
    good = cache.commit().wait()
    disk.broken = True
    cache.store("a", np.ones(100))
    bad = cache.commit()
    with pytest.raises(VersionFailedError, match="version 2"):
        bad.wait(timeout=30)
    assert bad.failed and cache.latest() == good
    with pytest.raises(tiered.BackgroundError):
        cache.store("b", 1)  # the failure is raised at the next call too
    cache.close(drain=False)
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert [v.id for v in again.versions()] == [1]
        assert again.revisit("a")[0] == 0


def test_retention_keeps_the_newest_and_deletes_only_unreferenced_objects(tmp_path):
    with tiered.Cache(_tiers(tmp_path), keep_last=2) as cache:
        cache.store("fixed", np.arange(10))
        for step in range(5):
            cache.store("w", np.full(10, step))
            cache.commit().wait()
        cache.flush()
        assert [v.id for v in cache.versions()] == [4, 5]
        assert cache.revisit("fixed", version=4)[3] == 3  # carried since version 1
    assert len(_object_files(tmp_path)) == 3  # fixed, w of v4, w of v5
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert [v.id for v in again.versions()] == [4, 5]
        assert again.retain(keep_last=1) == [4]
        assert [v.id for v in again.versions()] == [5]
        with pytest.raises(UnknownVersionError):
            again.revisit("w", version=4)


def test_retention_never_deletes_the_head(tmp_path):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        for step in range(3):
            cache.store("w", np.full(10, step))
            cache.commit(label=f"s{step}").wait()
        cache.checkout("s0")
        assert cache.retain(keep_last=1) == [2]
        assert [v.id for v in cache.versions()] == [1, 3]


def test_retention_racing_with_revisits_and_drains(tmp_path):
    errors: list[BaseException] = []
    with tiered.Cache(_tiers(tmp_path, host="8MiB")) as cache:
        stop = threading.Event()

        def reader():
            while not stop.is_set():
                for v in cache.versions():
                    try:
                        value = cache.revisit("w", version=v)
                        assert value[0] == value[-1]
                    except (UnknownVersionError, UnknownKeyError):
                        pass  # deleted meanwhile: fine
                    except BaseException as exc:
                        errors.append(exc)

        thread = threading.Thread(target=reader)
        thread.start()
        for step in range(30):
            cache.store("w", np.full(50_000, step, np.float32))
            cache.commit()
            cache.retain(keep_last=3)
        stop.set()
        thread.join(60)
        cache.flush()
        assert not errors
        # versions still draining were kept; once durable, retention takes them
        cache.retain(keep_last=3)
        assert [v.id for v in cache.versions()] == [28, 29, 30]
        last = cache.versions()[-1]
        assert cache.revisit("w", version=last)[0] == 29


def test_diff_on_arrays_nested_state_dicts_and_keys(tmp_path):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        model = torch.nn.Linear(4, 3)
        cache.store("model", model.state_dict())
        cache.store("x", np.zeros((3, 4)))
        cache.store("gone", 1)
        a = cache.commit()
        with torch.no_grad():
            model.weight[1, 2] += 0.5
        cache.store("model", model.state_dict())
        x = np.zeros((3, 4))
        x[2, 1] = -3.0
        cache.store("x", x)
        cache.discard("gone")
        cache.store("new", "hello")
        b = cache.commit()
        changes = cache.diff(a, b)
    assert {k: c.kind for k, c in changes.items()} == {
        "gone": "removed", "model": "changed", "new": "added", "x": "changed"}
    (leaf,) = changes["model"].leaves
    assert leaf.path == "['weight']" and leaf.first_index == (1, 2)
    assert leaf.max_abs == pytest.approx(0.5)
    (xleaf,) = changes["x"].leaves
    assert xleaf.first_index == (2, 1) and xleaf.max_abs == 3.0 and xleaf.max_rel is None


def test_compare_two_runs_finds_the_first_version_where_they_differ(tmp_path):
    runs = []
    for name, bump in (("a", None), ("b", 3)):
        cache = tiered.Cache(_tiers(tmp_path / name))
        for step in range(5):
            value = {"u": np.full(8, float(step)), "step": step}
            if step == bump:
                value["u"][5] += 1e-3
            cache.store("state", value)
            cache.commit()
        cache.flush()
        runs.append(cache)
    same = tiered.compare(runs[0], runs[0])
    assert same.first is None and same.compared == 5
    report = tiered.compare(*runs)
    assert report.first == (4, 4) and list(report.keys) == ["state"]
    (leaf,) = report.keys["state"].leaves
    assert leaf.path == "['u']" and leaf.first_index == (5,)
    assert leaf.max_abs == pytest.approx(1e-3)
    for cache in runs:
        cache.close()


def test_a_second_writer_is_refused_and_a_reader_is_allowed(tmp_path):
    writer = tiered.Cache(_tiers(tmp_path))
    writer.store("a", np.zeros(10))
    writer.commit().wait()
    writer.store("a", np.ones(10))  # not committed: a reader does not see it
    writer.flush()
    with pytest.raises(TierLockedError, match=r"pid \d+"):
        tiered.Cache([tiered.DirectoryTier(tmp_path / "bb")])
    with tiered.Cache([tiered.DirectoryTier(tmp_path / "bb")], readonly=True) as reader:
        assert reader.revisit("a")[0] == 0 and reader.latest().id == 1
        for call in (lambda: reader.store("b", 1), lambda: reader.discard("a"),
                     reader.commit, lambda: reader.retain(keep_last=1)):
            with pytest.raises(ReadOnlyError):
                call()
    writer.close()
    with tiered.Cache([tiered.DirectoryTier(tmp_path / "bb")]) as next_writer:
        assert next_writer.revisit("a")[0] == 1


def test_versions_without_a_persistent_tier_live_in_memory(tmp_path):
    with tiered.Cache([tiered.HostTier("4MiB")]) as cache:
        cache.store("a", np.zeros(4))
        v = cache.commit()
        cache.store("a", np.ones(4))
        assert not v.durable and cache.latest() == v
        with pytest.raises(tiered.TieredError, match="memory only"):
            v.wait()
        cache.checkout(v)
        assert cache.revisit("a")[0] == 0


def test_a_commit_writes_only_the_leaves_that_changed(tmp_path):
    rng = np.random.default_rng(1)
    state = {f"layer{i}": rng.standard_normal(65_536).astype(np.float32) for i in range(8)}
    leaf = state["layer0"].nbytes
    with tiered.Cache(_tiers(tmp_path)) as cache:
        cache.store("model", state)
        cache.commit().wait()
        first = cache.stats().tiers["directory"].bytes_written
        for step in range(1, 5):
            state[f"layer{step}"] = state[f"layer{step}"] * 2  # one leaf of eight
            cache.store("model", state)
            cache.commit().wait()
        written = cache.stats().tiers["directory"].bytes_written - first
        assert first >= 8 * leaf and written == 4 * leaf
    with tiered.Cache(_tiers(tmp_path)) as again:  # every version reads back whole
        for v, want in zip(again.versions(), range(5), strict=True):
            got = again.revisit("model", version=v)
            assert float(got["layer4"][0] / state["layer4"][0]) == (1.0 if want == 4 else 0.5)
            np.testing.assert_array_equal(got["layer5"], state["layer5"])
        # retention deletes versions; the files their successors refer to stay
        again.retain(keep_last=1)
        got = again.revisit("model")
        for name, want in state.items():
            np.testing.assert_array_equal(got[name], want)
    with tiered.Cache(_tiers(tmp_path)) as third:
        got = third.revisit("model")
        for name, want in state.items():
            np.testing.assert_array_equal(got[name], want)


def test_skipped_ranges_keep_direct_io_alignment():
    from tiered.tiers.directory import without

    runs = [(0, 1 << 20)]
    assert without(runs, [(4096, 8192)], 4096) == [(0, 4096), (8192, 1 << 20)]
    assert without(runs, [(100, 5000)], 4096) == [(0, 1 << 20)]  # no whole page inside
    assert without(runs, [(100, 9000)], 4096) == [(0, 4096), (8192, 1 << 20)]
    assert without([(0, 4096), (65536, 131072)], [(0, 131072)], 4096) == []
