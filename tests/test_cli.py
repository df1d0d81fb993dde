"""The ``tiered`` command line: demo, info (clean and corrupted), argument errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tiered
from tiered.cli import main


def test_demo_runs_and_summarises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--steps", "6", "--n", "128", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "history: 6 states" in out
    assert "results identical: yes" in out
    assert list(tmp_path.iterdir()) == []  # the demo's temporary tiers are gone


def _populate(root: Path) -> None:
    with tiered.Cache([tiered.HostTier("8MiB"), tiered.DirectoryTier(root)]) as cache:
        for i in range(3):
            cache.store(("state", i), np.full(1000, i, dtype=np.float64))


def test_info_lists_verified_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _populate(tmp_path)
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "3 objects" in out
    assert out.count("  verified\n") == 3


def test_info_reports_flipped_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _populate(tmp_path)
    victim = max((p for p in tmp_path.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert main(["info", str(tmp_path)]) == 1
    assert "CORRUPT" in capsys.readouterr().out


def test_info_on_missing_path_is_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a directory"):
        main(["info", str(tmp_path / "nope")])


def test_bad_sizes_argument_exits_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "capture", "--sizes-mib", "four"])
    assert exc.value.code == 2
    assert "--sizes-mib" in capsys.readouterr().err


def test_bench_history_reports_cost_per_call(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import json

    out = tmp_path / "history.json"
    assert main(["bench", "history", "--counts", "50,400", "--state-kib", "1",
                 "--workdir", str(tmp_path), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["states"] for r in rows] == [50, 400]
    for row in rows:
        for col in ("limit_store_us", "dict_store_us", "store_us", "revisit_us"):
            assert row[col] > 0, col
    assert rows[0]["store_growth"] == 1.0
    assert rows[1]["store_growth"] == pytest.approx(rows[1]["store_us"] / rows[0]["store_us"])
    assert list(tmp_path.iterdir()) == [out]  # its tiers are gone
    for bad in ("many", "0,10"):
        with pytest.raises(SystemExit):
            main(["bench", "history", "--counts", bad])
        assert "comma-separated positive integers" in capsys.readouterr().err
