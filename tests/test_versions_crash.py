"""kill -9 during commits (at each named crash point, and at random moments): restart sees a
whole version, never a mix, and nothing discarded or superseded comes back."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tiered
from tiered.crashpoints import ENV, POINTS

COMMITTER = textwrap.dedent("""
    import sys
    import numpy as np
    import tiered

    root = sys.argv[1]
    cache = tiered.Cache([tiered.HostTier("16MiB"), tiered.DirectoryTier(root)])
    cache.store("a", np.full(4096, 1.0))
    cache.store("b", np.full(4096, 1.0))
    cache.commit(label="one").wait()
    print("one", flush=True)
    cache.store("a", np.full(4096, 2.0))
    cache.store("c", np.full(4096, 2.0))
    cache.discard("b")
    cache.commit(label="two").wait()
    print("two", flush=True)
    cache.close()
""")
ONE = {"a": 1.0, "b": 1.0}
TWO = {"a": 2.0, "c": 2.0}


def _run(root, point):
    env = {**os.environ, ENV: f"{point}@2"}  # in the second commit
    return subprocess.run([sys.executable, "-c", COMMITTER, str(root)], env=env,
                          capture_output=True, text=True, timeout=120)


def _space(cache):
    return {k: float(cache.revisit(k)[0]) for k in cache.keys()}


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("trial", range(3))
def test_a_commit_killed_at_a_named_point_leaves_a_whole_version(tmp_path, point, trial):
    proc = _run(tmp_path, point)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.split() == ["one"]  # killed inside the second commit
    with tiered.Cache([tiered.DirectoryTier(tmp_path)]) as again:
        ids = [v.id for v in again.versions()]
        committed = point in ("commit.record-renamed", "commit.dir-synced")
        assert ids == ([1, 2] if committed else [1])
        latest = again.latest()  # a durable record is the head, moved on disk or not
        assert latest is not None and latest.id == (2 if committed else 1)
        assert _space(again) == (TWO if committed else ONE)
        for v in again.versions():  # every listed version is whole
            want = ONE if v.id == 1 else TWO
            assert {k: float(again.revisit(k, version=v)[0]) for k in v.keys} == want
    names = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".tdat")
    assert len(names) == (2 if ids == [1] else 4)  # garbage of the lost commit is gone


def test_an_uninterrupted_run_ends_at_the_second_version(tmp_path):
    proc = _run(tmp_path, "none")
    assert proc.returncode == 0, proc.stderr
    with tiered.Cache([tiered.DirectoryTier(tmp_path)]) as again:
        assert again.latest().label == "two" and _space(again) == TWO


def _state(step):
    """The key space after ``step`` steps of WORKLOAD (key -> the step that stored it)."""
    keys = {}
    for s in range(step):
        keys[f"k{s % 5}"] = s
        if s % 7 == 6:
            keys.pop(f"k{(s + 2) % 5}", None)
    return keys


WORKLOAD = textwrap.dedent("""
    import sys
    import numpy as np
    import tiered

    cache = tiered.Cache([tiered.HostTier("2MiB"), tiered.DirectoryTier(sys.argv[1])])
    for step in range(1, 400):
        s = step - 1
        cache.store(f"k{s % 5}", np.full(20_000, s, np.float32))
        if s % 7 == 6 and f"k{(s + 2) % 5}" in cache:
            cache.discard(f"k{(s + 2) % 5}")
        if step % 3 == 0:
            if step % 2:
                cache.flush()
            else:
                cache.commit(meta={"step": step}).wait()
            print(step, flush=True)
""")


@pytest.mark.parametrize("trial", range(6))
def test_kill_9_at_a_random_moment_restarts_at_the_last_sync_point(tmp_path, trial):
    proc = subprocess.Popen([sys.executable, "-c", WORKLOAD, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    while int(proc.stdout.readline() or 0) < 12:  # past the first commit
        pass
    time.sleep(random.Random(trial).uniform(0.0, 0.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    printed = [int(line) for line in proc.stdout.read().split()]
    proc.stdout.close()
    last = max([12, *printed])
    with tiered.Cache([tiered.DirectoryTier(tmp_path)]) as again:
        got = {k: int(again.revisit(k)[0]) for k in again.keys()}
        for k in again.keys():
            value = again.revisit(k)
            assert np.all(value == value[0])  # whole values only
        assert got in (_state(last), _state(last + 3)), (last, got)
        versions = again.versions()
        for v in versions:  # each committed version is the state at its step
            step = v.meta["step"]
            assert {k: int(again.revisit(k, version=v)[0]) for k in v.keys} == _state(step)
        if versions:
            assert json.dumps(versions[-1].meta)
