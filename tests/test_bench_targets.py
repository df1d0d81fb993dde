"""The adjoint benchmark's targets, judged on rows with known ratios."""

from __future__ import annotations

from typing import Any

from tiered.bench import targets
from tiered.bench.adjoint import add_ratios


def _row(regime: str, name: str, wall: float, forward: float | None = None) -> dict[str, Any]:
    return {"regime": regime, "name": name, "wall_s": wall,
            "forward_s": wall / 2 if forward is None else forward}


def _by(verdicts: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(v["regime"], v["target"]): v for v in verdicts}


def test_page_cache_targets_are_ratios_to_np_save_and_compute_only() -> None:
    rows = [_row("page-cache", name, wall) for name, wall in (
        ("compute-only", 1.0), ("np.save/np.load", 1.5), ("tiered-reverse", 1.52),
        ("tiered-multistage", 3.0), ("pyrevolve-memory", 2.0), ("pyrevolve-disk", 2.5))]
    v = _by(targets.judge(add_ratios(rows)))
    slower = v["page-cache", "not slower than np.save"]
    assert slower["row"] == "tiered-reverse"  # the fastest tiered row is judged
    assert slower["met"] and slower["value"] == round(1.52 / 1.5, 3)
    near = v["page-cache", "within 1.1x compute only (goal)"]
    assert near["met"] is False and near["value"] == 1.52
    ahead = v["page-cache", "ahead of pyrevolve and checkpoint_schedules"]
    assert ahead["met"] and ahead["value"] == round(2.0 / 1.52, 3)
    assert "pyrevolve-memory" in ahead["why"]
    rows[2]["wall_s"] = 1.6  # 1.07x np.save's time: slower than allowed
    v = _by(targets.judge(add_ratios(rows)))
    assert v["page-cache", "not slower than np.save"]["met"] is False


def test_beyond_memory_says_when_2x_is_out_of_reach_and_when_1_1x_applies() -> None:
    # np.save takes 1.5x compute only: no configuration can be 2x faster than it
    rows = [_row("beyond-memory", "compute-only", 2.0, forward=1.0),
            _row("beyond-memory", "np.save/np.load", 3.0, forward=1.6),
            _row("beyond-memory", "tiered-reverse", 2.1)]
    v = _by(targets.judge(add_ratios(rows)))
    faster = v["beyond-memory", "2x faster than np.save"]
    assert faster["met"] is False and "out of reach for every configuration" in faster["why"]
    near = v["beyond-memory", "within 1.1x compute only when compute >= I/O"]
    assert near["met"] is True and near["value"] == 1.05  # compute 1.0 s >= I/O 0.6 s
    assert v["beyond-memory", "ahead of pyrevolve and checkpoint_schedules"]["met"] is None
    # np.save's forward I/O (2.0 s) exceeds the forward compute (1.0 s): 1.1x does not apply
    rows[1].update(wall_s=5.0, forward_s=3.0)
    v = _by(targets.judge(add_ratios(rows)))
    assert v["beyond-memory", "within 1.1x compute only when compute >= I/O"]["met"] is None
    faster = v["beyond-memory", "2x faster than np.save"]
    assert faster["met"] is True and "out of reach" not in faster["why"]


def test_a_regime_without_tiered_rows_gets_no_verdicts_and_report_has_a_line_each() -> None:
    rows = [_row("page-cache", "compute-only", 1.0), _row("page-cache", "np.save/np.load", 1.2),
            _row("beyond-memory", "compute-only", 1.0),
            _row("beyond-memory", "np.save/np.load", 1.2),
            _row("beyond-memory", "tiered-reverse", 1.3),
            _row("beyond-memory", "schedules-multistage-numpy", 1.2)]
    verdicts = targets.judge(add_ratios(rows))
    assert {v["regime"] for v in verdicts} == {"beyond-memory"}
    ahead = _by(verdicts)["beyond-memory", "ahead of pyrevolve and checkpoint_schedules"]
    assert ahead["met"] is False  # the schedule's row was faster
    lines = targets.report(verdicts).splitlines()
    assert len(lines) == len(verdicts) == 3
    assert lines[0].startswith("beyond-memory  missed")


def test_rounds_are_paired_with_the_references_and_their_spread_is_reported() -> None:
    rows = [_row("beyond-memory", "compute-only", 2.0, forward=1.0),
            _row("beyond-memory", "np.save/np.load", 3.0, forward=1.6),
            _row("beyond-memory", "bare-thread", 2.1),
            _row("beyond-memory", "tiered-reverse", 2.2)]
    walls = {"compute-only": [2.0, 2.5, 1.8], "np.save/np.load": [3.0, 3.1, 2.9],
             "bare-thread": [2.1, 2.2, 2.0], "tiered-reverse": [2.2, 2.0, 2.7]}
    for row in rows:
        row["wall_s_rounds"] = walls[row["name"]]
    by = {r["name"]: r for r in add_ratios(rows)}
    tiered = by["tiered-reverse"]
    assert tiered["vs_compute_rounds"] == [2.2 / 2.0, 2.0 / 2.5, 2.7 / 1.8]
    assert tiered["vs_bare_thread_rounds"] == [2.2 / 2.1, 2.0 / 2.2, 2.7 / 2.0]
    v = _by(targets.judge(rows))
    assert "(per round 0.80-1.50x)" in v["beyond-memory",
                                          "within 1.1x compute only when compute >= I/O"]["why"]
    single = [{"regime": r["regime"], "name": r["name"], "wall_s": r["wall_s"],
               "forward_s": r["forward_s"], "wall_s_rounds": r["wall_s_rounds"][:1]}
              for r in rows]  # one round: nothing to pair
    assert all("vs_compute_rounds" not in r for r in add_ratios(single))
