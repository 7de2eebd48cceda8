"""The fail-stop: a replica whose work stopped progressing gives every lock up at once and has its process exit.

From any thread, once: the progress watchdog, the control loop (Spark stopped answering), a full event queue. The
work runs on a thread of its own, so the caller returns at once and the control loop, if it still runs, does no
more work meanwhile (ZKFC's HealthMonitor gives the lock up the same way: STYLE habit 17). Closing the replica's one
ZooKeeper session ends the term of every queue it leads at once; each one's end is recorded first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import NamedTuple

from structlog.typing import FilteringBoundLogger

from tenure.career._deadline import call_within
from tenure.career._protocol import Outcome
from tenure.career.lifecycle._attempts import BatchAttempts
from tenure.career.lifecycle._log_events import STALLED
from tenure.career.lifecycle._ports import Leadership, ProcessControl, RunnerObserver, TermJournal
from tenure.career.lifecycle._stall import Stall

__all__ = ["FailStop", "GaveUp", "QueueRecords"]


class QueueRecords(NamedTuple):
    """Where the end of a queue's term is recorded: its election (the handover record, through the term's fence),
    its poison-batch count, its term history."""

    leadership: Leadership
    attempts: BatchAttempts
    terms: TermJournal


class GaveUp(Exception):
    """A term's end found the runner given up (``FailStop.give_up``): whatever called it stops there, because the
    fail-stop thread records the term, holds the node until then and exits the process."""


class FailStop:
    """Gives every lock up once, and decides, for each queue's term running then, who records its end: the control
    thread (it ended the term) or the fail-stop thread (it gave up first).

    Example::

        fail_stop = FailStop([QueueRecords(election, attempts, terms)], process, observer, log,
                             where=lambda queue: (epoch, "leading"))
        fail_stop.term_began(0)                     # the control thread began a term of queue 0 in the history
        fail_stop.give_up(Stall(StallReason.NO_PROGRESS, "no batch finished in 120 s", 17, queue=0))  # any thread
        if fail_stop.term_ending(0):                # raises GaveUp once given up
            terms.ended(outcome, reason)
    """

    def __init__(self, queues: Sequence[QueueRecords], process: ProcessControl, observer: RunnerObserver,
                 log: FilteringBoundLogger, where: Callable[[int | None], tuple[int | None, str]]) -> None:
        """``queues`` are the replica's queues' records, by queue (their elections share the one session);
        ``where`` tells a queue's epoch and role, or the replica's for None (for the log), read from the fail-stop
        thread."""
        self._queues = list(queues)
        self._process = process
        self._observer = observer
        self._log = log
        self._where = where
        self._lock = threading.Lock()  # guards the two below: who records each term's end
        self._stalled: Stall | None = None
        self._open: set[int] = set()  # queues whose term began in the history and whose end is not recorded yet

    @property
    def stalled(self) -> Stall | None:
        """Why the replica gave up, once it did."""
        return self._stalled

    def term_began(self, queue: int) -> None:
        """The control thread began a term of ``queue`` in the history: its end is to be recorded (unless given up
        already)."""
        with self._lock:
            if self._stalled is None:
                self._open.add(queue)

    def term_ending(self, queue: int) -> bool:
        """The control thread ends the term of ``queue``: whether it records the end in the history itself.

        Raises:
            GaveUp: given up (here or on another thread): the fail-stop thread records the term.
        """
        with self._lock:
            gave_up, recording = self._stalled is not None, queue in self._open
            self._open.discard(queue)
        if gave_up:
            raise GaveUp
        return recording

    def give_up(self, stall: Stall) -> None:
        """Give every lock up at once and have the process exit (``ProcessControl.exit_stalled``); from any thread,
        once (a second call does nothing)."""
        with self._lock:
            if self._stalled is not None:
                return
            self._stalled = stall
            recording, self._open = sorted(self._open), set()  # the control thread no longer records them
        threading.Thread(target=self._run, args=(stall, recording), name="tenure-fail-stop", daemon=True).start()

    def _run(self, stall: Stall, recording: list[int]) -> None:
        """1. Record why, for each queue whose term is open (the handover record and the term history, as far as
           ZooKeeper answers in time).
        2. Close the ZooKeeper session: every election node goes now, not a session timeout later, and each
           successor hears at once.
        3. The process kills the Spark JVM and its Python workers (on a cluster, the application's cores are
           freed with the driver) and exits non-zero, for the supervisor to restart the replica as a warm
           follower.

        Whatever the stalled work still does is harmless: a batch that wakes commits through the fence, which
        checks the election node that step 2 deleted; its staging and checkpoint are its own term's; and by
        step 3 no process of it is left.
        """
        epoch, state = self._where(stall.queue)
        self._observer.stalled(stall.reason)
        self._log.error(STALLED, reason=stall.reason.value, detail=stall.detail, batch=stall.batch_id, epoch=epoch,
                        state=state, queue=stall.queue)
        if recording:
            try:
                call_within(lambda: self._record(stall, recording), 3 * self._op_timeout_s, "recording the stall")
            except Exception as exc:  # the session's close below is what matters
                self._log.warning("stall_not_recorded", reason=f"{type(exc).__name__}: {exc}", epoch=epoch)
        self._log.error("exiting_after_stall", reason=stall.reason.value)
        self.close_session()
        self._process.exit_stalled()

    @property
    def _op_timeout_s(self) -> float:
        return self._queues[0].leadership.op_timeout_s

    def _record(self, stall: Stall, queues: list[int]) -> None:
        """The stall in each open term's handover record (a batch it blames, in the queue it names, counts one
        attempt) and term history: a queue's own stall, or the replica's that ended its term too."""
        for queue in queues:
            records = self._queues[queue]
            epoch, _role = self._where(queue)
            if stall.reason.counts_against_batch and stall.batch_id is not None and stall.queue == queue:
                records.attempts.failed(stall.batch_id, stall.describe())
            records.leadership.write_handover(records.attempts.record(epoch or 0, clean=False, last_batch=None,
                                                                      reason=f"stalled: {stall.describe()}"))
            records.terms.ended(Outcome.STALLED, stall.describe())

    def close_session(self) -> None:
        """Close the replica's ZooKeeper session, under a deadline: every election node goes now, and each successor
        hears at once (from any thread; what follows, killing the JVM and exiting, is the process's)."""
        try:
            call_within(self._queues[0].leadership.close_session, self._op_timeout_s,
                        "closing the ZooKeeper session")
        except Exception as exc:  # the node then goes when the session expires
            self._log.warning("session_not_closed", reason=f"{type(exc).__name__}: {exc}")
