"""A cluster's cores for the new leader: the applications of earlier terms that a paused leader still holds.

On a cluster, only the leader holds an application (``_career``). A leader that crashes loses its application
with its driver's connection; a leader paused as a whole process tree (SIGSTOP, a frozen VM) keeps the connection
open, so the master keeps its application and its executors' cores until it resumes, and the successor's
application would wait for cores that never come. Each term's application therefore carries its group and epoch
in its name, and a new leader kills, through the master, every application of its group with a lower epoch
before it starts its own. The epoch is the fencing token: a newer term's application is never touched, and an
older term is already fenced in ZooKeeper, so killing its application loses nothing it could still commit.

The career knows no HTTP: the service hands it a :class:`ClusterMaster`.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

__all__ = [
    "STALE_APPLICATIONS_LEFT",
    "STALE_APPLICATION_KILLED",
    "ClusterMaster",
    "application_epoch",
    "reclaim_cores",
    "term_application_name",
]

STALE_APPLICATION_KILLED = "stale_application_killed"
STALE_APPLICATIONS_LEFT = "stale_applications_left"


class ClusterMaster(Protocol):
    """The cluster master's applications, as the service reaches them."""

    def applications(self) -> list[tuple[str, str]]:
        """The ``(id, name)`` of each application the master holds (running or waiting for cores)."""
        ...

    def kill(self, app_id: str) -> None:
        """Kill an application: its executors end and their cores come free.

        Raises:
            OSError: the master did not kill it (unreachable, or killing is disabled on it).
        """
        ...


def term_application_name(app_name: str, group: str, epoch: int) -> str:
    """The name of a term's own application on a cluster."""
    return f"{app_name} [{group} epoch {epoch}]"


def application_epoch(name: str, app_name: str, group: str) -> int | None:
    """The epoch in a name that :func:`term_application_name` gave for ``app_name`` and ``group``; None for the
    name of any other application."""
    match = re.fullmatch(rf"{re.escape(app_name)} \[{re.escape(group)} epoch (\d+)\]", name)
    return int(match.group(1)) if match else None


def reclaim_cores(master: ClusterMaster, *, app_name: str, group: str, epoch: int,
                  log: Any) -> list[str]:
    """Kill the applications of this group's earlier terms that the master still holds; returns their ids.

    Raises:
        OSError: the master did not answer, or did not kill one (the ones before it are killed).
    """
    killed = []
    for app_id, name in master.applications():
        term = application_epoch(name, app_name, group)
        if term is not None and term < epoch:
            master.kill(app_id)
            killed.append(app_id)
            log.warning(STALE_APPLICATION_KILLED, app_id=app_id, app_epoch=term, epoch=epoch,
                        why="an earlier term's application still held the cluster's cores (a paused leader?)")
    return killed
