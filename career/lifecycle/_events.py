"""What the runner's queue carries besides the election's events: a stop request, operators' requests, a queue's
stall.

Plain values, posted from other threads (a signal handler, ZooKeeper watches, the progress watchdog); only the
runner's control thread acts on them. Those about one queue carry it, as the election's events do.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenure.career.lifecycle._stall import Stall
from tenure.election import DrainRequest, ElectionEvent, HandoverRequest

__all__ = ["BalanceChanged", "DrainChanged", "HandoverRequested", "QueueStalled", "RunnerEvent", "StopRequested"]


@dataclass(frozen=True)
class StopRequested:
    """Hand over gracefully and stop (SIGTERM, SIGINT): ``reason`` names what asked."""

    reason: str


@dataclass(frozen=True)
class DrainChanged:
    """The replica's drain node changed: ``request`` is None once undrained."""

    request: DrainRequest | None


@dataclass(frozen=True)
class HandoverRequested:
    """Queue ``queue``'s handover request changed: ``request`` is None once it is gone (or unreadable)."""

    request: HandoverRequest | None
    queue: int = 0


@dataclass(frozen=True)
class BalanceChanged:
    """The balance's members or a queue's line changed (a watch fired): read the view again."""


@dataclass(frozen=True)
class QueueStalled:
    """The progress watchdog found the term of ``stall.queue`` stalled: revoke that term alone (a group of several
    queues; in a group of one, a stall is the replica's fail-stop)."""

    stall: Stall


RunnerEvent = ElectionEvent | StopRequested | DrainChanged | HandoverRequested | QueueStalled | BalanceChanged
