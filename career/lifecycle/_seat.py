"""A seat: one replica's place in one queue's line — the queue's election and career, the seat's state, its term's
epoch, and the policies that act per queue (handover requests, the canary, the failure back-off, the poison-batch
count) with the three steps of a term (``_inauguration``, ``_execution``, ``_term_end``) bound to that queue.

The runner holds one seat per queue of the group and changes their states from its control thread alone; a seat
holds no thread and takes no decision of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from structlog.typing import FilteringBoundLogger

from tenure.career._protocol import Career
from tenure.career.lifecycle._attempts import BatchAttempts
from tenure.career.lifecycle._backoff import FailureBackoff
from tenure.career.lifecycle._canary import CanarySchedule
from tenure.career.lifecycle._execution import Execution
from tenure.career.lifecycle._fail_stop import FailStop
from tenure.career.lifecycle._inauguration import Inauguration
from tenure.career.lifecycle._pending_handover import HandoverRequests
from tenure.career.lifecycle._ports import Leadership, LoopProgress, RequestSource, RunnerObserver, TermJournal
from tenure.career.lifecycle._states import RunnerSettings, SeatState
from tenure.career.lifecycle._term_end import TermEnd

__all__ = ["Seat"]


class Seat:
    """Queue ``queue``'s seat in one replica: what the runner needs to lead that queue's terms.

    Example::

        seat = Seat(2, election, career, attempts, terms, settings, requests=requests, fail_stop=fail_stop,
                    progress=progress, observer=observer, clock=time.monotonic, log=log.bind(queue=2))
        begun = seat.inauguration.admit(epoch)        # an Elected(epoch, queue=2)
        done = seat.execution.once(seat.epoch)        # one unit of the queue's work
        seat.term_end.clean(seat.epoch, "SIGTERM")    # its end

    Attributes:
        state: where the replica is in the queue's line (the runner alone changes it, through its table).
        epoch: the epoch of the seat's current term, or of its last one.
        seen_leader: the queue's leader this replica saw last (its changes are counted).
    """

    def __init__(self, queue: int, election: Leadership, career: Career, attempts: BatchAttempts,
                 terms: TermJournal, settings: RunnerSettings, *, requests: RequestSource, fail_stop: FailStop,
                 progress: LoopProgress, observer: RunnerObserver, clock: Callable[[], float],
                 log: FilteringBoundLogger) -> None:
        self.queue = queue
        self.election = election
        self.career = career
        self.attempts = attempts
        self.terms = terms
        self.log = log
        self.state = SeatState.OUT
        self.epoch: int | None = None
        self.seen_leader: str | None = None
        self.handovers = HandoverRequests(requests, settings.replica_id, clock, queue)
        self.canary = CanarySchedule(settings.canary_handover_every_s, clock)
        self.backoff = FailureBackoff(settings.failure_backoff_s, settings.failure_backoff_max_s, clock)
        self.inauguration = Inauguration(election, career, attempts, self.handovers, log)
        self.execution = Execution(election, career, terms, progress, observer, log, queue)
        self.term_end = TermEnd(election, career, attempts, terms, fail_stop, observer, log, clock,
                                settings.handover_timeout_s, queue)

    @property
    def leading(self) -> bool:
        """Whether a term of the seat's queue is open: leading, or paused in it."""
        return self.state in (SeatState.LEADING, SeatState.PAUSED)

    def __repr__(self) -> str:
        return f"Seat(queue={self.queue}, state={self.state.value}, epoch={self.epoch})"
