"""The replica process (``tenure run``): config, the runner's ports, metrics, health, fault points.

Imports nothing from ``tenure.service.ops``, ``tenure.service.local`` or ``tenure.service.drill``: a production
replica carries no operator tool and no local infrastructure.
"""

from tenure.career.lifecycle import Role, StallReason
from tenure.service.replica._config import SETTINGS, ReplicaConfig, load_config, setting_named
from tenure.service.replica._faults import FAULT_INJECTED, FAULT_POINTS, FaultFile, InjectedFault, arm
from tenure.service.replica._health import HTTP_REQUEST_FAILED, HealthServer
from tenure.service.replica._launch import PER_PROCESS, ReplicaSpec
from tenure.service.replica._lifecycle import EXIT_HANDOVER_OVERRUN, EXIT_STALLED, stop_budget_s
from tenure.service.replica._metrics import (
    BATCHES,
    COMMITS_FENCED,
    CONTROL_LOOP_AGE,
    GROUP_BALANCED,
    IS_LEADER,
    LEADER_EPOCH,
    PROGRESS_AGE,
    QUEUE_LOST,
    QUEUE_MOVES,
    QUEUES_LED,
    RECORDS,
    SOURCE_BACKLOG_FILES,
    STALLS,
    ZK_CONNECTED,
    Metrics,
)
from tenure.service.replica._process import run_replica
from tenure.service.replica._proctree import pause_descendants, pause_tree, resume_tree, tree_pids
from tenure.service.replica._term_record import CANARY_GAP

__all__ = [
    "BATCHES",
    "CANARY_GAP",
    "COMMITS_FENCED",
    "CONTROL_LOOP_AGE",
    "EXIT_HANDOVER_OVERRUN",
    "EXIT_STALLED",
    "FAULT_INJECTED",
    "FAULT_POINTS",
    "GROUP_BALANCED",
    "HTTP_REQUEST_FAILED",
    "IS_LEADER",
    "LEADER_EPOCH",
    "PER_PROCESS",
    "PROGRESS_AGE",
    "QUEUES_LED",
    "QUEUE_LOST",
    "QUEUE_MOVES",
    "RECORDS",
    "SETTINGS",
    "SOURCE_BACKLOG_FILES",
    "STALLS",
    "ZK_CONNECTED",
    "FaultFile",
    "HealthServer",
    "InjectedFault",
    "Metrics",
    "ReplicaConfig",
    "ReplicaSpec",
    "Role",
    "StallReason",
    "arm",
    "load_config",
    "pause_descendants",
    "pause_tree",
    "resume_tree",
    "run_replica",
    "setting_named",
    "stop_budget_s",
    "tree_pids",
]
