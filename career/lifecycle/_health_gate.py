"""The health gate: a replica whose careers cannot work (storage, Spark) waits out of every queue's election, rather
than fail their batches, and rejoins once they can (HDFS ZKFC's HealthMonitor). Its standby answers for them all."""

from __future__ import annotations

import enum
from collections.abc import Callable

from tenure.career._protocol import Standby
from tenure.career.lifecycle._states import ReplicaState

__all__ = ["HEALTH_EVERY_S", "HealthGate", "HealthStep"]

#: How often the runner asks the standby whether the careers can work (``Standby.unhealthy``).
HEALTH_EVERY_S = 2.0


class HealthStep(enum.Enum):
    """What the runner does after a health check."""

    NOTHING = "nothing"
    LEAVE = "leave"  # leave the election (handing over first when leading), to UNHEALTHY
    REJOIN = "rejoin"  # healthy again: join the election


class HealthGate:
    """Asks the standby every :data:`HEALTH_EVERY_S` whether the careers can work, and keeps the last answer."""

    def __init__(self, standby: Standby, clock: Callable[[], float]) -> None:
        self._standby = standby
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
        """``Standby.unhealthy()``: why the careers cannot work now, or None."""
        check = getattr(self._standby, "unhealthy", None)  # a career of one's own from before the check: healthy
        try:
            return check() if check is not None else None
        except Exception as exc:  # a health check that raises says the career is not well
            return f"the health check raised {type(exc).__name__}: {exc}"

    def check(self, state: ReplicaState) -> HealthStep:
        """Probe the standby, keep the answer, and say what it means in ``state`` (an active replica leaves; a drained
        one stays drained)."""
        self.reason = self.probe()
        if self.reason is not None and state is ReplicaState.ACTIVE:
            return HealthStep.LEAVE
        if self.reason is None and state is ReplicaState.UNHEALTHY:
            return HealthStep.REJOIN
        return HealthStep.NOTHING
