"""A term's beginning up to the career's own inauguration, and what each of its failures means for the runner.

An ``Elected(epoch)`` may be stale (the term is over), a handover request may ask this replica to step aside, the
handover record is read (the poison-batch count carried over) and marked "in progress" through the term's fence,
then the career inaugurates. The runner acts on the answer (``Start``) from its control thread.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

from structlog.typing import FilteringBoundLogger

from tenure.career._protocol import Career, CareerContext, FailedBatch
from tenure.career.lifecycle._attempts import BatchAttempts
from tenure.career.lifecycle._log_events import (
    DEFERRED_TO_HANDOVER_TARGET,
    INAUGURATING,
    INAUGURATION_ABANDONED,
    STALE_ELECTED_IGNORED,
)
from tenure.career.lifecycle._pending_handover import HandoverRequests, PendingHandover
from tenure.career.lifecycle._ports import Leadership
from tenure.election import Fence, HandoverRequest
from tenure.errors import ElectionError, Fenced, NotLeader, TenureError, Unresponsive

__all__ = ["Begun", "Inauguration", "Start"]


class Start(enum.Enum):
    """What became of an ``Elected(epoch)``: the runner's next step."""

    LEAD = "lead"  # admitted (``admit``), or the career's term began (``begin``): go on, lead
    STALE = "stale"  # an Elected of a term already over: nothing to do
    STEP_ASIDE = "step_aside"  # a handover request names another replica in line: rejoin at the back
    REJOIN = "rejoin"  # ZooKeeper failed, or the term ended, before the career's term began: no career failure
    UNHEALTHY = "unhealthy"  # Spark (or the storage) did not answer: give the lock back, wait out of the line
    FAILED = "failed"  # the career's inauguration raised: a career failure


@dataclass(frozen=True)
class Begun:
    """The answer: the step, and what the runner needs for it (the granted request; the term's context and fence
    once it began; the error that ended it)."""

    start: Start
    granted: HandoverRequest | None = None
    ctx: CareerContext | None = None
    fence: Fence | None = None
    error: Exception | None = None


class Inauguration:
    """Begins terms for one replica's runner, on its control thread.

    Example::

        admitted = inauguration.admit(epoch)              # Start.LEAD, STALE or STEP_ASIDE
        if admitted.start is Start.LEAD:
            begun = inauguration.begin(epoch, admitted.granted)   # Start.LEAD with ctx and fence, or why not
    """

    def __init__(self, election: Leadership, career: Career, attempts: BatchAttempts, handovers: HandoverRequests,
                 log: FilteringBoundLogger) -> None:
        self._election = election
        self._career = career
        self._attempts = attempts
        self._handovers = handovers
        self._log = log

    def admit(self, epoch: int) -> Begun:
        """Whether a term of ``epoch`` may begin: the election still leads in it, and no handover request asks this
        replica to step aside for another (a request it grants comes back with the answer)."""
        current = self._election.epoch
        if current != epoch:
            # Queued before the election lost that term (and perhaps won another): its Revoked, and the new
            # term's own Elected, are behind it on the queue. Starting a term here would pair this epoch with
            # the newer term's fence.
            self._log.info(STALE_ELECTED_IGNORED, epoch=epoch, current_epoch=current)
            return Begun(Start.STALE)
        step_aside, granted = self._pending_handover(epoch)
        if step_aside:
            self._log.info(DEFERRED_TO_HANDOVER_TARGET, epoch=epoch)
            return Begun(Start.STEP_ASIDE)
        return Begun(Start.LEAD, granted=granted)

    def _pending_handover(self, epoch: int) -> PendingHandover:
        """Step aside for a handover request's target, or grant it (``HandoverRequests.before_term``); an
        unreadable request is none."""
        try:
            return self._handovers.before_term(epoch, self._election.contenders)
        except TenureError as exc:
            self._log.warning("handover_request_unread", reason=f"{type(exc).__name__}: {exc}")
            return PendingHandover(False, None)

    def begin(self, epoch: int, granted: HandoverRequest | None) -> Begun:
        """Begin the admitted term of ``epoch``: the handover record read and marked "in progress" through the
        term's fence, then the career's inauguration."""
        try:
            fence = self._election.fence()  # the fence carries the epoch of the term it was read in
            if fence.epoch != epoch:
                self._log.info(STALE_ELECTED_IGNORED, epoch=epoch, current_epoch=fence.epoch)
                return Begun(Start.STALE)
            previous = self._election.read_handover()
            self._attempts.began(previous)
            # Mark the term dirty at once: if this replica dies, its successor sees clean=False and recovers. The
            # count of a batch failing terms in a row carries over, so a crash does not reset it.
            self._election.write_handover(self._attempts.record(epoch, clean=False, last_batch=None,
                                                                reason="in progress"))
            ctx = CareerContext(epoch=epoch, fence=fence, still_leading=functools.partial(self._election.leads, epoch),
                                previous_handover=previous, set_aside=self._poison(epoch))
        except TenureError as exc:
            # ZooKeeper failed (or the term ended) before the term began: nothing of the career ran, so this
            # is no career failure. Give the node up and stand in line again, rather than leave the
            # election leading a replica that does not work.
            self._log.warning(INAUGURATION_ABANDONED, epoch=epoch, reason=f"{type(exc).__name__}: {exc}")
            return Begun(Start.REJOIN)
        self._log.info(INAUGURATING, epoch=epoch, path="fast" if ctx.after_clean_handover else "recovery",
                       previous=None if previous is None else previous.replica_id)
        try:
            self._career.inaugurate(ctx)
        except Unresponsive as exc:
            # Elected while Spark (or the storage) does not answer: give the lock back now and wait out of the
            # line until the health check passes again, rather than hold a term nobody works for.
            self._log.warning(INAUGURATION_ABANDONED, epoch=epoch, reason=str(exc))
            return Begun(Start.UNHEALTHY, error=exc)
        except (ElectionError, Fenced, NotLeader) as exc:
            # The term ended, or ZooKeeper failed, before the career's term began (the career checks its
            # leadership before any step a stale leader must not take): no career failure, no back-off.
            self._log.warning(INAUGURATION_ABANDONED, epoch=epoch, reason=f"{type(exc).__name__}: {exc}")
            return Begun(Start.REJOIN)
        except Exception as exc:
            return Begun(Start.FAILED, error=exc)
        return Begun(Start.LEAD, granted=granted, ctx=ctx, fence=fence)

    def _poison(self, epoch: int) -> FailedBatch | None:
        """The batch this term must split, or set aside whole if its split failed (``BatchAttempts.poison``),
        logged."""
        failed = self._attempts.poison()
        if failed is not None:
            self._log.warning("setting_aside", batch=failed.batch_id, attempts=failed.attempts,
                              failing_s=round(failed.failing_s, 1), whole=failed.split_failed, error=failed.error,
                              epoch=epoch)
        return failed
