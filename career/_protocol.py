"""The leadership lifecycle protocol: inaugurate, execute again and again, hand over (seed 000's ILeaderCareer), split
in two: a replica's ``Standby`` (prepare, ready, unhealthy, close), kept once whichever queues it leads, and a
queue's ``Career`` (inaugurate, execute, hand over), one per queue of the group.

``HandoverRecord`` and ``FailedBatch``, which a career finds in its ``CareerContext``, are the election's (the
handover record's one door, ``tenure.election``), re-exported here for careers.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tenure.election import FailedBatch, HandoverRecord
from tenure.errors import TenureError

__all__ = ["BatchFailed", "Career", "CareerContext", "CareerObserver", "Careers", "FailedBatch", "FencedCommit",
           "HandoverRecord", "Outcome", "SoloCareer", "Standby"]


class Outcome(enum.Enum):
    """How a term ended, as told to ``Career.hand_over``."""

    CLEAN = "clean"  # asked to step down (SIGTERM, release): finish the batch in flight, then stop
    REVOKED = "revoked"  # leadership lost (session expired, fenced): abandon the batch in flight
    FAILED = "failed"  # the career raised: release so another replica tries
    STALLED = "stalled"  # the work stopped making progress: the replica gave the lock up and exits


class BatchFailed(TenureError):
    """One batch failed, for a reason of its own (not storage, Spark or ZooKeeper being down): ``execute``
    raises it so the term's end can count the attempt against ``batch_id`` (a poison batch is split after
    ``--max-batch-attempts`` consecutive failed terms and ``--set-aside-after-s`` of failing)."""

    def __init__(self, batch_id: int, message: str) -> None:
        super().__init__(message)
        self.batch_id = batch_id


@runtime_checkable
class FencedCommit(Protocol):
    """The fenced commit primitive, implemented by ``election``: the only way output becomes visible.

    ``read_commit`` returns the stored commit record (``None`` if none yet) and its znode version.
    ``commit`` writes ``record`` in one ZooKeeper transaction that checks the leader's own election node
    and compare-and-sets the record at ``expected_version``; it raises ``Fenced`` when the node is gone,
    the version moved, or the stored epoch is higher than ``epoch``, and ``NotLeader`` when the leader is
    suspended or past its safe-until deadline. It returns the new version.
    """

    @property
    def epoch(self) -> int: ...

    def read_commit(self) -> tuple[dict[str, Any] | None, int]: ...

    def commit(self, record: dict[str, Any], expected_version: int) -> int: ...


class CareerObserver(Protocol):
    """Where a career reports what it did; ``service`` turns these into Prometheus metrics.

    Batch outcomes: ``committed``, ``skipped`` (already committed: a re-run), ``set_aside`` (a poison batch,
    committed with the records that fail in it set aside, or all of them), ``fenced``, ``failed``. Record
    outcomes: ``written``, ``duplicate``, ``quarantined``, ``set_aside``, and with a row function ``retried`` (an
    attempt failed; the record waits in the retry store) and ``dead_lettered``.

    The service's progress watchdog reads the same calls: a batch started and not finished, input waiting
    (``backlog``) and no batch finishing is a stalled leader.
    """

    def batch_started(self, batch_id: int) -> None: ...

    def batch_finished(self, outcome: str, duration_s: float, records: dict[str, int], *,
                       progressed: bool = True) -> None:
        """``progressed`` is False for a batch that finished without moving any record on because the user's
        code is stuck (every row-function call timed out): it does not count as the leader's progress."""

    def commit_finished(self, duration_s: float, committed_at: float) -> None: ...

    def backlog(self, files: int, *, retry_due: bool = False) -> None:
        """Queue files not yet consumed, and whether held records are due: the input the leader owes work on."""

    def retry_waiting(self, records: int) -> None: ...

    def queue_lost(self, lost: bool) -> None:
        """Whether the queue's source lost entries the group has not read (a Redis stream that lost its tail):
        the leader commits nothing past the hole while it is there; an alert fires."""


