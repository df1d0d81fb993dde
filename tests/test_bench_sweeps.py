"""``tiered bench sweeps``: new files against reused ones, raw and through tiered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiered.bench import sweeps
from tiered.cli import main


def test_quick_sweeps_compare_new_and_reused_files(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweeps.json"
    assert main(["bench", "sweeps", "--quick", "--workdir", str(tmp_path),
                 "--json", str(out)]) == 0
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == set(sweeps.ROWS)
    for name, row in rows.items():
        assert row["states"] == 24 and row["sweeps"] == 2 and row["state_mib"] == 1
        assert row["wall_s"] > 0 and row["cpu_us_per_state"] > 0
        assert len(row["cpu_us_rounds"]) == 1
        if name in sweeps.PAIRS:  # the second sweep wrote into the first one's files
            base = rows[sweeps.PAIRS[name]]
            assert row["files_reused"] > 0
            assert row["cpu_vs_new_files"] == pytest.approx(  # one round: its own ratio
                row["cpu_us_per_state"] / base["cpu_us_per_state"])
        else:
            assert row["files_reused"] == 0 and row["cpu_vs_new_files"] == 1.0
    # every raw state after the first sweep went into a reused file
    assert rows["raw-reused-files"]["files_reused"] == 24
    assert [p.name for p in tmp_path.iterdir()] == ["sweeps.json"]  # nothing left behind
    assert "tiered-spares" in capsys.readouterr().out


def test_sweeps_reject_bad_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        sweeps.run(states=0)
    with pytest.raises(SystemExit) as exc:
        main(["bench", "sweeps", "--states", "0"])
    assert exc.value.code == 2
    assert "expected a positive integer" in capsys.readouterr().err


def test_ratios_pair_each_round_with_its_own_counterpart(tmp_path: Path) -> None:
    rows = {r["name"]: r for r in sweeps.run(states=4, sweeps=2, rounds=3, workdir=tmp_path)}
    for name, base in sweeps.PAIRS.items():
        pairs = zip(rows[name]["cpu_us_rounds"], rows[base]["cpu_us_rounds"], strict=True)
        ratios = sorted(a / b for a, b in pairs)
        assert rows[name]["cpu_vs_new_files"] == pytest.approx(ratios[1])  # the median
        assert len(rows[name]["cpu_us_rounds"]) == 3
