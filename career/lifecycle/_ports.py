"""The runner's ports: what it needs from the process it runs in, which ``service/replica`` implements.

The runner knows terms, careers and the election; metrics, the progress watchdog, the JVM's process tree, the
ZooKeeper watches of operators' requests and the term history's counts belong to the replica process, reached
only through these protocols (client-go's leader election takes its lock and its metrics the same way).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tenure.career._protocol import HandoverRecord, Outcome
from tenure.career.lifecycle._stall import StallReason
from tenure.election import DrainRequest, Election, Fence, HandoverRequest

__all__ = [
    "LoopProgress",
    "ProcessControl",
    "RequestSource",
    "RequestSourceFactory",
    "RunnerHealth",
    "RunnerObserver",
    "TermJournal",
    "TermJournalFactory",
]


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

    def working(self, leading: bool, *, new_term: bool = False) -> None:
        """The runner began (or resumed) leading, or stopped."""

    def batch_in_flight(self) -> int | None:
        """The batch running now, if any."""


class RequestSource(Protocol):
    """Operators' requests (``tenure drain``, ``tenure handover``): read now, and watched into the runner's queue
    as ``DrainChanged`` and ``HandoverRequested``."""

    def live(self, request: HandoverRequest) -> bool:
        """Whether ``request`` is still live, timed from its first reading on this replica's monotonic clock."""

    def drain(self, timeout_s: float) -> DrainRequest | None: ...

    def handover(self, timeout_s: float) -> HandoverRequest | None: ...

    def delete_handover(self, request: HandoverRequest, timeout_s: float) -> None: ...

    def watch(self) -> None:
        """Post every change from now on."""


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


#: Builds the operators' request source of ``election``'s group, posting to the runner's queue.
RequestSourceFactory = Callable[[Election, Callable[..., None]], RequestSource]
#: Builds the term journal of ``election``'s group.
TermJournalFactory = Callable[[Election], TermJournal]


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
