"""``--plot PATH``: benchmark results as PNG pictures (matplotlib, an optional extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("--plot needs matplotlib: pip install 'tiered[plot]'") from exc
    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    return plt


def adjoint(rows: list[dict[str, Any]], path: Path) -> Path:
    """Draw each row's wall time as a bar, in units of compute only, one panel per regime."""
    plt = _pyplot()
    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    fig, axes = plt.subplots(1, len(regimes), figsize=(6 * len(regimes), 4.5), squeeze=False)
    for ax, regime in zip(axes[0], regimes, strict=True):
        mine = [r for r in rows if r["regime"] == regime and r.get("vs_compute") is not None]
        names = [r["name"] for r in mine]
        ax.barh(names, [r["vs_compute"] for r in mine], color="tab:blue")
        ax.axvline(1.0, color="black", linewidth=1, label="compute only")
        ax.invert_yaxis()
        ax.set_xlabel("wall time / compute only")
        ax.set_title(regime)
        ax.legend(loc="lower right")
    fig.suptitle("tiered bench adjoint")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def revisit(rows: list[dict[str, Any]], path: Path) -> Path:
    """Draw the seconds each backward step waited for its state, one line per row."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for row in rows:
        steps = row.get("revisit_step_s")
        if steps:
            ax.plot(range(len(steps)), [1e3 * s for s in steps], label=row["name"])
    ax.set_xlabel("backward step (the last state first)")
    ax.set_ylabel("wait for the state (ms)")
    ax.set_yscale("log")
    ax.set_title("tiered bench revisit: stall per step")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
