"""Versions at their edges: failures, races and reopenings found in review."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import tiered
from tiered.catalog import Catalog
from tiered.errors import BackgroundError, VersionFailedError
from tiered.tiers.directory import DirectoryTier
from tiered.tiers.persistent import PersistentTier


def _tiers(root, host="64MiB"):
    return [tiered.HostTier(host), tiered.DirectoryTier(root / "bb")]


def _fail_puts(monkeypatch):
    """Make every directory write fail (a full disk) until the flag is cleared."""
    real = DirectoryTier.put
    state = {"fail": True}

    def put(self, *args, **kw):
        if state["fail"]:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kw)

    monkeypatch.setattr(DirectoryTier, "put", put)
    return state


def test_retention_keeps_the_last_durable_version_while_a_newer_one_drains(tmp_path,
                                                                           monkeypatch):
    cache = tiered.Cache(_tiers(tmp_path))
    cache.store("a", np.zeros(1000))
    v1 = cache.commit().wait()
    state = _fail_puts(monkeypatch)
    cache.store("a", np.ones(1000))
    v2 = cache.commit()
    assert cache.retain(keep_last=1) == []  # v2 is not durable: v1 is what restart has
    with pytest.raises(VersionFailedError):
        v2.wait(timeout=30)
    state["fail"] = False
    assert cache.latest() == v1
    cache.close(drain=False)


def test_a_flush_after_a_failed_commit_comes_back_at_restart(tmp_path, monkeypatch):
    cache = tiered.Cache(_tiers(tmp_path))
    cache.store("a", np.zeros(1000))
    first = cache.commit().wait()
    state = _fail_puts(monkeypatch)
    cache.store("b", np.ones(1000))
    with pytest.raises(VersionFailedError):
        cache.commit().wait(timeout=30)
    state["fail"] = False
    with pytest.raises(BackgroundError):
        cache.flush()  # reports the failure once, and retries the drain
    cache.store("c", np.ones(10))
    cache.flush()
    assert cache.commit().wait().parent == first.id  # not the failed one
    cache.store("d", 1)
    cache.flush()
    cache.close()
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert set(again.keys()) == {"a", "b", "c", "d"}


def test_a_value_no_persistent_tier_can_hold_fails_its_version(tmp_path):
    tiers = [tiered.HostTier("64MiB"), tiered.DirectoryTier(tmp_path / "bb", capacity="1MiB")]
    with tiered.Cache(tiers) as cache:
        cache.store("small", np.zeros(10))
        cache.store("big", np.zeros(1_000_000))  # 8 MB: only host memory holds it
        with pytest.raises(VersionFailedError, match="fits no persistent tier"):
            cache.commit().wait(timeout=30)
        with pytest.raises(BackgroundError):
            cache.flush()


def test_a_reader_keeps_the_files_its_leaves_refer_to(tmp_path):
    def value(a, b):
        return {"c": np.full(100_000, a), "x": np.full(100_000, b)}

    with tiered.Cache(_tiers(tmp_path)) as cache:
        cache.store("k", value(1.0, 0.0))
        cache.commit().wait()
        cache.store("k", value(1.0, 1.0))  # leaf c refers to the first file
        cache.commit().wait()
    cache = tiered.Cache(_tiers(tmp_path))  # only on disk now
    real = PersistentTier.get_into
    entered, go = threading.Event(), threading.Event()

    def paused(self, record, region):
        if not entered.is_set():
            entered.set()
            go.wait(10)
        return real(self, record, region)

    out = {}

    def reader():
        try:
            out["value"] = cache.revisit("k")
        except Exception as exc:  # noqa: BLE001 - reported below
            out["error"] = exc

    PersistentTier.get_into = paused
    try:
        thread = threading.Thread(target=reader)
        thread.start()
        assert entered.wait(10)
        cache.store("k", value(2.0, 2.0))
        cache.commit().wait()
        cache.retain(keep_last=1)  # the version being read goes, its holder must not yet
        cache._deletions.settle(None)
        go.set()
        thread.join(10)
    finally:
        PersistentTier.get_into = real
    cache.close()
    assert "error" not in out, out.get("error")
    assert out["value"]["x"][0] == 1.0 and out["value"]["c"][0] == 1.0
    files = [p for p in (tmp_path / "bb").iterdir() if p.suffix == ".tdat"]
    assert len(files) == 1  # and once the read ended, what only it needed went


def test_a_reader_renames_no_file_when_a_copy_is_corrupt(tmp_path):
    def tiers():
        return [tiered.HostTier("64MiB"), tiered.DirectoryTier(tmp_path / "d1", name="d1"),
                tiered.DirectoryTier(tmp_path / "d2", name="d2")]

    with tiered.Cache(tiers()) as cache:
        cache.store("k", np.arange(100_000.0))
        cache.commit().wait()
    (path,) = [p for p in (tmp_path / "d1").iterdir() if p.suffix == ".tdat"]
    with open(path, "r+b") as fh:
        fh.seek(100)
        fh.write(b"\xff" * 8)
    before = sorted(p.name for p in (tmp_path / "d1").iterdir())
    with tiered.Cache(tiers(), readonly=True) as reader:
        assert reader.revisit("k")[5] == 5.0  # from the deeper copy
    assert sorted(p.name for p in (tmp_path / "d1").iterdir()) == before


def test_a_discard_during_a_flush_stays_discarded(tmp_path):
    cache = tiered.Cache(_tiers(tmp_path))
    cache.store("a", np.zeros(10))
    cache.commit().wait()
    cache.store("k", np.ones(100_000))
    real = Catalog.write_work
    entered, go = threading.Event(), threading.Event()

    def paused(self, head, objects):
        entered.set()
        go.wait(10)
        return real(self, head, objects)

    Catalog.write_work = paused
    try:
        thread = threading.Thread(target=cache.flush)
        thread.start()
        assert entered.wait(10)
        cache.discard("k")  # after flush's snapshot, which names k's file
        cache._deletions.settle(None)
        go.set()
        thread.join(10)
    finally:
        Catalog.write_work = real
    cache.close(drain=False)  # as a crash right after that flush returned
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert again.revisit("k")[0] == 1.0  # the flushed state: k was in it, whole


def test_a_catalog_in_another_tier_is_refused_and_the_locks_released(tmp_path):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        cache.store("a", np.zeros(1000))
        cache.commit(label="one").wait()
    deeper = _tiers(tmp_path) + [tiered.DirectoryTier(tmp_path / "deep", name="deep")]
    with pytest.raises(ValueError, match="catalogued in directory"):
        tiered.Cache(deeper)
    with tiered.Cache(_tiers(tmp_path)) as again:  # same process: nothing left locked
        assert [v.label for v in again.versions()] == ["one"]


def test_a_damaged_working_state_falls_back_to_the_head(tmp_path):
    with tiered.Cache(_tiers(tmp_path)) as cache:
        cache.store("a", 1)
        cache.commit().wait()
        cache.store("b", 2)
        cache.flush()
    (tmp_path / "bb" / ".tiered" / "work.json").write_text('{"head": 1, "seq": 1}')
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert again.keys() == ["a"]
        assert any("damaged working state" in p for p in again.recovery)


def _store(cache, key, value):
    """Store, past a background failure reported once at the start of the call."""
    try:
        cache.store(key, value)
    except BackgroundError:
        cache.store(key, value)


def _fail_version_2_after_its_record(tmp_path, monkeypatch, *, removable=True):
    """Commit version 1, then fail version 2 after its record's rename (EIO on the fsync of
    the versions directory; with ``removable=False`` the record cannot be removed either)."""
    import tiered.catalog as catalog
    cache = tiered.Cache(_tiers(tmp_path))
    cache.store("a", np.zeros(100))
    cache.commit().wait()
    real = catalog.fsync_dir

    def failing(path):
        if path.name == "versions":
            raise OSError(5, "Input/output error")
        return real(path)

    def stuck(path):
        if "versions" in str(path):
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(catalog, "fsync_dir", failing)
    if not removable:
        monkeypatch.setattr(catalog, "unlink_quietly", stuck)
    cache.store("b", np.ones(100))
    with pytest.raises(VersionFailedError):
        cache.commit().wait(timeout=30)
    monkeypatch.setattr(catalog, "fsync_dir", real)
    return cache


def test_a_commit_failing_after_its_record_is_renamed_is_not_the_head_at_restart(
        tmp_path, monkeypatch):
    cache = _fail_version_2_after_its_record(tmp_path, monkeypatch)
    _store(cache, "c", np.full(100, 3.0))
    cache.flush()
    cache.close()
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert [v.id for v in again.versions()] == [1]
        assert again.latest().id == 1
        assert sorted(again.keys()) == ["a", "b", "c"]  # the flushed key space, whole
        assert float(again.revisit("c")[0]) == 3.0


def test_a_record_left_by_a_failed_commit_does_not_become_the_head(tmp_path, monkeypatch):
    cache = _fail_version_2_after_its_record(tmp_path, monkeypatch, removable=False)
    _store(cache, "c", np.full(100, 3.0))
    cache.flush()
    cache.close()
    assert (tmp_path / "bb" / ".tiered" / "versions" / "v00000002.json").exists()
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert again.latest().id == 1
        assert float(again.revisit("c")[0]) == 3.0  # the flushed working state counts


def test_a_record_left_by_a_failed_commit_is_not_the_head_even_without_a_flush(
        tmp_path, monkeypatch):
    cache = _fail_version_2_after_its_record(tmp_path, monkeypatch, removable=False)
    cache.close(drain=False)  # no flush: as good as a crash for the catalog
    assert (tmp_path / "bb" / ".tiered" / "versions" / "v00000002.json").exists()
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert again.latest().id == 1


def test_after_two_failed_commits_the_next_descends_from_the_last_sound_one(tmp_path,
                                                                            monkeypatch):
    cache = tiered.Cache(_tiers(tmp_path))
    cache.store("a", np.zeros(100))
    v1 = cache.commit().wait()
    state = _fail_puts(monkeypatch)
    cache.store("b", np.ones(100))
    v2 = cache.commit()
    cache.store("c", np.ones(100))
    v3 = cache.commit()  # committed on v2, which will fail too
    for v in (v2, v3):
        with pytest.raises(VersionFailedError):
            v.wait(timeout=30)
    state["fail"] = False
    _store(cache, "d", np.ones(100))
    v4 = cache.commit().wait()
    assert v4.parent == v1.id
    cache.close()
    with tiered.Cache(_tiers(tmp_path)) as again:
        assert [(v.id, v.parent) for v in again.versions()] == [(1, None), (4, 1)]


def test_a_failed_open_stops_its_restart_drains_before_it_unlocks(tmp_path, monkeypatch):
    import tiered.deletion as deletion
    tiers = lambda: [tiered.HostTier("16MiB"), DirectoryTier(tmp_path / "ssd", name="ssd"),  # noqa: E731
                     DirectoryTier(tmp_path / "bb", name="bb")]
    with tiered.Cache(tiers()) as cache:
        cache.store("a", np.zeros(100_000))
        cache.commit().wait()
    home = [p for p in (tmp_path / "bb").iterdir() if p.suffix == ".tdat"]
    for p in home:  # an upper copy stays: restart drains it home again
        (tmp_path / "ssd" / p.name).write_bytes(p.read_bytes())
        p.unlink()
    real_put = DirectoryTier.put
    started, inside = [], []

    def put(self, *args, **kw):  # a slow write: the drain home takes a while
        started.append(1)
        inside.append(1)
        time.sleep(0.2)
        try:
            return real_put(self, *args, **kw)
        finally:
            inside.pop()

    def refuse(self, doomed, *, recycle=True):  # removing garbage fails, restart drain queued
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(DirectoryTier, "put", put)
    monkeypatch.setattr(deletion.Deletions, "unlink", refuse)
    with pytest.raises(OSError, match="Permission denied"):
        tiered.Cache(tiers())
    writes = len(started)
    time.sleep(0.5)  # nothing of the failed cache writes once its open has failed
    assert len(started) == writes and not inside
    monkeypatch.undo()
    with tiered.Cache(tiers()) as again:  # the locks are free
        assert float(again.revisit("a")[0]) == 0.0


def test_commits_from_several_threads_keep_one_lineage(tmp_path):
    cache = tiered.Cache(_tiers(tmp_path))

    def work(t):
        for i in range(15):
            cache.store(f"t{t}", np.full(1000, i, np.float32))
            cache.commit(meta={"thread": t, "i": i})

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for v in cache.versions():
        v.wait(timeout=60)
    cache.close()
    with tiered.Cache(_tiers(tmp_path)) as again:
        versions = again.versions()
        ids = [v.id for v in versions]
        assert ids == list(range(1, 61))
        assert all(v.parent == v.id - 1 or (v.id == 1 and v.parent is None) for v in versions)
        assert again.latest().id == 60
        assert {k: float(again.revisit(k)[0]) for k in again.keys()} == {
            f"t{t}": 14.0 for t in range(4)}
