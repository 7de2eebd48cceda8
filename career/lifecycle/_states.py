"""The runner's states, the transitions between them, and its settings.

The runner (``career/lifecycle/_runner.py``) changes state only through :data:`TRANSITIONS`; a move outside it is
a bug and raises.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tenure.election import ConfigError

__all__ = ["TRANSITIONS", "RunnerSettings", "RunnerState"]


class RunnerState(enum.Enum):
    """Where the replica is in its career."""

    STARTING = "starting"  # warming the career up; not yet in the election
    FOLLOWING = "following"  # in the election, waiting
    LEADING = "leading"  # elected and inaugurated: execute() runs
    PAUSED = "paused"  # leading but suspended (connection or safe-until): no execute, no commit
    BACKING_OFF = "backing_off"  # the career raised: out of the election for a growing delay
    DRAINED = "drained"  # out of the election on an operator's request (tenure drain), career warm
    UNHEALTHY = "unhealthy"  # out of the election while the career cannot work (storage, Spark); rejoins when well
    STOPPING = "stopping"  # a signal arrived: handing over
    STOPPED = "stopped"


TRANSITIONS: dict[RunnerState, frozenset[RunnerState]] = {
    RunnerState.STARTING: frozenset({RunnerState.FOLLOWING, RunnerState.DRAINED, RunnerState.STOPPING}),
    RunnerState.FOLLOWING: frozenset({RunnerState.LEADING, RunnerState.BACKING_OFF, RunnerState.DRAINED,
                                      RunnerState.UNHEALTHY, RunnerState.STOPPING}),
    RunnerState.LEADING: frozenset({RunnerState.PAUSED, RunnerState.FOLLOWING, RunnerState.BACKING_OFF,
                                    RunnerState.DRAINED, RunnerState.UNHEALTHY, RunnerState.STOPPING}),
    RunnerState.PAUSED: frozenset({RunnerState.LEADING, RunnerState.FOLLOWING, RunnerState.BACKING_OFF,
                                   RunnerState.DRAINED, RunnerState.UNHEALTHY, RunnerState.STOPPING}),
    RunnerState.BACKING_OFF: frozenset({RunnerState.FOLLOWING, RunnerState.DRAINED, RunnerState.UNHEALTHY,
                                        RunnerState.STOPPING}),
    RunnerState.DRAINED: frozenset({RunnerState.FOLLOWING, RunnerState.UNHEALTHY, RunnerState.STOPPING}),
    RunnerState.UNHEALTHY: frozenset({RunnerState.FOLLOWING, RunnerState.DRAINED, RunnerState.STOPPING}),
    RunnerState.STOPPING: frozenset({RunnerState.STOPPED}),
    RunnerState.STOPPED: frozenset(),
}


@dataclass(frozen=True)
class RunnerSettings:
    """The runner's timings, validated here (``ReplicaConfig`` builds them from its flags).

    Attributes:
        handover_timeout_s: the graceful handover's budget: stop the career, write the handover record, release.
        idle_backoff_s: pause after an ``execute()`` that found no work.
        failure_backoff_s: first back-off after the career raised; doubles up to ``failure_backoff_max_s``.
        failure_backoff_max_s: cap of the failure back-off; a term longer than this forgives earlier failures.
        liveness_timeout_s: the control loop must come round this often; past it ``/livez`` fails and the
            progress watchdog declares a stall (the replica gives its lock up and exits). Hazard: a step on the
            control thread bounded by more than this (an inauguration that starts Spark) declares its own
            allowance (``first_batch_allowance_s``).
        tick_s: the loop's longest wait for an event.
        canary_handover_every_s: a leader hands over to the next ready follower after this long (None: never),
            so a broken standby is found before a real failure needs it.
        stall_timeout_s: a leader with input waiting (queue files or due retries) that finishes no batch for this
            long is stalled: it gives its lock up at once, records why, and exits non-zero for its supervisor to
            restart it (default 120: a steady batch takes well under 2 s here, the heaviest measured about 10 s).
            Hazard: below the longest batch the input can make, a healthy leader is replaced mid-batch.
        first_batch_allowance_s: added to ``stall_timeout_s`` for a term's first batch and to the liveness
            timeout for an inauguration: starting Spark, a cluster's executors registering, loading the state
            (default 60).
        max_batch_attempts: a batch that failed (or stalled) this many terms in a row, whichever replicas led
            them, is set aside with its files, its error and the count, and the queue moves on (default 3). A
            failure while the storage, Spark or ZooKeeper is down is no attempt.
    """

    replica_id: str
    handover_timeout_s: float = 5.0
    idle_backoff_s: float = 0.1
    failure_backoff_s: float = 1.0
    failure_backoff_max_s: float = 60.0
    liveness_timeout_s: float = 30.0
    tick_s: float = 0.5
    canary_handover_every_s: float | None = None
    stall_timeout_s: float = 120.0
    first_batch_allowance_s: float = 60.0
    max_batch_attempts: int = 3

    def __post_init__(self) -> None:
        if self.max_batch_attempts < 1:
            raise ConfigError(f"max_batch_attempts={self.max_batch_attempts} is below 1: raise it to at least 1")
        if self.first_batch_allowance_s < 0:
            raise ConfigError(f"first_batch_allowance_s={self.first_batch_allowance_s:g} is negative: use 0 for "
                              "no allowance")
        for name in ("handover_timeout_s", "idle_backoff_s", "failure_backoff_s", "failure_backoff_max_s",
                     "liveness_timeout_s", "tick_s", "stall_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)!r} must be a positive number of seconds")
        if self.canary_handover_every_s is not None and not self.canary_handover_every_s > 0:
            raise ConfigError(f"canary_handover_every_s={self.canary_handover_every_s!r} must be a positive number "
                              "of seconds (leave it unset for no canary handovers)")
        if self.failure_backoff_max_s < self.failure_backoff_s:
            raise ConfigError(f"failure_backoff_max_s={self.failure_backoff_max_s:g} is below failure_backoff_s="
                              f"{self.failure_backoff_s:g}: raise failure_backoff_max_s")
