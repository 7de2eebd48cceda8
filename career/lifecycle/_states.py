"""The runner's states — the replica's, and each of its seats' — the transitions between them, the role each seat
shows, and the runner's settings.

A replica is in or out of every queue's line at once (:class:`ReplicaState`); within an active replica, each seat —
its place in one queue's line — follows, leads, is paused or backs off on its own (:class:`SeatState`). The runner
(``career/lifecycle/_runner.py``) changes either only through its table (:data:`REPLICA_TRANSITIONS`,
:data:`SEAT_TRANSITIONS`); a move outside it is a bug and raises. What a seat shows operators, in the
``runner_state`` log event and ``/readyz``, is its :class:`Role`, the two read together: in a group of one queue
exactly the states the runner had before queues.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tenure.errors import ConfigError
from tenure.settings import setting

__all__ = ["REPLICA_TRANSITIONS", "SEAT_TRANSITIONS", "ReplicaState", "Role", "RunnerSettings", "SeatState",
           "role_of"]


class ReplicaState(enum.Enum):
    """Where the replica is: in every queue's line, or out of all of them."""

    STARTING = "starting"  # warming the standby up; in no line yet
    ACTIVE = "active"  # in the lines (each seat says where it is in its own)
    DRAINED = "drained"  # out of every line on an operator's request (tenure drain), standby warm
    UNHEALTHY = "unhealthy"  # out of every line while the careers cannot work (storage, Spark); rejoins when well
    STOPPING = "stopping"  # a signal arrived: handing over every led queue
    STOPPED = "stopped"


class SeatState(enum.Enum):
    """Where the replica is in one queue's line."""

    OUT = "out"  # not in the line: the replica is not active, or it leads --max-queues-led queues already
    FOLLOWING = "following"  # in the line, waiting
    LEADING = "leading"  # elected and inaugurated: the queue's career executes
    PAUSED = "paused"  # leading but suspended (connection or safe-until): no execute, no commit
    BACKING_OFF = "backing_off"  # the queue's career raised (or stalled): out of its line for a growing delay


class Role(enum.Enum):
    """What one seat shows: its state while the replica is active, the replica's state otherwise (the states the
    runner had before queues, and ``out``)."""

    STARTING = "starting"
    OUT = "out"
    FOLLOWING = "following"
    LEADING = "leading"
    PAUSED = "paused"
    BACKING_OFF = "backing_off"
    DRAINED = "drained"
    UNHEALTHY = "unhealthy"
    STOPPING = "stopping"
    STOPPED = "stopped"


def role_of(replica: ReplicaState, seat: SeatState) -> Role:
    """The role of a seat in ``seat`` of a replica in ``replica``."""
    return Role(seat.value) if replica is ReplicaState.ACTIVE else Role(replica.value)


_R = ReplicaState
REPLICA_TRANSITIONS: dict[ReplicaState, frozenset[ReplicaState]] = {
    _R.STARTING: frozenset({_R.ACTIVE, _R.DRAINED, _R.STOPPING}),
    _R.ACTIVE: frozenset({_R.DRAINED, _R.UNHEALTHY, _R.STOPPING}),
    _R.DRAINED: frozenset({_R.ACTIVE, _R.UNHEALTHY, _R.STOPPING}),
    _R.UNHEALTHY: frozenset({_R.ACTIVE, _R.DRAINED, _R.STOPPING}),
    _R.STOPPING: frozenset({_R.STOPPED}),
    _R.STOPPED: frozenset(),
}

_S = SeatState
SEAT_TRANSITIONS: dict[SeatState, frozenset[SeatState]] = {
    _S.OUT: frozenset({_S.FOLLOWING}),
    _S.FOLLOWING: frozenset({_S.LEADING, _S.BACKING_OFF, _S.OUT}),
    _S.LEADING: frozenset({_S.PAUSED, _S.FOLLOWING, _S.BACKING_OFF, _S.OUT}),
    _S.PAUSED: frozenset({_S.LEADING, _S.FOLLOWING, _S.BACKING_OFF, _S.OUT}),
    _S.BACKING_OFF: frozenset({_S.FOLLOWING, _S.OUT}),
}


