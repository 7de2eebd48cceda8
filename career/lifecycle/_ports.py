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
from tenure.career.lifecycle._states import RunnerState
from tenure.election import Contender, DrainRequest, Fence, HandoverRequest

__all__ = [
    "Leadership",
    "LoopProgress",
    "ProcessControl",
    "RequestSource",
    "RunnerHealth",
    "RunnerObserver",
    "TermJournal",
]


class Leadership(Protocol):
    """The election as the runner needs it; ``tenure.election.Election`` implements it.

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
        """End the ZooKeeper session now, so the node goes at once (the fail-stop; unbounded: bound the call)."""

    def close(self) -> None:
        """Release if needed and stop the election."""


class RunnerObserver(Protocol):
    """Where the runner reports what it did (the replica turns these into Prometheus metrics)."""

    def role_changed(self, leading: bool, epoch: int | None) -> None:
        """The runner changed state: leading (at ``epoch``) or not."""

    def connection_changed(self, connected: bool) -> None: ...

    def leader_changed(self) -> None:
        """The group's leader, as this replica saw it, changed (not counted for the first one seen)."""

    def lease_headroom(self, seconds: float) -> None:
        """Seconds until the leader's safe-until deadline, after each unit of work (0 once the term ended)."""

    def inaugurated(self, seconds: float) -> None:
        """A term began, its inauguration taking ``seconds``."""

    def term_ended(self) -> None:
        """A term ended, however it ended."""

    def handover_took(self, seconds: float) -> None:
        """A term's handover (or its end without one) took ``seconds``."""

    def career_failed(self) -> None: ...

    def stalled(self, reason: StallReason) -> None:
        """The replica gives its lock up because its work stopped progressing."""


class LoopProgress(Protocol):
    """The control loop's side of the progress clock the watchdog reads from its own thread."""

    def tick(self) -> None:
        """The control loop came round."""

    def inaugurating(self) -> contextlib.AbstractContextManager[None]:
        """The loop is inside an inauguration, which the watchdog allows longer than the liveness timeout."""

    def working(self, leading: bool, *, new_term: bool = False, paused: bool = False) -> None:
        """The runner began a term (``new_term``) or resumed leading, was paused (``paused``: the term goes on, but
        it cannot work, so its progress owed stands still rather than restarting), or stopped leading."""

    def batch_in_flight(self) -> int | None:
        """The batch running now, if any."""


class RequestSource(Protocol):
    """Operators' requests (``tenure drain``, ``tenure handover``): read now, and watched (the runner posts each
    change to its queue as ``DrainChanged`` or ``HandoverRequested``); ``tenure.election.OperatorRequests``."""

    def drain(self, replica_id: str) -> DrainRequest | None: ...

    def handover(self) -> HandoverRequest | None: ...

    def remove_handover(self, request: HandoverRequest) -> None:
        """Remove ``request`` once this term granted it (a newer request is left alone)."""

    def watch(self, replica_id: str, on_drain: Callable[[DrainRequest | None], None],
              on_handover: Callable[[HandoverRequest | None], None]) -> None:
        """Call back with the requests now and on every change (from another thread: only post)."""


class TermJournal(Protocol):
    """The term history's entries of this replica's terms."""

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
class RunnerHealth:
    """A snapshot of the runner's health (for ``/livez``, ``/readyz``, ``/leader``).

    ``live``: the control loop ticks (independent of ZooKeeper). ``ready``: connected, in the election and,
    with warm standby, the career ready — true on followers too. ``leader``: leading with the writer active.
    """

    live: bool
    ready: bool
    leader: bool
    role: str
    epoch: int | None = None
    reasons: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, state: RunnerState, epoch: int | None, *, loop_on_time: bool, stalled: Stall | None,
           zk_connected: bool, drained: str | None, unhealthy: str | None, career_ready: bool,
           leads: bool) -> RunnerHealth:
        """The snapshot of a runner in ``state``: ``loop_on_time`` (the loop came round within the liveness
        timeout), ``drained`` (why, when drained), ``unhealthy`` (the health gate's reason), ``leads`` (the
        election leads in the term of ``epoch``)."""
        reasons = []
        live = loop_on_time and stalled is None
        if stalled is not None:
            reasons.append(f"stalled: {stalled.describe()}")
        elif not live:
            reasons.append("control loop stalled")
        if not zk_connected:
            reasons.append("ZooKeeper disconnected")
        in_election = state in (RunnerState.FOLLOWING, RunnerState.LEADING, RunnerState.PAUSED)
        if drained is not None and state is RunnerState.DRAINED:
            reasons.append(drained)
        elif state is RunnerState.UNHEALTHY:
            reasons.append(f"unhealthy: {unhealthy}")
        elif not in_election:
            reasons.append(f"not in the election ({state.value})")
        if not career_ready:
            reasons.append("career not ready (warming up)")
        return cls(live=live, ready=live and zk_connected and in_election and career_ready,
                   leader=live and state is RunnerState.LEADING and leads, role=state.value, epoch=epoch,
                   reasons=reasons)
