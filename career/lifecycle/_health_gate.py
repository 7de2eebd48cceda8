"""The health gate: a replica whose career cannot work (storage, Spark) waits out of the election, rather than
fail its batches, and rejoins once it can (HDFS ZKFC's HealthMonitor)."""

from __future__ import annotations

import enum
from collections.abc import Callable

from tenure.career._protocol import Career
from tenure.career.lifecycle._states import RunnerState

__all__ = ["HEALTH_EVERY_S", "HealthGate", "HealthStep"]

#: How often the runner asks the career whether it can work (``Career.unhealthy``).
HEALTH_EVERY_S = 2.0

_S = RunnerState
#: States an unhealthy career takes the replica out of (a drained replica stays drained).
_GATED = frozenset({_S.FOLLOWING, _S.LEADING, _S.PAUSED, _S.BACKING_OFF})


class HealthStep(enum.Enum):
    """What the runner does after a health check."""

    NOTHING = "nothing"
    LEAVE = "leave"  # leave the election (handing over first when leading), to UNHEALTHY
    REJOIN = "rejoin"  # healthy again: join the election


class HealthGate:
    """Asks the career every :data:`HEALTH_EVERY_S` whether it can work, and keeps the last answer."""

    def __init__(self, career: Career, clock: Callable[[], float]) -> None:
        self._career = career
        self._clock = clock
        self._next_check = 0.0
        self.reason: str | None = None  # why the career cannot work, as last seen; None when it can

    def due(self) -> bool:
        """Whether a check is due now (and, if so, schedule the next one)."""
        now = self._clock()
        if now < self._next_check:
            return False
        self._next_check = now + HEALTH_EVERY_S
        return True

    def probe(self) -> str | None:
        """``Career.unhealthy()``: why the career cannot work now, or None."""
        check = getattr(self._career, "unhealthy", None)  # a career of one's own from before the check: healthy
        try:
            return check() if check is not None else None
        except Exception as exc:  # a health check that raises says the career is not well
            return f"the health check raised {type(exc).__name__}: {exc}"

    def check(self, state: RunnerState) -> HealthStep:
        """Probe the career, keep the answer, and say what it means in ``state``."""
        self.reason = self.probe()
        if self.reason is not None and state in _GATED:
            return HealthStep.LEAVE
        if self.reason is None and state is _S.UNHEALTHY:
            return HealthStep.REJOIN
        return HealthStep.NOTHING
