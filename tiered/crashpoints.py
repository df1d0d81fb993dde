"""Named crash points: places where a test may kill this process (kill -9) to see restart.

Set ``TIERED_CRASH_AT`` to a point's name in a child process and it sends itself SIGKILL
when it gets there (``name@N``: the N-th time it gets there): no handler, ``finally`` or
exit hook runs, as in a real crash. Unset, :func:`crash_point` is one comparison. The
points are listed in :data:`POINTS`.
"""

from __future__ import annotations

import os
import signal

ENV = "TIERED_CRASH_AT"
POINTS = (
    "commit.objects",  # every object of a version durable; nothing of its record written
    "commit.record-temp",  # the record written and fsync'd under its temp name
    "commit.record-renamed",  # renamed into place; the directory not yet fsync'd
    "commit.dir-synced",  # the record durable; the head not yet moved on disk
)
_TARGET, _, _NTH = (os.environ.get(ENV) or "").partition("@")
_LEFT = [int(_NTH or 1)]  # arrivals at the target until the kill


def crash_point(name: str) -> None:
    """Kill this process with SIGKILL if ``TIERED_CRASH_AT`` names ``name`` (and its turn)."""
    if _TARGET and _TARGET == name:
        _LEFT[0] -= 1
        if _LEFT[0] == 0:
            os.kill(os.getpid(), signal.SIGKILL)
