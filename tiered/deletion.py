"""Deleting the files nobody needs any more: in the background, or at once for room.

Which records may go is the cache's decision (a discarded key, a superseded version once the
new one is home, an evicted copy); this object only carries it out, on a lane of its own so
that the caller does not wait for the unlinks, and counts what is still queued so that
``flush`` and ``close`` can wait for it. Paths carry the version, so a queued deletion never
touches a newer store of the same key.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from tiered.keys import Key
from tiered.movers import Lane
from tiered.tiers.persistent import PersistentTier
from tiered.tiers.records import Record

log = logging.getLogger(__name__)
Doomed = Sequence[tuple[int, Record]]  # (tier position, record) pairs
Failed = Callable[[BaseException, str, tuple[Key, ...]], None]


class Deletions:
    """The delete lane of one cache.

    Parameters
    ----------
    tiers : mapping of int to PersistentTier
        The cache's persistent tiers by position.
    cond : threading.Condition
        The cache's metadata lock: the count of queued deletions is kept under it, and
        waiters are notified when a deletion ends (a bounded tier may have room).
    failed : callable
        Called under ``cond`` with a failure, what failed and the keys concerned, for the
        cache to raise at its next call.
    """

    def __init__(self, tiers: Mapping[int, PersistentTier], cond: threading.Condition,
                 failed: Failed) -> None:
        self._tiers, self._cond, self._failed = tiers, cond, failed
        self._lane = Lane("delete")
        self.pending = 0  # deletions queued or running (read under ``cond``)
        self.closed = False  # after close: deletions run in the caller's thread
        self.failed: list[tuple[int, Record]] = []  # to try again (read under ``cond``)

    def delete(self, doomed: Doomed, *, now: bool = False, report: bool = True) -> None:
        """Delete ``doomed`` records: on the lane, or here when ``now`` (room needed now).

        ``report``: a failure is raised at the cache's next call (a retry only logs it).
        """
        if not doomed:
            return
        if now or self.closed:
            self.unlink(doomed)
            return
        with self._cond:
            self.pending += 1
        self._lane.submit(self._run, list(doomed), report)

    def unlink(self, doomed: Doomed, *, recycle: bool = True) -> None:
        """Delete ``doomed`` records in the calling thread (``recycle``: as spares, maybe).

        A record whose deletion fails is kept to try again (:meth:`retry`), and the
        failure is raised after the rest were tried.
        """
        first: BaseException | None = None
        for tier, record in doomed:
            try:
                self._tiers[tier].delete(record, recycle=recycle)
            except Exception as exc:
                first = first or exc
                with self._cond:
                    self.failed.append((tier, record))
        if first is not None:
            raise first

    def retry(self) -> None:
        """Queue again the deletions that failed (``flush`` and ``close`` call this).

        A failure was reported once already; failing again, it is only logged.
        """
        with self._cond:
            doomed, self.failed = self.failed, []
        self.delete(doomed, report=False)

    def _run(self, doomed: list[tuple[int, Record]], report: bool) -> None:
        try:
            self.unlink(doomed)
        except BaseException as exc:
            log.error("deleting discarded object(s) failed (tried again at the next flush or "
                      "close): %s", exc)
            if report:
                with self._cond:
                    self._failed(exc, f"deleting {len(doomed)} discarded object(s)",
                                 tuple(record.key for _, record in doomed))
            raise
        finally:
            with self._cond:
                self.pending -= 1
                self._cond.notify_all()  # a bounded tier may have room now

    def settle(self, deadline: float | None) -> bool:
        """Wait until queued deletions are done; ``False`` if ``deadline`` passed first."""
        with self._cond:
            while self.pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(1.0 if remaining is None else min(remaining, 1.0))
        return True

    def shutdown(self) -> None:
        """Finish what is queued (what was discarded stays discarded), then stop the lane."""
        self.closed = True
        self._lane.shutdown(cancel=False)
        try:
            self.retry()  # in this thread now
        except Exception as exc:
            log.error("deleting %d discarded object(s) failed again at close; their files "
                      "stay: %s", len(self.failed), exc)
