"""The lifecycle's control loop: the runner that drives a ``Career`` from election events, its states and
transition table, the policies it consults (canary, drain, health gate, handover requests) and its ports.

Knows nothing of processes, metrics or HTTP: ``service.replica`` implements the ports (``RunnerObserver``,
``LoopProgress``, ``ProcessControl``, ``RequestSource``, ``TermJournal``) and wires the runner.
"""

from career.lifecycle._canary import CANARY, CanarySchedule
from career.lifecycle._drain import DrainPolicy, DrainStep
from career.lifecycle._events import DrainChanged, HandoverRequested, RunnerEvent, StopRequested
from career.lifecycle._health_gate import HEALTH_EVERY_S, HealthGate, HealthStep
from career.lifecycle._pending_handover import HandoverRequests, PendingHandover
from career.lifecycle._ports import (
    LoopProgress,
    ProcessControl,
    RequestSource,
    RequestSourceFactory,
    RunnerHealth,
    RunnerObserver,
    TermJournal,
    TermJournalFactory,
)
from career.lifecycle._runner import Runner
from career.lifecycle._stall import STALL_REASONS, Stall, StallReason
from career.lifecycle._states import TRANSITIONS, RunnerSettings, RunnerState

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
