"""Operator tools that work against a running deployment: ``tenure status``, ``verify``, ``groups``, ``produce``,
``replay``.

They talk to ZooKeeper and read the data root; none starts a replica or a ZooKeeper server. ``_produce/`` is
the producer, ``_verify/`` the auditor, ``_groups`` and ``_status`` the views of groups and leaders, ``_replay``
the request for set-aside records to be written; all take the queue's contract (layout, names, record) from
:mod:`tenure.career.queue`.
"""

from tenure.service.ops._drain import DrainError, drain, undrain, wait_in_election
from tenure.service.ops._groups import (
    GroupError,
    check_group_data,
    format_groups,
    queue_key,
    queue_lag,
    queue_report,
    remove_group,
)
from tenure.service.ops._handover import HandoverDone, HandoverError, request_handover, wait_handover
from tenure.service.ops._history import format_history, show_history
from tenure.service.ops._produce import Producer, ProducerError, produce, write_lines
from tenure.service.ops._queues import choose_queue, group_queue_count
from tenure.service.ops._replay import ReplayError, Requested, request_replay
from tenure.service.ops._scrape import by_queue, sample_key, scrape
from tenure.service.ops._status import fetch_status, format_status_table, show_status
from tenure.service.ops._verify import (
    CONTENT_FIELDS,
    VERIFIED,
    GroupCommits,
    VerifyReport,
    check_data_root,
    read_committed_batches,
    verify,
)

__all__ = [
    "CONTENT_FIELDS",
    "VERIFIED",
    "DrainError",
    "GroupCommits",
    "GroupError",
    "HandoverDone",
    "HandoverError",
    "Producer",
    "ProducerError",
    "ReplayError",
    "Requested",
    "VerifyReport",
    "by_queue",
    "check_data_root",
    "check_group_data",
    "choose_queue",
    "drain",
    "fetch_status",
    "format_groups",
    "format_history",
    "format_status_table",
    "group_queue_count",
    "produce",
    "queue_key",
    "queue_lag",
    "queue_report",
    "read_committed_batches",
    "remove_group",
    "request_handover",
    "request_replay",
    "sample_key",
    "scrape",
    "show_history",
    "show_status",
    "undrain",
    "verify",
    "wait_handover",
    "wait_in_election",
    "write_lines",
]
