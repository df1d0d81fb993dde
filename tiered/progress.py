"""A small text progress bar for the command line (writes to a stream, never logs)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Draw ``label [#####.....] i/n`` in place; ``done()`` ends the line."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None,
                 width: int = 30) -> None:
        self.total, self.label, self.width = max(total, 1), label, width
        self.stream = stream or sys.stderr
        self.count = 0
        self._last = 0.0
        # Redrawing with "\r" only makes sense on a terminal; logs and pipes get one line.
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())

    def step(self, n: int = 1) -> None:
        """Advance by ``n`` and redraw at most 20 times a second."""
        self.count += n
        if not self.live:
            return
        now = time.monotonic()
        if now - self._last > 0.05 or self.count >= self.total:
            self._last = now
            filled = int(self.width * self.count / self.total)
            bar = "#" * filled + "." * (self.width - filled)
            self.stream.write(f"\r{self.label:<10} [{bar}] {self.count}/{self.total}")
            self.stream.flush()

    def done(self) -> None:
        """Finish the line."""
        if not self.live:
            self.stream.write(f"{self.label}: {self.count}/{self.total}")
        self.stream.write("\n")
        self.stream.flush()
