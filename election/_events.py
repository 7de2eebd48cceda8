"""The leadership events an ``Election`` delivers to its ``on_event`` callback, in order, from its control thread.

Each carries the queue whose election sent it (``queue``, 0 in a group of one queue), so that one consumer can
take the events of several queues' elections on one queue of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConnectionChanged", "Elected", "ElectionEvent", "Following", "Resumed", "Revoked", "Suspended"]


@dataclass(frozen=True)
class Following:
    """Joined and waiting: ``position`` places in line (1 = next); sent on each change of predecessor."""

    leader_replica: str | None
    position: int
    queue: int = 0


@dataclass(frozen=True)
class Elected:
    """A term begins: own node is the lowest and owned by this session; ``epoch`` is its fencing token."""

    epoch: int
    queue: int = 0


@dataclass(frozen=True)
class Suspended:
    """The leader must pause at once: the connection is suspended or the safe-until deadline passed."""

    epoch: int
    reason: str
    queue: int = 0


@dataclass(frozen=True)
class Resumed:
    """Same session reconnected and own node re-verified (exists, lowest, owned by us): the term goes on."""

    epoch: int
    queue: int = 0


@dataclass(frozen=True)
class Revoked:
    """The term is over (exactly once per term, only after ``Elected``): stop writing and hand over."""

    epoch: int
    reason: str
    queue: int = 0


@dataclass(frozen=True)
class ConnectionChanged:
    """The ZooKeeper connection went up or down (kazoo CONNECTED vs SUSPENDED/LOST)."""

    connected: bool
    queue: int = 0


ElectionEvent = Following | Elected | Suspended | Resumed | Revoked | ConnectionChanged
