"""What a forked child resets: one hook for the whole library, run in registration order.

A child of ``fork`` has none of its parent's threads, and locks held by them at the fork
stay held. Each module that keeps per-process state (the process id in temp names, the
spare-file pools, the lanes) registers its reset here with :func:`on_child`; this module
is the one place that asks ``os.register_at_fork``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

_RESETS: list[Callable[[], None]] = []


def on_child(reset: Callable[[], None]) -> Callable[[], None]:
    """Register ``reset`` to run in every forked child (usable as a decorator)."""
    _RESETS.append(reset)
    return reset


def _after_fork_in_child() -> None:
    for reset in _RESETS:
        reset()


os.register_at_fork(after_in_child=_after_fork_in_child)