@dataclass(frozen=True, kw_only=True)
class RunnerSettings:
    """The runner's settings, each declared with its default, unit and hazard (``tenure run``'s flags of the same
    names), validated here.

    Example::

        RunnerSettings(replica_id="r1", handover_timeout_s=2.0)

    Attributes:
        replica_id: this replica's id (the replica's own setting, given when the runner is wired).
        tick_s: the loop's longest wait for an event (default 0.5; not an operator's setting).
    """

    replica_id: str
    tick_s: float = 0.5
    handover_timeout_s: float = setting(
        5.0, unit="s", help="Graceful handover budget: the career's hand-over, the handover record, the release. "
        "After SIGTERM the handover gets this + 2 s for each queue the replica leads (they hand over one after "
        "another), then closing Spark gets this + 2 s (`career_closed` logs "
        "how long it took); past either, the replica kills its Spark processes and exits 3 (`handover_overrun`, "
        "`close_overrun`). A second signal exits at once (128 + the signal), killing them too.",
        hazard="Must be below the session timeout, or a stuck leader outlives its lease.")
    idle_backoff_s: float = setting(0.1, unit="s", help="Pause after an execute() that found no work.")
    failure_backoff_s: float = setting(1.0, unit="s", help="First back-off after the career raised; doubles.")
    failure_backoff_max_s: float = setting(
        60.0, unit="s", help="Cap of the failure back-off; a term longer than this forgives earlier failures.")
    max_batch_attempts: int = setting(
        3, unit="terms", help="A batch that failed or stalled this many terms in a row, whichever replicas led "
        "them, and for at least set_aside_after_s, is split: what still fails in it is set aside under set-aside/ "
        "with its error, the rest is written, and the queue moves on; failures while storage, Spark or ZooKeeper "
        "is down do not count.",
        hazard="At 1 a batch that failed once on a flaky executor is split at once (once set_aside_after_s has "
        "passed).")
    set_aside_after_s: float = setting(
        600.0, unit="s", help="A failing batch is set aside only once it has been failing this long as well as "
        "max_batch_attempts terms, so a dependency outage shorter than this (a lookup that times out, a starved "
        "worker, a full spark.local.dir) sets nothing aside: its terms fail, with the failure back-off growing, "
        "until it heals. Measured from the batch's first failure on each replica's monotonic clock, carried in "
        "the handover record (no wall clock): time in which no replica that saw the count ran is not counted.",
        hazard="Meanwhile a batch that really is poison holds the queue back, and the group's output waits, this "
        "long; at 0 the count alone decides, and an outage of a few terms sets healthy records aside.")
    canary_handover_every_s: float | None = setting(
        None, unit="s", default_text="never", help="A leader hands over to the next ready follower after this "
        "long, so a broken standby shows before a real failure needs it.",
        hazard="Each canary is a handover: output pauses for about a second.")
    balance_settle_s: float = setting(
        10.0, unit="s", help="In a group of several queues, a replica moves a queue it leads to the member the "
        "balance's plan gives it only once the set of members has not changed for this long (each replica's "
        "monotonic clock), so a replica that restarts, or several that start together, cause the moves of the "
        "final set alone.",
        hazard="Each move is a handover (a gap of about a second in that queue's output); too short, a restart "
        "moves queues twice; too long, a new replica waits this long for its share.")
    max_queues_led: int | None = setting(
        None, unit="queues", default_text="no cap", help="A replica leading this many queues leaves the lines of the "
        "queues it does not lead, and joins them again once it leads fewer, so that the others lead them.",
        hazard="With fewer replicas than queues ÷ this cap, some queues have no leader (the TenureNoLeader alert "
        "fires for each).")

    def __post_init__(self) -> None:
        if self.max_batch_attempts < 1:
            raise ConfigError(f"max_batch_attempts={self.max_batch_attempts} is below 1: raise it to at least 1")
        if self.set_aside_after_s < 0:
            raise ConfigError(f"set_aside_after_s={self.set_aside_after_s:g} is negative: use 0 for the count alone")
        for name in ("handover_timeout_s", "idle_backoff_s", "failure_backoff_s", "failure_backoff_max_s", "tick_s",
                     "balance_settle_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)!r} must be a positive number of seconds")
        if self.canary_handover_every_s is not None and not self.canary_handover_every_s > 0:
            raise ConfigError(f"canary_handover_every_s={self.canary_handover_every_s!r} must be a positive number "
                              "of seconds (leave it unset for no canary handovers)")
        if self.max_queues_led is not None and self.max_queues_led < 1:
            raise ConfigError(f"max_queues_led={self.max_queues_led} is below 1: raise it to at least 1 (leave it "
                              "unset for no cap)")
        if self.failure_backoff_max_s < self.failure_backoff_s:
            raise ConfigError(f"failure_backoff_max_s={self.failure_backoff_max_s:g} is below failure_backoff_s="
                              f"{self.failure_backoff_s:g}: raise failure_backoff_max_s")
