"""What the command line shows while it works: progress bars and tables that fit a terminal.

Only the CLI, the demo and the benchmarks import this module (``import tiered`` does not),
so tqdm is loaded only where a person watches.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

WIDTH = 100  # columns a table or bar may take
T = TypeVar("T")


def progress(items: Iterable[T], desc: str, *, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` with a progress bar on standard error.

    The bar is drawn only on a terminal (``tqdm``'s ``disable=None``): logs and pipes stay
    clean. It is cleared once done.
    """
    yield from _bar(items, desc=desc, total=total)


def counter(total: int, desc: str) -> Any:
    """Return a progress bar to ``update()`` by hand (a context manager), as :func:`progress`."""
    return _bar(None, desc=desc, total=total)


def _bar(items: Iterable[Any] | None, *, desc: str, total: int | None) -> Any:
    """Return a tqdm bar drawn only on a terminal, within :data:`WIDTH`, cleared when done."""
    from tqdm import tqdm

    return tqdm(items, desc=desc, total=total, disable=None, leave=False, file=sys.stderr,
                ncols=WIDTH, dynamic_ncols=False)


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:  # a field not measured stays blank
        return "" if value is None else ("yes" if value else "no")
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) >= 1000 or 0 < abs(value) < 0.001 else f"{value:.3f}"
    return str(value)


def table(rows: list[dict[str, Any]], columns: list[str], *, width: int = WIDTH) -> str:
    """Format ``rows`` as an aligned text table of at most ``width`` columns.

    Columns that do not fit are left out, last first, and named under the table (every
    field is in the JSON a benchmark writes).
    """
    cells = {c: [_cell(r.get(c)) for r in rows] for c in columns}
    widths = {c: max([len(c), *map(len, cells[c])]) for c in columns}
    shown = list(columns)
    while len(shown) > 1 and sum(widths[c] for c in shown) + 2 * (len(shown) - 1) > width:
        shown.pop()
    lines = ["  ".join(c.ljust(widths[c]) for c in shown).rstrip()]
    lines += ["  ".join(cells[c][i].ljust(widths[c]) for c in shown).rstrip()
              for i in range(len(rows))]
    left = columns[len(shown):]
    if left:
        lines.append(textwrap.fill(f"(in the JSON too: {', '.join(left)})", width))
    return "\n".join(lines)
