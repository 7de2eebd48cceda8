"""What the runner's queue carries besides the election's events: a stop request and operators' requests.

Plain values, posted from other threads (a signal handler, ZooKeeper watches); only the runner's control thread
acts on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenure.election import DrainRequest, ElectionEvent, HandoverRequest

__all__ = ["DrainChanged", "HandoverRequested", "RunnerEvent", "StopRequested"]


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
    """The group's handover request changed: ``request`` is None once it is gone (or unreadable)."""

    request: HandoverRequest | None


RunnerEvent = ElectionEvent | StopRequested | DrainChanged | HandoverRequested
