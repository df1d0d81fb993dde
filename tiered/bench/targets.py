"""The adjoint benchmark's targets, judged on the rows of one run.

Each verdict names a target of the adjoint issue, the tiered row it judged (the fastest
tiered row of the regime), the measured value, the limit, and ``met``: ``True``, ``False``,
or ``None`` where the target does not apply to this run (its condition does not hold, or a
row it needs did not run). ``why`` says, in words, what decided it, including when a target
is out of reach for every configuration (``speedup_bound`` below the line).
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]

NOT_SLOWER = 1.05  # page cache: at most this multiple of np.save's wall time
NEAR_COMPUTE = 1.1  # both regimes: at most this multiple of compute only's wall time
FASTER = 2.0  # beyond memory: at least this speed-up over np.save
RECOMPUTING = ("pyrevolve-memory", "pyrevolve-disk", "schedules-multistage-numpy")


def judge(rows: list[Row]) -> list[Row]:
    """Judge every target on ``rows`` (as :func:`tiered.bench.adjoint.run` returns them).

    Parameters
    ----------
    rows : list of dict
        One row per configuration and regime, with ``wall_s``, ``forward_s`` and the ratios
        of :func:`tiered.bench.adjoint.add_ratios`; each regime present needs its
        ``compute-only`` and ``np.save/np.load`` rows.

    Returns
    -------
    list of dict
        One verdict per target and regime: ``regime``, ``target``, ``row``, ``value``,
        ``limit``, ``met`` and ``why``. Regimes with no tiered row get none.
    """
    out: list[Row] = []
    for regime in dict.fromkeys(r["regime"] for r in rows):
        same = {r["name"]: r for r in rows if r["regime"] == regime}
        tiered = [r for name, r in same.items() if name.startswith("tiered")]
        if not tiered:
            continue
        best = min(tiered, key=lambda r: r["wall_s"])
        judged = (_page_cache(best) if regime == "page-cache"
                  else _beyond_memory(best, same["compute-only"], same["np.save/np.load"]))
        judged.append(_ahead_of_recomputation(best, same))
        out += [{"regime": regime, "row": best["name"], **v} for v in judged]
    return out


def _verdict(target: str, value: float | None, limit: float, met: bool | None,
             why: str) -> Row:
    return {"target": target, "value": None if value is None else round(value, 3),
            "limit": limit, "met": met, "why": why}


def _page_cache(best: Row) -> list[Row]:
    slower = 1 / best["speedup_vs_numpy"]
    near = best["vs_compute"]
    return [
        _verdict("not slower than np.save", slower, NOT_SLOWER, slower <= NOT_SLOWER,
                 f"{slower:.2f}x np.save's wall time"),
        _verdict("within 1.1x compute only (goal)", near, NEAR_COMPUTE, near <= NEAR_COMPUTE,
                 f"{near:.2f}x compute only's wall time{_spread(best)}"),
    ]


def _spread(best: Row) -> str:
    """Return the per-round range of ``vs_compute`` (the machine's noise), if measured."""
    rounds = best.get("vs_compute_rounds")
    return f" (per round {min(rounds):.2f}-{max(rounds):.2f}x)" if rounds else ""


def _beyond_memory(best: Row, base: Row, naive: Row) -> list[Row]:
    speedup, bound = best["speedup_vs_numpy"], best["speedup_bound"]
    why = f"{speedup:.2f}x np.save's speed"
    if bound < FASTER:
        why += (f"; out of reach for every configuration: np.save takes only {bound:.2f}x"
                " compute only's time")
    near = best["vs_compute"]
    compute = base["forward_s"]
    io = naive["forward_s"] - base["forward_s"]  # what np.save adds to the forward pass
    applies = compute >= io
    near_why = (f"{near:.2f}x compute only's wall time{_spread(best)}; compute forward "
                f"{compute:.3f} s "
                f"{'>=' if applies else '<'} np.save's forward I/O {io:.3f} s")
    return [
        _verdict("2x faster than np.save", speedup, FASTER, speedup >= FASTER, why),
        _verdict("within 1.1x compute only when compute >= I/O", near, NEAR_COMPUTE,
                 near <= NEAR_COMPUTE if applies else None,
                 near_why if applies else near_why + ": does not apply"),
    ]


def _ahead_of_recomputation(best: Row, same: dict[str, Row]) -> Row:
    peers = [same[name] for name in RECOMPUTING if name in same]
    target = "ahead of pyrevolve and checkpoint_schedules"
    if not peers:
        return _verdict(target, None, 1.0, None, "no recomputing row ran")
    fastest = min(peers, key=lambda r: r["wall_s"])
    ratio = fastest["wall_s"] / best["wall_s"]
    return _verdict(target, ratio, 1.0, ratio > 1.0,
                    f"{ratio:.2f}x faster than the fastest of them ({fastest['name']})")


def report(verdicts: list[Row]) -> str:
    """Format verdicts as lines for the terminal, one per target and regime."""
    word = {True: "met", False: "missed", None: "n/a"}
    return "\n".join(f"{v['regime']:14} {word[v['met']]:7} {v['target']} ({v['row']}): "
                     f"{v['why']}" for v in verdicts)
