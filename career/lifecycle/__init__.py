"""The lifecycle's control loop: the runner that drives a ``Career`` from election events, its states and
transition table, the policies it consults (canary, drain, health gate, handover requests) and its ports.

Knows nothing of processes, metrics or HTTP: ``tenure.service.replica`` implements the ports (``RunnerObserver``,
``LoopProgress``, ``ProcessControl``, ``RequestSource``, ``TermJournal``) and wires the runner.
"""

from tenure.career.lifecycle._canary import CANARY, CanarySchedule
from tenure.career.lifecycle._drain import DrainPolicy, DrainStep
from tenure.career.lifecycle._events import DrainChanged, HandoverRequested, RunnerEvent, StopRequested
from tenure.career.lifecycle._health_gate import HEALTH_EVERY_S, HealthGate, HealthStep
from tenure.career.lifecycle._pending_handover import HandoverRequests, PendingHandover
from tenure.career.lifecycle._ports import (
    LoopProgress,
    ProcessControl,
    RequestSource,
    RequestSourceFactory,
    RunnerHealth,
    RunnerObserver,
    TermJournal,
    TermJournalFactory,
)
from tenure.career.lifecycle._runner import Runner
from tenure.career.lifecycle._stall import STALL_REASONS, Stall, StallReason
from tenure.career.lifecycle._states import TRANSITIONS, RunnerSettings, RunnerState

__all__ = [
    "CANARY",
    "HEALTH_EVERY_S",
    "STALL_REASONS",
    "TRANSITIONS",
    "CanarySchedule",
    "DrainChanged",
    "DrainPolicy",
    "DrainStep",
    "HandoverRequested",
    "HandoverRequests",
    "HealthGate",
    "HealthStep",
    "LoopProgress",
    "PendingHandover",
    "ProcessControl",
    "RequestSource",
    "RequestSourceFactory",
    "Runner",
    "RunnerEvent",
    "RunnerHealth",
    "RunnerObserver",
    "RunnerSettings",
    "RunnerState",
    "Stall",
    "StallReason",
    "StopRequested",
    "TermJournal",
    "TermJournalFactory",
]
