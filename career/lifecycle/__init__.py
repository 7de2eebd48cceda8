"""The lifecycle's control loop: the runner that drives the ``Career`` of each queue a replica may lead, one seat per
queue, from election events, its states (the replica's and each seat's) and transition tables, the policies it
consults (canary, drain, health gate, handover requests, the cap on queues led), the fail-stop, the poison-batch
count, its log events and its ports.

Knows nothing of ZooKeeper, processes, metrics or HTTP: ``tenure.election.Election`` implements ``Leadership`` and
``tenure.election.OperatorRequests`` ``RequestSource``; ``tenure.service.replica`` implements the other ports
(``RunnerObserver``, ``LoopProgress``, ``ProcessControl``, ``TermJournal``) and wires the runner.
"""

from tenure.career.lifecycle._canary import CANARY, CanarySchedule
from tenure.career.lifecycle._drain import DrainPolicy, DrainStep
from tenure.career.lifecycle._events import (
    DrainChanged,
    HandoverRequested,
    QueueStalled,
    RunnerEvent,
    StopRequested,
)
from tenure.career.lifecycle._health_gate import HEALTH_EVERY_S, HealthGate, HealthStep
from tenure.career.lifecycle._log_events import (
    BACKING_OFF,
    BATCH_ATTEMPT_FAILED,
    CANARY_HANDOVER,
    CANARY_SKIPPED,
    CAREER_FAILED,
    COMMIT_OUTCOME_UNKNOWN,
    DEFERRED_TO_HANDOVER_TARGET,
    DRAINED,
    EXECUTE_NOT_LEADER,
    FENCED,
    HANDED_OVER,
    HANDING_OVER,
    HANDOVER_RECORD_NOT_WRITTEN,
    HANDOVER_RECORDED,
    HANDOVER_REQUESTED,
    HEALTHY_AGAIN,
    INAUGURATED,
    INAUGURATING,
    INAUGURATION_ABANDONED,
    LEADERSHIP_SUSPENDED,
    LEFT_ELECTION,
    LEFT_LINE_AT_CAP,
    QUEUE_STALLED,
    RUNNER_LOGGER,
    RUNNER_STARTING,
    RUNNER_STATE,
    STALE_ELECTED_IGNORED,
    STALLED,
)
from tenure.career.lifecycle._pending_handover import HandoverRequests, PendingHandover
from tenure.career.lifecycle._ports import (
    Leadership,
    LoopProgress,
    ProcessControl,
    RequestSource,
    RunnerHealth,
    RunnerObserver,
    SeatHealth,
    TermJournal,
)
from tenure.career.lifecycle._runner import Runner
from tenure.career.lifecycle._stall import STALL_REASONS, Stall, StallReason
from tenure.career.lifecycle._states import (
    REPLICA_TRANSITIONS,
    SEAT_TRANSITIONS,
    ReplicaState,
    Role,
    RunnerSettings,
    SeatState,
    role_of,
)

__all__ = [
    "BACKING_OFF",
    "BATCH_ATTEMPT_FAILED",
    "CANARY",
    "CANARY_HANDOVER",
    "CANARY_SKIPPED",
    "CAREER_FAILED",
    "COMMIT_OUTCOME_UNKNOWN",
    "DEFERRED_TO_HANDOVER_TARGET",
    "DRAINED",
    "EXECUTE_NOT_LEADER",
    "FENCED",
    "HANDED_OVER",
    "HANDING_OVER",
    "HANDOVER_RECORDED",
    "HANDOVER_RECORD_NOT_WRITTEN",
    "HANDOVER_REQUESTED",
    "HEALTHY_AGAIN",
    "HEALTH_EVERY_S",
    "INAUGURATED",
    "INAUGURATING",
    "INAUGURATION_ABANDONED",
    "LEADERSHIP_SUSPENDED",
    "LEFT_ELECTION",
    "LEFT_LINE_AT_CAP",
    "QUEUE_STALLED",
    "REPLICA_TRANSITIONS",
    "RUNNER_LOGGER",
    "RUNNER_STARTING",
    "RUNNER_STATE",
    "SEAT_TRANSITIONS",
    "STALE_ELECTED_IGNORED",
    "STALLED",
    "STALL_REASONS",
    "CanarySchedule",
    "DrainChanged",
    "DrainPolicy",
    "DrainStep",
    "HandoverRequested",
    "HandoverRequests",
    "HealthGate",
    "HealthStep",
    "Leadership",
    "LoopProgress",
    "PendingHandover",
    "ProcessControl",
    "QueueStalled",
    "ReplicaState",
    "RequestSource",
    "Role",
    "Runner",
    "RunnerEvent",
    "RunnerHealth",
    "RunnerObserver",
    "RunnerSettings",
    "SeatHealth",
    "SeatState",
    "Stall",
    "StallReason",
    "StopRequested",
    "TermJournal",
    "role_of",
]