@dataclass
class CareerContext:
    """What a career gets at inauguration: its fencing token, a leadership check, the fence.

    ``set_aside`` is a batch that failed ``--max-batch-attempts`` terms in a row for ``--set-aside-after-s``: when
    this term reaches it, it runs it once more and, if it fails, splits it, setting aside only the records that
    fail (the whole batch, without running it, when a split failed before: ``FailedBatch.split_failed``), where an
    operator finds them, so one poison batch cannot stop the group.
    """

    epoch: int
    fence: FencedCommit
    still_leading: Callable[[], bool]
    previous_handover: HandoverRecord | None
    set_aside: FailedBatch | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def after_clean_handover(self) -> bool:
        """True when the previous term ended with a clean handover (fast path); False means recover."""
        return self.previous_handover is not None and self.previous_handover.clean


class Standby(Protocol):
    """What a replica keeps ready to lead, whichever of its queues it leads: for Spark the one SparkSession with its
    warm-up, keep-warm and a cluster's executors, shared by the careers of every queue the replica leads. The runner
    calls it on its control thread.

    Example::

        standby.prepare()                # before joining any queue's line: warm up (may be a no-op)
        standby.unhealthy()              # every few seconds: why no queue can be worked on now, or None
        standby.close()                  # at process exit, after every term has ended
    """

    def prepare(self) -> None:
        """Get ready to lead (warm standby); called once before joining the election."""

    def ready(self) -> bool:
        """True once ``prepare`` has finished (feeds /readyz)."""

    def unhealthy(self) -> str | None:
        """Why the careers cannot work now (a one-line reason), or None when they can. The runner asks every few
        seconds: an unhealthy replica leaves every queue's election, handing over first what it leads, and rejoins
        once healthy again. Must be cheap, must not raise, and must answer within a deadline: a probe that may hang
        (a JVM, a file system) runs under one (``career.Probe``), and one that does not answer is a reason."""

    def close(self) -> None:
        """Release resources at process exit."""


class Career(Protocol):
    """A leader's work on one queue, driven by the runner on its single control thread: one term after another,
    each inaugurated, executed again and again, handed over.

    Example::

        career.inaugurate(ctx)           # elected: recover or take the fast path
        while leading and not stopping:
            if not career.execute():     # one unit of work; False = nothing to do now
                back_off()
        last = career.hand_over(Outcome.CLEAN)
    """

    def inaugurate(self, ctx: CareerContext) -> None:
        """Begin a term: recover what a crashed predecessor left, or take the fast path."""

    def execute(self) -> bool:
        """Do one unit of work; return False when there was nothing to do. Must not commit unless
        ``ctx.still_leading()``; a rejected commit raises ``Fenced``; a batch that failed on its own raises
        ``BatchFailed``; a call that did not answer in time raises ``Unresponsive``."""

    def hand_over(self, outcome: Outcome) -> int | None:
        """End the term. Returns the last committed batch id (for the handover record)."""


class SoloCareer(Career, Standby, Protocol):
    """A career that is its own standby: all a group of one queue needs, and what ``--career package.module:factory``
    returned before queues (``factory(config, observer) -> SoloCareer``).

    Example::

        career.prepare()                 # follower: warm up
        career.inaugurate(ctx)           # elected
        career.execute()
        career.hand_over(Outcome.CLEAN)
        career.close()
    """


@dataclass(frozen=True)
class Careers:
    """A replica's careers: its one standby, and how the career of each queue it may lead is made.

    What a factory of one's own returns to serve a group of several queues (``--career package.module:factory``,
    ``factory(config, observer) -> Careers``): ``career_of(queue, observer)`` is called once per queue of the group,
    queue 0 included, with that queue's own observer (the ``observer`` given to the factory is queue 0's), and the
    careers it returns run side by side on the replica's one control thread, each leading its own queue's terms;
    the standby is prepared once, before any of them, and closed once, after all.

    Example::

        def factory(config, observer):
            standby = MyStandby(config)                                   # prepare, ready, unhealthy, close
            return Careers(standby, lambda queue, observer: MyCareer(config, standby, queue, observer))

    A factory that returns a ``SoloCareer`` serves a group of one queue, as before queues (``Careers.solo``).
    """

    standby: Standby
    career_of: Callable[[int, CareerObserver], Career]

    @classmethod
    def solo(cls, career: SoloCareer) -> Careers:
        """A career that is its own standby, for a group of one queue (``career_of`` answers it for queue 0)."""

        def career_of(queue: int, _observer: CareerObserver) -> Career:
            if queue != 0:
                raise ValueError(f"a solo career serves queue 0 alone, not queue {queue}")
            return career

        return cls(career, career_of)
