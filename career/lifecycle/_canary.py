"""The canary policy: a leader hands over on schedule, so its successor's first commit tests the warm standby."""

from __future__ import annotations

from collections.abc import Callable

from tenure.election import Contender

__all__ = ["CANARY", "CanarySchedule"]

CANARY = "canary"
"""The reason a canary handover gives (``--canary-handover-every-s``); its successor reports the gap it saw."""


class CanarySchedule:
    """When the leader hands over next, every ``every_s`` of a term (never when None), and to whom.

    Example::

        canary = CanarySchedule(3600, time.monotonic)
        canary.term_began()          # the first handover is due an hour into the term
        if canary.due():
            canary.fired()           # the next one an hour from now, whether this one finds a follower or not
            to = CanarySchedule.successor(election.contenders())
    """

    def __init__(self, every_s: float | None, clock: Callable[[], float]) -> None:
        self._every_s = every_s
        self._clock = clock
        self._next = 0.0

    def term_began(self) -> None:
        if self._every_s is not None:
            self._next = self._clock() + self._every_s

    def due(self) -> bool:
        return self._every_s is not None and self._clock() >= self._next

    def fired(self) -> None:
        assert self._every_s is not None
        self._next = self._clock() + self._every_s

    @staticmethod
    def successor(contenders: list[Contender]) -> str | None:
        """The next follower in line (every follower in line is warm and healthy: it joined after warming up and
        leaves when unhealthy); None when no follower is in line."""
        followers = [c.identity.replica_id for c in contenders[1:] if c.identity is not None]
        return followers[0] if followers else None
