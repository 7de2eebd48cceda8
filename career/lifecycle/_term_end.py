"""A term's end: the career's term of one queue handed over, its end recorded in the queue's term history and handover
record, and its node released — to rejoin at the back of the line, or to stay out of it."""

from __future__ import annotations

from collections.abc import Callable

from structlog.typing import FilteringBoundLogger

from tenure.career._protocol import Career, Outcome
from tenure.career.lifecycle._attempts import BatchAttempts
from tenure.career.lifecycle._fail_stop import FailStop, GaveUp
from tenure.career.lifecycle._log_events import HANDING_OVER, HANDOVER_RECORD_NOT_WRITTEN, HANDOVER_RECORDED
from tenure.career.lifecycle._ports import Leadership, RunnerObserver, TermJournal
from tenure.career.lifecycle._stall import Stall, StallReason
from tenure.errors import TenureError, Unresponsive

__all__ = ["TermEnd"]


class TermEnd:
    """Ends one replica's terms of one queue (``queue``), on the runner's control thread.

    Example::

        last_batch = term_end.end(Outcome.REVOKED, "fenced", epoch)        # raises GaveUp once given up
        term_end.record(epoch, clean=False, last_batch=last_batch, reason="execute raised ValueError on batch 7")
        term_end.clean(epoch, "SIGTERM")                                  # end CLEAN and record it so
        term_end.release(epoch)                                           # leave the line; rejoin() to stand again
    """

    def __init__(self, election: Leadership, career: Career, attempts: BatchAttempts, terms: TermJournal,
                 fail_stop: FailStop, observer: RunnerObserver, log: FilteringBoundLogger,
                 clock: Callable[[], float], handover_timeout_s: float, queue: int = 0) -> None:
        self._queue = queue
        self._election = election
        self._handover_timeout_s = handover_timeout_s
        self._career = career
        self._attempts = attempts
        self._terms = terms
        self._fail_stop = fail_stop
        self._observer = observer
        self._log = log
        self._clock = clock

    def end(self, outcome: Outcome, reason: str, epoch: int | None) -> int | None:
        """Hand the career's term over and record its end in the history; returns the career's last committed
        batch.

        Raises:
            GaveUp: the term's end failed stop (or a fail-stop came first): nothing after it may run on the
                control thread, whose loop catches this and idles until the process exits.
        """
        if self._fail_stop.stalled is not None:  # given up earlier in this turn of the loop, or on another thread
            raise GaveUp
        started = self._clock()
        self._log.info(HANDING_OVER, outcome=outcome.value, reason=reason, epoch=epoch)
        last_batch = None
        try:
            last_batch = self._career.hand_over(outcome)
        except Unresponsive as exc:
            # Spark stopped answering while the term ended (a JVM frozen under a health-gated hand-over): nothing
            # of it can be trusted to stop, so fail-stop as from a stall, which records the term's end itself.
            self._fail_stop.give_up(Stall(StallReason.SPARK_UNRESPONSIVE, f"while handing over: {exc}",
                                          queue=self._queue))
        except Exception:
            self._log.exception("hand_over_failed", outcome=outcome.value, epoch=epoch)
        if outcome is not Outcome.CLEAN:  # a clean handover is timed by its caller, up to the node's release
            self._observer.handover_took(self._queue, self._clock() - started)
        self._observer.term_ended(self._queue)
        if self._fail_stop.term_ending(self._queue):
            self._terms.ended(outcome, reason)
        return last_batch

    def clean(self, epoch: int | None, reason: str) -> None:
        """End the term CLEAN and leave the handover record saying so (the node's release follows)."""
        last_batch = self.end(Outcome.CLEAN, reason, epoch)
        self.record(epoch, clean=True, last_batch=last_batch, reason=None)

    def record(self, epoch: int | None, *, clean: bool, last_batch: int | None, reason: str | None) -> None:
        """Write the term's handover record; a ZooKeeper error is logged and the term's end goes on (the
        successor then takes the recovery path: the record still says clean=False)."""
        try:
            self._election.write_handover(self._attempts.record(epoch or 0, clean=clean, last_batch=last_batch,
                                                                reason=reason))
            self._log.info(HANDOVER_RECORDED, clean=clean, last_batch=last_batch, epoch=epoch)
        except TenureError as exc:
            self._log.warning(HANDOVER_RECORD_NOT_WRITTEN, reason=f"{type(exc).__name__}: {exc}", epoch=epoch)

    def release(self, epoch: int | None) -> bool:
        """Leave the line within the handover budget; False (logged) when the node could not be deleted in time."""
        try:
            self._election.release(self._handover_timeout_s)
        except TenureError:
            self._log.exception("release_failed", epoch=epoch)
            return False
        return True

    def rejoin(self, epoch: int | None) -> None:
        """Release the node and stand in line again, at the back. A release that times out (cut off from
        ZooKeeper) leaves the node to the election's background delete or the session's end; rejoining must not
        depend on it, or the replica stays out of the election."""
        self.release(epoch)
        try:
            self._election.join()
        except TenureError:
            self._log.exception("rejoin_failed", epoch=epoch)

    def clean_and_release(self, epoch: int | None, reason: str, *, leading: bool) -> bool:
        """End the term cleanly when ``leading``, then release the node (the observer is told how long both
        took); returns whether the release succeeded."""
        started = self._clock()
        if leading:
            self.clean(epoch, reason)
        released = self.release(epoch)
        if leading:
            self._observer.handover_took(self._queue, self._clock() - started)
        return released
