"""The runner's ports: what it needs from the election and from the process it runs in.

The runner knows terms and careers. Leadership reaches it through :class:`Leadership` alone, which
``tenure.election.Election`` implements (client-go's elector depends on its lock's six-method interface the same
way), so the runner sees no ZooKeeper client and no kazoo error; operators' requests through
:class:`RequestSource` (``tenure.election.OperatorRequests``). Metrics, the progress watchdog, the JVM's process
tree and the term history's counts belong to the replica process (``service/replica``), reached through the rest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tenure.career._protocol import HandoverRecord, Outcome
from tenure.career.lifecycle._stall import Stall, StallReason
from tenure.career.lifecycle._states import ReplicaState, Role, SeatState, role_of
from tenure.election import BalanceView, Contender, DrainRequest, Fence, HandoverRequest, Member

__all__ = [
    "BalanceSource",
    "Leadership",
    "LoopProgress",
    "ProcessControl",
    "RequestSource",
    "RunnerHealth",
    "RunnerObserver",
    "SeatHealth",
    "TermJournal",
]


class Leadership(Protocol):
    """One queue's election as the runner needs it; ``tenure.election.Election`` implements it. A replica has one per
    queue, all on one ZooKeeper session.

    Every call that reaches ZooKeeper raises the product's errors only (``TenureError``s: ``NotLeader``,
    ``Fenced``, ``CommitOutcomeUnknown``, ``ZooKeeperUnavailable`` …), never kazoo's.
    """

    @property
    def group(self) -> str:
        """The consumer group the election is for."""

    @property
    def epoch(self) -> int | None:
        """The epoch of the term running now, if any (the election's view, which may be ahead of the runner's)."""

    @property
    def op_timeout_s(self) -> float:
        """The bound on each ZooKeeper call the election makes."""

    def start(self, *, join: bool = True) -> None:
        """Start the election, joining the line unless ``join`` is False (a drained replica); returns at once."""

    def join(self) -> None:
        """Stand in line again, at the back, after ``release``; returns at once."""

    def release(self, timeout_s: float) -> None:
        """Leave the line: the node goes now (the successor hears at once); raises ``ElectionError`` past
        ``timeout_s``."""

    def leads(self, epoch: int | None) -> bool:
        """Whether this replica leads now, in the term of ``epoch`` (False when suspended or in another term)."""

    def fence(self) -> Fence:
        """The fenced writes of the term running now; raises ``NotLeader`` when not leading."""

    def read_handover(self) -> HandoverRecord | None:
        """The handover record the last term left (no leadership needed)."""

    def write_handover(self, record: HandoverRecord) -> None:
        """Write this term's handover record through its fence."""

    def contenders(self) -> list[Contender]:
        """The line of contenders now, the leader first."""

    def lease_headroom(self) -> float:
        """Seconds until the safe-until deadline while leading (0 otherwise)."""

    def close_session(self) -> None:
        """End the ZooKeeper session now, so the node goes at once (the fail-stop; unbounded: bound the call). The
        session is the replica's: every queue's node goes with it."""

    def close(self) -> None:
        """Release if needed and stop the election."""


class RunnerObserver(Protocol):
    """Where the runner reports what it did (the replica turns these into Prometheus metrics); ``queue`` names the
    queue a report is about."""

    def role_changed(self, queue: int, leading: bool, epoch: int | None) -> None:
        """A seat's role changed: leading its queue (at ``epoch``) or not."""

    def connection_changed(self, connected: bool) -> None: ...

    def leader_changed(self, queue: int) -> None:
        """The queue's leader, as this replica saw it, changed (not counted for the first one seen)."""

    def lease_headroom(self, queue: int, seconds: float) -> None:
        """Seconds until the leader's safe-until deadline, after each unit of work (0 once the term ended)."""

    def inaugurated(self, queue: int, seconds: float) -> None:
        """A term began, its inauguration taking ``seconds``."""

    def term_ended(self, queue: int) -> None:
        """A term ended, however it ended."""

    def handover_took(self, queue: int, seconds: float) -> None:
        """A term's handover (or its end without one) took ``seconds``."""

    def career_failed(self, queue: int) -> None: ...

    def stalled(self, reason: StallReason) -> None:
        """The replica gives a lock up (one queue's, or every one) because its work stopped progressing."""

    def balanced(self, balanced: bool) -> None:
        """This replica's view of the balance's plan has no moves left (True), or has some."""

    def move_started(self, queue: int) -> None:
        """The balance began moving ``queue`` to another member."""


class LoopProgress(Protocol):
    """The control loop's side of the progress clock the watchdog reads from its own thread: the loop's own, and
    each queue's (``queue``)."""

    def tick(self) -> None:
        """The control loop came round."""

    def inaugurating(self) -> contextlib.AbstractContextManager[None]:
        """The loop is inside an inauguration, which the watchdog allows longer than the liveness timeout."""

    def working(self, leading: bool, *, new_term: bool = False, paused: bool = False, queue: int = 0) -> None:
        """The runner began a term of ``queue`` (``new_term``) or resumed leading it, was paused (``paused``: the term
        goes on, but it cannot work, so its progress owed stands still rather than restarting), or stopped leading
        it."""

    def batch_in_flight(self, queue: int = 0) -> int | None:
        """The batch of ``queue`` running now, if any."""


