"""The ``tiered`` command line: demo, info (clean and corrupted), argument errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tiered
from tiered.cli import main


def test_demo_runs_says_which_run_is_which_and_keeps_its_tier(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--steps", "6", "--n", "128", "--rounds", "2",
                 "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "6 states of 128x128 float32" in out
    assert "run A  np.save" in out and "run B  tiered" in out
    assert "regime: durable checkpoints" in out and "every round: " in out
    assert "results identical: yes" in out
    (kept,) = tmp_path.iterdir()  # the scratch files are gone, the tier stays
    assert kept.name.startswith("tiered-demo-") and f"tiered info {kept}" in out
    assert main(["info", str(kept)]) == 0
    assert "6 objects" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["demo", "--steps", "-3"], ["demo", "--n", "0"],
                                  ["demo", "--rounds", "x"]])
def test_demo_rejects_bad_sizes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "expected a positive integer" in capsys.readouterr().err


def test_demo_config_is_validated() -> None:
    from tiered.demo import DemoConfig

    with pytest.raises(ValueError, match="steps"):
        DemoConfig(steps=-3)


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


@pytest.mark.parametrize("where", ["missing", "foreign", "empty"])
def test_info_on_a_path_that_is_no_tier_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    path = tmp_path / "nope"
    if where != "missing":
        path.mkdir()
    if where == "foreign":
        (path / "passwd").write_text("root:x:0:0\n")
    assert main(["info", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"tiered info: {path}")
    assert ("no such directory" if where == "missing" else "holds no tiered objects") in line


def test_python_m_tiered_and_version() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "tiered", "--version"], capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == f"tiered {tiered.__version__}"


def _parsers(parser: Any) -> Any:
    import argparse

    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_help_has_no_markup_and_every_option_a_help_text(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tiered.cli import _parser

    for parser in _parsers(_parser()):
        for action in parser._actions:
            assert action.help, f"{parser.prog}: {action.option_strings or action.dest}"
        text = parser.format_help()
        assert "``" not in text and ":func:" not in text, parser.prog


def test_tables_fit_100_columns_and_name_what_they_leave_out() -> None:
    from tiered.console import table

    rows = [{f"column_{i}": 1.0 / (i + 1) for i in range(30)} for _ in range(3)]
    text = table(rows, list(rows[0]))
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "column_0" in text.splitlines()[0] and "column_29" in text.splitlines()[-1]
    assert "in the JSON too" in text
    assert table([], ["a", "bb"]) == "a  bb"


def test_revisit_trace_with_plot_is_refused_before_running(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "revisit", "--trace", "--plot", "x.png"]) == 2
    assert "--trace" in capsys.readouterr().err


def test_bench_revisit_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs the plot extra")
    png, out = tmp_path / "stall.png", tmp_path / "revisit.json"
    assert main(["bench", "revisit", "--quick", "--workdir", str(tmp_path),
                 "--json", str(out), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(len(r["revisit_step_s"]) == 12 for r in json.loads(out.read_text())["rows"]
               if r["name"] != "compute-only")


def test_adjoint_plot_draws_every_row(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs the plot extra")
    from tiered.bench import plots

    rows = [{"regime": regime, "name": name, "vs_compute": v}
            for regime in ("page-cache", "beyond-memory")
            for name, v in (("compute-only", 1.0), ("np.save/np.load", 1.6), ("tiered", 1.05))]
    png = plots.adjoint(rows, tmp_path / "adjoint.png")
    assert png.stat().st_size > 1000


def test_bad_sizes_argument_exits_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "capture", "--sizes-mib", "four"])
    assert exc.value.code == 2
    assert "--sizes-mib" in capsys.readouterr().err


def test_bench_history_reports_cost_per_call(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
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


def test_bench_interference_sizes_itself_to_the_disk(tmp_path: Path) -> None:
    from tiered.bench import interference

    # 2 MiB drains long before 8 compute runs on any disk: it must grow, not crash
    rows = interference.run(total_mib=2, value_mib=1, seconds=0.1, workdir=tmp_path)
    assert len(rows) == 6
    for row in rows:
        assert row["loops"] >= interference.MIN_LOOPS, row
        assert row["alone_s"] > 0 and row["loaded_s"] > 0
    assert max(r["written_mib"] for r in rows) > 2
    assert list(tmp_path.iterdir()) == []
