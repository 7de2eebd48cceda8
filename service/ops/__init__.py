"""Operator tools that work against a running deployment: ``tenure status``, ``verify``, ``groups``, ``produce``.

They talk to ZooKeeper and read the data root; none starts a replica or a ZooKeeper server.
"""

from service.ops._groups import connected, format_groups, queue_lag, queue_report, remove_group
from service.ops._producer import Producer, ProducerError, produce, write_lines
from service.ops._status import fetch_status, format_status_table, show_status
from service.ops._verify import VerifyReport, verify

__all__ = [
    "Producer",
    "ProducerError",
    "VerifyReport",
    "connected",
    "fetch_status",
    "format_groups",
    "format_status_table",
    "produce",
    "queue_lag",
    "queue_report",
    "remove_group",
    "show_status",
    "verify",
    "write_lines",
]