class RequestSource(Protocol):
    """Operators' requests (``tenure drain``, ``tenure handover``): read now, and watched (the runner posts each
    change to its queue as ``DrainChanged`` or ``HandoverRequested``); ``tenure.election.OperatorRequests``. A drain
    is the replica's; each queue has its own handover request."""

    def drain(self, replica_id: str) -> DrainRequest | None: ...

    def handover(self, queue: int = 0) -> HandoverRequest | None: ...

    def remove_handover(self, request: HandoverRequest, queue: int = 0) -> None:
        """Remove ``request`` once this term of ``queue`` granted it (a newer request is left alone)."""

    def put_handover(self, request: HandoverRequest, queue: int = 0) -> None:
        """Ask the term of ``request.epoch`` of ``queue`` to hand over (the balance asks its own terms)."""

    def watch(self, replica_id: str, on_drain: Callable[[DrainRequest | None], None],
              on_handover: Callable[[int, HandoverRequest | None], None]) -> None:
        """Call back with the requests now and on every change, a handover request with its queue (from another
        thread: only post)."""


class BalanceSource(Protocol):
    """The balance's members and lines (``tenure.election.Membership``): this replica's own member node kept true,
    the view the plan is computed from, and a watch of both (from another thread: only post)."""

    @property
    def queues(self) -> int:
        """The group's number of queues."""

    def keep(self, member: Member | None) -> bool:
        """Make this replica's member node say ``member`` (None: no node); whether it wrote anything."""

    def view(self) -> BalanceView:
        """The members and each queue's leader now."""

    def watch(self, on_change: Callable[[], None]) -> None: ...


class TermJournal(Protocol):
    """The term history's entries of this replica's terms of one queue."""

    def began(self, fence: Fence, previous: HandoverRecord | None, elected_at: float) -> None: ...

    def progressed(self) -> None: ...

    def ended(self, outcome: Outcome, reason: str) -> None: ...


class ProcessControl(Protocol):
    """The process the runner lives in: the progress watchdog and the fail-stop exit."""

    def loop_started(self) -> None:
        """The control loop begins (the career prepared, the election joined): start watching its progress."""

    def loop_live(self) -> bool:
        """Whether the control loop came round within the watchdog's liveness timeout (``/livez``)."""

    def loop_ended(self) -> None:
        """The control loop ended: stop watching its progress; the election and the career are closed next."""

    def closed(self) -> None:
        """The career is closed: stop timing the stop."""

    def exit_stalled(self) -> None:
        """The lock is given up: kill the career's processes (a JVM) and exit for a supervisor to restart us.
        Does not return."""


@dataclass(frozen=True)
class SeatHealth:
    """One seat as the health snapshot reads it: its queue, state, the epoch of its current (or last) term, and
    whether its election leads in that term now."""

    queue: int
    state: SeatState
    epoch: int | None
    leads: bool


#: The role a replica of several seats shows as a whole: the first of these any of its seats has.
_ROLE_ORDER = (Role.LEADING, Role.PAUSED, Role.FOLLOWING, Role.BACKING_OFF, Role.OUT)


@dataclass(frozen=True)
class RunnerHealth:
    """A snapshot of the runner's health (for ``/livez``, ``/readyz``, ``/leader``).

    ``live``: the control loop ticks (independent of ZooKeeper). ``ready``: connected, in the election (in at least
    one queue's line) and, with warm standby, the standby ready — true on followers too. ``leader``: leading at
    least one queue with its writer active; ``leading`` lists them (``{"queue", "epoch"}``). ``role`` and ``epoch``
    are those of the replica's one seat in a group of one queue; with several, ``role`` is the replica's busiest
    (leading, paused, following, backing off, out, in that order) and ``epoch`` the first led queue's.
    """

    live: bool
    ready: bool
    leader: bool
    role: str
    epoch: int | None = None
    reasons: list[str] = field(default_factory=list)
    leading: list[dict[str, int]] = field(default_factory=list)

    @classmethod
    def of(cls, state: ReplicaState, seats: list[SeatHealth], *, loop_on_time: bool, stalled: Stall | None,
           zk_connected: bool, drained: str | None, unhealthy: str | None, career_ready: bool) -> RunnerHealth:
        """The snapshot of a runner in ``state`` with ``seats``: ``loop_on_time`` (the loop came round within the
        liveness timeout), ``drained`` (why, when drained), ``unhealthy`` (the health gate's reason)."""
        reasons = []
        live = loop_on_time and stalled is None
        if stalled is not None:
            reasons.append(f"stalled: {stalled.describe()}")
        elif not live:
            reasons.append("control loop stalled")
        if not zk_connected:
            reasons.append("ZooKeeper disconnected")
        roles = [role_of(state, seat.state) for seat in seats]
        if len(seats) == 1:
            role, epoch = roles[0], seats[0].epoch
        else:  # while active every role is a seat's, one of _ROLE_ORDER; else all are the replica's
            role = next((r for r in _ROLE_ORDER if r in roles), roles[0])
            epoch = next((seat.epoch for seat, r in zip(seats, roles, strict=True) if r is Role.LEADING), None)
        in_election = any(r in (Role.FOLLOWING, Role.LEADING, Role.PAUSED) for r in roles)
        if drained is not None and state is ReplicaState.DRAINED:
            reasons.append(drained)
        elif state is ReplicaState.UNHEALTHY:
            reasons.append(f"unhealthy: {unhealthy}")
        elif not in_election:
            reasons.append(f"not in the election ({role.value})")
        if not career_ready:
            reasons.append("career not ready (warming up)")
        leading = [{"queue": seat.queue, "epoch": seat.epoch} for seat, r in zip(seats, roles, strict=True)
                   if r is Role.LEADING and seat.leads and seat.epoch is not None]
        return cls(live=live, ready=live and zk_connected and in_election and career_ready,
                   leader=live and bool(leading), role=role.value, epoch=epoch, reasons=reasons,
                   leading=leading if live else [])
