"""The replica process (``tenure run``): config, the runner's control loop, metrics, health, logs, fault points.

Imports nothing from ``service.ops``, ``service.local`` or ``service.drill``: a production replica carries no
operator tool and no local infrastructure.
"""

from career.lifecycle import RunnerState, StallReason
from service.replica._config import ReplicaConfig, load_config
from service.replica._faults import FAULT_POINTS, FaultFile, InjectedFault, arm
from service.replica._four_letter import four_letter_word
from service.replica._health import Health, HealthServer
from service.replica._lifecycle import EXIT_STALLED
from service.replica._logs import configure_logging, log_to_file
from service.replica._metrics import (
    BATCHES,
    COMMITS_FENCED,
    CONTROL_LOOP_AGE,
    IS_LEADER,
    LEADER_EPOCH,
    PROGRESS_AGE,
    RECORDS,
    SOURCE_BACKLOG_FILES,
    STALLS,
    ZK_CONNECTED,
    Metrics,
)
from service.replica._process import run_replica
from service.replica._proctree import pause_descendants, pause_tree, resume_tree, tree_pids
from service.replica._registry import (
    QUEUES,
    GroupError,
    RegisteredGroup,
    list_groups,
    queue_path,
    register_group,
    registered_groups,
)

__all__ = [
    "BATCHES",
    "COMMITS_FENCED",
    "CONTROL_LOOP_AGE",
    "EXIT_STALLED",
    "FAULT_POINTS",
    "IS_LEADER",
    "LEADER_EPOCH",
    "PROGRESS_AGE",
    "QUEUES",
    "RECORDS",
    "SOURCE_BACKLOG_FILES",
    "STALLS",
    "ZK_CONNECTED",
    "FaultFile",
    "GroupError",
    "Health",
    "HealthServer",
    "InjectedFault",
    "Metrics",
    "RegisteredGroup",
    "ReplicaConfig",
    "RunnerState",
    "StallReason",
    "arm",
    "configure_logging",
    "four_letter_word",
    "list_groups",
    "load_config",
    "log_to_file",
    "pause_descendants",
    "pause_tree",
    "queue_path",
    "register_group",
    "registered_groups",
    "resume_tree",
    "run_replica",
    "tree_pids",
]
