"""The drain policy: a drained replica stays out of every queue's election, handing over first what it leads."""

from __future__ import annotations

import enum
import time

from tenure.career.lifecycle._states import ReplicaState
from tenure.election import DrainRequest

__all__ = ["DrainPolicy", "DrainStep"]

_S = ReplicaState
#: States a drain request takes the replica out of.
_DRAINABLE = frozenset({_S.ACTIVE, _S.UNHEALTHY})


class DrainStep(enum.Enum):
    """What the runner does about a drain request's change."""

    NOTHING = "nothing"
    LEAVE = "leave"  # leave the election (handing over first when leading), to DRAINED
    PARK = "park"  # already out of the election (unhealthy): just DRAINED
    TO_UNHEALTHY = "to_unhealthy"  # undrained while the career cannot work: wait out of the line, UNHEALTHY
    REJOIN = "rejoin"  # undrained and healthy: join the election again


class DrainPolicy:
    """Holds this replica's drain request (``tenure drain``) and says what its changes mean in each state."""

    def __init__(self) -> None:
        self.request: DrainRequest | None = None

    def changed(self, request: DrainRequest | None, state: ReplicaState, *, unhealthy: bool) -> DrainStep:
        self.request = request
        if request is not None and state in _DRAINABLE:
            return DrainStep.PARK if state is _S.UNHEALTHY else DrainStep.LEAVE
        if request is None and state is _S.DRAINED:
            return DrainStep.TO_UNHEALTHY if unhealthy else DrainStep.REJOIN
        return DrainStep.NOTHING

    def describe(self) -> str:
        """Why the replica is out of the election, for ``/readyz``."""
        request = self.request
        assert request is not None
        return (f"drained: {request.reason or 'no reason given'} (since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(request.since))})")
