"""Restart and real faults: new processes, kill -9, flipped bytes, full disks, lane errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from writer_proc import tiers, value

import tiered

WRITER = str(Path(__file__).with_name("writer_proc.py"))


def _run(*args: str, timeout: float = 120) -> str:
    proc = subprocess.run([sys.executable, WRITER, *args], capture_output=True, text=True,
                          timeout=timeout, check=True)
    return proc.stdout


@pytest.mark.parametrize("write_back", ["eager", "lazy"])
def test_restart_in_a_new_process_sees_every_entry(tmp_path, write_back):
    assert _run("write", str(tmp_path), "12", write_back).strip() == "done"
    with tiered.Cache(tiers(tmp_path)) as cache:
        assert cache.recovery == []
        assert sorted(cache.keys()) == [("state", i) for i in range(12)]
        for i in range(12):
            got = cache.revisit(("state", i))
            np.testing.assert_array_equal(got["u"], value(i)["u"])
            assert got["step"] == i and got["tag"] == f"s{i}"


@pytest.mark.parametrize(("delay", "write_back"),
                         [(0.3, "eager"), (0.8, "eager"), (1.5, "eager"), (0.8, "lazy")])
def test_kill_9_mid_drain_leaves_nothing_corrupt(tmp_path, delay, write_back):
    proc = subprocess.Popen([sys.executable, WRITER, "forever", str(tmp_path), write_back],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    while "stored 30" not in proc.stdout.readline():  # well into draining
        pass
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    with tiered.Cache(tiers(tmp_path)) as cache:
        assert len(cache) > 0
        for key in cache.keys():
            got = cache.revisit(key)  # verified on the way up: raises if corrupt
            assert got["u"][0] == got["step"] and got["tag"] == f"s{got['step']}"
            assert key == ("state", got["step"] % 50)
        assert all("incomplete write" in p or "superseded" in p for p in cache.recovery)
    for sub in ("bb", "pfs"):
        assert not any(p.name.startswith(".tmp-") for p in (tmp_path / sub).iterdir())


def _flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x40]))


def test_flipped_payload_byte_is_reported_not_returned(tmp_path):
    layers = lambda: [tiered.HostTier("4MiB"), tiered.DirectoryTier(tmp_path / "bb")]  # noqa: E731
    with tiered.Cache(layers()) as cache:
        cache.store("k", value(1))
        cache.store("other", value(2))
    (path,) = [p for p in (tmp_path / "bb").iterdir() if "k" in p.name and "other" not in p.name]
    _flip_byte(path, 1000)
    with tiered.Cache(layers()) as cache:
        with pytest.raises(tiered.CorruptDataError, match="checksum") as info:
            cache.revisit("k")
        with pytest.raises(tiered.CorruptDataError):
            cache.revisit("k")  # still reported, never returned
        assert info.value.key == "k" and info.value.tier == "directory"
        assert isinstance(info.value, OSError)
        np.testing.assert_array_equal(cache.revisit("other")["u"], value(2)["u"])
        assert cache.stats().corrupt_reads == 2


def test_flipped_byte_falls_back_to_a_good_lower_copy_and_quarantines(tmp_path):
    with tiered.Cache(tiers(tmp_path)) as cache:
        cache.store("k", value(5))
    (path,) = list((tmp_path / "bb").iterdir())
    _flip_byte(path, 4096)
    with tiered.Cache(tiers(tmp_path)) as cache:
        np.testing.assert_array_equal(cache.revisit("k")["u"], value(5)["u"])
        assert cache.stats().corrupt_reads == 1
        np.testing.assert_array_equal(cache.revisit("k")["u"], value(5)["u"])
    assert [p.suffix for p in (tmp_path / "bb").iterdir()] == [".corrupt"]
    with tiered.Cache(tiers(tmp_path)) as cache:  # the quarantined file is not loaded again
        np.testing.assert_array_equal(cache.revisit("k")["u"], value(5)["u"])
        assert cache.stats().corrupt_reads == 0


def test_flipped_manifest_byte_is_set_aside_at_open(tmp_path):
    layers = lambda: [tiered.DirectoryTier(tmp_path / "bb")]  # noqa: E731
    with tiered.Cache(layers()) as cache:
        cache.store("k", value(1))
    (path,) = list((tmp_path / "bb").iterdir())
    _flip_byte(path, path.stat().st_size - 40)
    with tiered.Cache(layers()) as cache:
        assert "k" not in cache
        assert len(cache.recovery) == 1 and "damaged" in cache.recovery[0]


def test_flipped_hdf5_byte_is_detected(tmp_path):
    layers = lambda: [tiered.HDF5Tier(tmp_path / "pfs")]  # noqa: E731
    with tiered.Cache(layers()) as cache:
        cache.store("k", value(3))
    (path,) = list((tmp_path / "pfs").iterdir())
    import h5py
    with h5py.File(path, "r") as f:
        offset = f["leaves/0"].id.get_offset()
    _flip_byte(path, offset + 123)
    with tiered.Cache(layers()) as cache, pytest.raises(tiered.CorruptDataError):
        cache.revisit("k")


def test_file_size_limit_surfaces_as_error_with_earlier_entries_intact(tmp_path):
    out = json.loads(_run("fsize", str(tmp_path)).strip().splitlines()[-1])
    assert out["flush"].startswith("BackgroundError") and "File too large" in out["flush"]
    assert out["big_still_readable"] is True  # nothing lost: it stayed in host memory
    with tiered.Cache([tiered.DirectoryTier(tmp_path / "bb")]) as cache:
        assert sorted(cache.keys(), key=str) == [0, 1, 2]
        for i in range(3):
            np.testing.assert_array_equal(cache.revisit(i)["u"], value(i)["u"])


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr!r}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("direct", [False, True])  # tmpfs takes O_DIRECT since Linux 6.6
def test_full_filesystem_surfaces_at_flush_and_keeps_data(tmp_path, tiny_tmpfs, direct):
    disk = tiered.DirectoryTier(tiny_tmpfs, direct=direct)
    cache = tiered.Cache([tiered.HostTier("16MiB"), disk])
    for i in range(2):
        cache.store(i, value(i))  # 1 MiB each: fits
    cache.flush()
    if direct and not disk.direct:
        cache.close()
        pytest.skip("this kernel's tmpfs refuses O_DIRECT (it takes it since Linux 6.6)")
    errors = []
    for i in range(2, 6):  # the disk fills up here; the error surfaces at the next call
        for _attempt in range(6):  # each failed drain is reported once, at some next call
            try:
                cache.store(i, value(i))
                break
            except tiered.BackgroundError as exc:
                errors.append(exc)
        else:
            raise AssertionError("store kept reporting the same background error")
    try:
        cache.flush()
    except tiered.BackgroundError as exc:
        errors.append(exc)
    assert errors and all(isinstance(e.__cause__, OSError) for e in errors)
    assert "No space left" in str(errors[0])
    for i in range(6):  # nothing lost: the undrained ones are still in host memory
        np.testing.assert_array_equal(cache.revisit(i)["u"], value(i)["u"])
    with pytest.raises(tiered.BackgroundError, match="No space left"):
        cache.flush()  # flush retries the failed drains; the disk is still full
    cache.close(drain=False)
    assert not any(p.name.startswith(".tmp-") for p in tiny_tmpfs.iterdir())
    assert disk.direct == direct  # the direct run wrote with O_DIRECT to the end
    with tiered.Cache([tiered.DirectoryTier(tiny_tmpfs)]) as again:
        assert {0, 1} <= set(again.keys())
        for i in again.keys():  # what was written before the disk filled reads back whole
            np.testing.assert_array_equal(again.revisit(i)["u"], value(i)["u"])


def test_lane_error_surfaces_at_next_call_and_flush_retries(tmp_path):
    cache = tiered.Cache([tiered.HostTier("16MiB"), tiered.DirectoryTier(tmp_path / "bb")])
    shutil.rmtree(tmp_path / "bb")  # every write into the tier now fails
    cache.store("a", value(1))
    with pytest.raises(tiered.BackgroundError, match="No such file"):
        cache.flush()
    # the drain started by store failed; flush may have retried it once more before waiting
    assert 1 <= cache.stats().background_errors <= 2
    (tmp_path / "bb").mkdir()
    cache.flush()  # retried, succeeds
    cache.close()
    with tiered.Cache([tiered.DirectoryTier(tmp_path / "bb")]) as again:
        np.testing.assert_array_equal(again.revisit("a")["u"], value(1)["u"])


@pytest.mark.parametrize("call", ["store", "revisit", "discard", "hint"])
def test_a_background_error_is_raised_once_by_the_next_call_which_does_nothing(tmp_path, call):
    """The documented rule: the next call raises it, names the keys, and is not carried out."""
    cache = tiered.Cache([tiered.HostTier("16MiB"), tiered.DirectoryTier(tmp_path / "bb")])
    cache.store("kept", value(0))
    cache.flush()
    shutil.rmtree(tmp_path / "bb")  # every write into the tier now fails
    cache.store("lost-drain", value(1))
    deadline = time.monotonic() + 10
    while cache.stats().background_errors == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    action = {"store": lambda: cache.store("new", value(2)),
              "revisit": lambda: cache.revisit("kept"),
              "discard": lambda: cache.discard("kept"),
              "hint": lambda: cache.hint(["kept"])}[call]
    with pytest.raises(tiered.BackgroundError) as failed:
        action()
    message = str(failed.value)
    assert failed.value.keys == ("lost-drain",) and "'lost-drain'" in message
    assert f"{call}: " in message and "was not carried out" in message
    assert ("new" not in cache) and ("kept" in cache)  # the call did nothing
    action()  # raised once: the repeated call does its work
    assert ("new" in cache) == (call == "store") and ("kept" in cache) == (call != "discard")
    np.testing.assert_array_equal(cache.revisit("lost-drain")["u"], value(1)["u"])  # kept
    cache.close(drain=False)
