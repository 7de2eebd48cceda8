"""One unit of a leader's work on one queue (``Career.execute``), and what its failures mean for the runner.

ZooKeeper's failures end the term without blaming the career (``Fenced``, ``CommitOutcomeUnknown``, any other
``ElectionError``), a JVM that stopped answering fails stop, a batch that failed on its own counts an attempt
against it, anything else is a career failure. The runner acts on the answer (``Work``) from its control thread.
"""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass

from structlog.typing import FilteringBoundLogger

from tenure.career._protocol import BatchFailed, Career
from tenure.career.lifecycle._log_events import COMMIT_OUTCOME_UNKNOWN, EXECUTE_NOT_LEADER, FENCED
from tenure.career.lifecycle._ports import Leadership, LoopProgress, RunnerObserver, TermJournal
from tenure.career.lifecycle._stall import Stall, StallReason
from tenure.errors import CommitOutcomeUnknown, ElectionError, Fenced, NotLeader, Unresponsive

__all__ = ["Executed", "Execution", "Work"]


class Work(enum.Enum):
    """What became of one ``execute()``: the runner's next step."""

    DONE = "done"  # it returned (``worked`` says whether there was work)
    PAUSED = "paused"  # suspended between the check and the commit: the Suspended event follows on the queue
    REVOKED = "revoked"  # ZooKeeper, not the career, ended the term: end it revoked and rejoin at once
    STALLED = "stalled"  # the leader's JVM stopped answering: fail-stop
    FAILED = "failed"  # the career raised: a career failure (against ``batch_id`` when a batch failed on its own)


@dataclass(frozen=True)
class Executed:
    """The answer, and what the runner needs for its step."""

    work: Work
    worked: bool = False
    reason: str = ""  # why the term was revoked
    stall: Stall | None = None
    error: Exception | None = None
    batch_id: int | None = None


class Execution:
    """Runs the career's units of work of one queue (``queue``) for one replica's runner, on its control thread.

    Example::

        done = execution.once(epoch)
        if done.work is Work.REVOKED:
            ...   # end the term revoked (done.reason), rejoin
    """

    def __init__(self, election: Leadership, career: Career, terms: TermJournal, progress: LoopProgress,
                 observer: RunnerObserver, log: FilteringBoundLogger, queue: int = 0) -> None:
        self._queue = queue
        self._election = election
        self._career = career
        self._terms = terms
        self._progress = progress
        self._observer = observer
        self._log = log
        self._started: int | None = None  # the term whose first execute() has run

    def once(self, epoch: int | None) -> Executed:
        """One ``execute()`` of the term of ``epoch``, its progress reported, its failure told apart.

        A term's first ``execute()`` starts its work (Spark's query: a new Python runner, the checkpoint resumed),
        which on a loaded host, or for several queues elected at once, can outlast the liveness timeout: it has the
        inauguration's allowance, as the inauguration has."""
        first, self._started = epoch != self._started, epoch
        try:
            with self._progress.inaugurating() if first else contextlib.nullcontext():
                worked = self._career.execute()
            self._terms.progressed()
            self._observer.lease_headroom(self._queue, self._election.lease_headroom())
            return Executed(Work.DONE, worked=worked)
        except NotLeader as exc:
            self._log.info(EXECUTE_NOT_LEADER, epoch=epoch, reason=str(exc))
            return Executed(Work.PAUSED)
        except Fenced as exc:
            self._log.warning(FENCED, epoch=epoch, reason=str(exc))
            return Executed(Work.REVOKED, reason="fenced")
        except CommitOutcomeUnknown as exc:
            # A commit's reply was lost and could not be read back (from the control thread or from a batch):
            # ZooKeeper, not the career, failed. End the term without a failure back-off; the next leader's
            # inauguration recovers from what is stored.
            self._log.warning(COMMIT_OUTCOME_UNKNOWN, epoch=epoch, reason=str(exc))
            return Executed(Work.REVOKED, reason="commit outcome unknown")
        except ElectionError as exc:
            # Another ZooKeeper failure of the election (ZooKeeper unavailable, a record node deleted under us):
            # the same end.
            self._log.warning("execute_election_error", epoch=epoch, reason=str(exc))
            return Executed(Work.REVOKED, reason=f"election error: {exc}")
        except Unresponsive as exc:
            # The leader's JVM stopped answering: nothing can hand over cleanly (stopping the query is a call
            # into that JVM too). Fail-stop: the lock goes now, the JVM is killed, a supervisor restarts us.
            return Executed(Work.STALLED, stall=Stall(StallReason.SPARK_UNRESPONSIVE, str(exc),
                                                      self._progress.batch_in_flight(self._queue), self._queue))
        except BatchFailed as exc:
            return Executed(Work.FAILED, error=exc, batch_id=exc.batch_id)
        except Exception as exc:
            return Executed(Work.FAILED, error=exc)
