"""``tiered versions`` and ``tiered diff`` on real tiers."""

from __future__ import annotations

import numpy as np

import tiered
from tiered.cli import main


def _run(root, offset=0.0):
    with tiered.Cache([tiered.DirectoryTier(root)]) as cache:
        for step in range(3):
            cache.store("u", {"x": np.full(10, float(step)) + (step == 2) * offset,
                              "step": step})
            cache.commit(label=f"s{step}")
        cache.checkout("s1")
        cache.store("u", {"x": np.full(10, 9.0), "step": 9})
        cache.commit(label="alt")


def test_versions_prints_the_tree_with_the_head(tmp_path, capsys):
    _run(tmp_path)
    assert main(["versions", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["v1", "v2", "v3", "*"]
    assert "'alt'" in lines[3] and lines[3].index("v4") == lines[2].index("v3")  # siblings
    assert all("durable" in line for line in lines)


def test_versions_of_a_tier_that_never_committed(tmp_path, capsys):
    with tiered.Cache([tiered.DirectoryTier(tmp_path)]) as cache:
        cache.store("a", 1)
    assert main(["versions", str(tmp_path)]) == 0
    assert "no versions" in capsys.readouterr().out


def test_diff_names_the_changed_leaves_and_exits_1(tmp_path, capsys):
    _run(tmp_path)
    assert main(["diff", str(tmp_path), "s0", "alt"]) == 1
    out = capsys.readouterr().out
    assert "changed  'u'" in out and "['x']: max abs 9" in out and "first at [0]" in out
    assert main(["diff", str(tmp_path), "1", "s0"]) == 0
    assert "no differences" in capsys.readouterr().out
    assert main(["diff", str(tmp_path), "s0", "nope"]) == 2
    assert "no version is labelled 'nope'" in capsys.readouterr().err


def test_diff_runs_finds_the_first_differing_version(tmp_path, capsys):
    _run(tmp_path / "a")
    _run(tmp_path / "b", offset=1e-6)
    assert main(["diff", "--runs", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "first differ at version 3" in out and "max abs 1e-06" in out
    assert main(["diff", "--runs", str(tmp_path / "a"), str(tmp_path / "a")]) == 0
    assert main(["diff", "--runs", str(tmp_path / "a"), str(tmp_path / "nowhere")]) == 2
