"""A cluster's cores for the new leader: the applications of earlier terms that a paused leader still holds.

On a cluster, a leader's application holds the cores of its term. A leader that crashes loses its application with
its driver's connection; a leader paused as a whole process tree (SIGSTOP, a frozen VM) keeps the connection open,
so the master keeps its application and its executors' cores until it resumes, and the successor would wait for
cores that never come. So each term records its application under the data root, ``_applications/epoch-<N>.json``,
before it asks for its share of cores, and a new leader kills, through the master, every application recorded by
an earlier term that the master still holds, before it grows its own. The epoch is the fencing token: a newer
term's application is never touched, and an older term is already fenced in ZooKeeper, so killing its application
loses nothing it could still commit. A follower's standby application is in no record until it leads, so it is
never killed either.

In a topic of several queues each queue's terms record under the queue's own folder, and the epoch fences only
within a queue, so a new leader of queue k kills only what earlier terms *of queue k* recorded. One replica's
application serves every queue it leads: a term that ends while its application lives on for the replica's other
queues deletes its own record (:func:`forget_application`), so that the queue's next leader does not kill a live
application, and a reclaim never kills the application it runs on itself. A replica that pauses as a whole loses
every queue it leads at once, and its records stay for the successors.

The career knows no HTTP: the service hands it a :class:`ClusterMaster`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "STALE_APPLICATIONS_LEFT",
    "STALE_APPLICATION_KILLED",
    "ClusterMaster",
    "forget_application",
    "reclaim_cores",
    "record_application",
    "standby_application_name",
    "term_application_name",
]

STALE_APPLICATION_KILLED = "stale_application_killed"
STALE_APPLICATIONS_LEFT = "stale_applications_left"

_RECORD = re.compile(r"epoch-(\d+)\.json")


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
    """The name of an application started for one term (what the master's page shows)."""
    return f"{app_name} [{group} epoch {epoch}]"


def standby_application_name(app_name: str, group: str, replica_id: str) -> str:
    """The name of a follower's standby application, which becomes its application when it leads."""
    return f"{app_name} [{group} standby {replica_id}]"


def record_application(records: Path, epoch: int, app_id: str, replica_id: str) -> None:
    """Record that ``app_id`` is term ``epoch``'s application (a file written whole: a new name, then a rename)."""
    records.mkdir(parents=True, exist_ok=True)
    staged = records / f".epoch-{epoch}.json.{os.getpid()}"
    staged.write_text(json.dumps({"epoch": epoch, "app_id": app_id, "replica": replica_id}))
    staged.replace(records / f"epoch-{epoch}.json")


def forget_application(records: Path, epoch: int) -> None:
    """Delete term ``epoch``'s record: the term has ended and its application lives on for other terms."""
    (records / f"epoch-{epoch}.json").unlink(missing_ok=True)


def _earlier_terms(records: Path, epoch: int) -> list[tuple[int, Path, str]]:
    """The ``(epoch, file, application id)`` of each term recorded before ``epoch``, oldest first."""
    found = []
    for path in records.glob("epoch-*.json") if records.is_dir() else ():
        match = _RECORD.fullmatch(path.name)
        if match is None or int(match.group(1)) >= epoch:
            continue
        try:
            app_id = str(json.loads(path.read_text())["app_id"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # written by no term of ours (a torn file cannot be: records are renamed into place)
        found.append((int(match.group(1)), path, app_id))
    return sorted(found)


def reclaim_cores(master: ClusterMaster, records: Path, *, epoch: int, log: Any, own: str | None = None) -> list[str]:
    """Kill the applications that earlier terms recorded and the master still holds, except ``own`` (the one the
    caller runs on); returns their ids.

    A record whose application the master no longer holds (its term ended, or it was killed), or that names
    ``own``, is deleted.

    Raises:
        OSError: the master did not answer, or did not kill one (the ones before it are killed).
    """
    earlier = _earlier_terms(records, epoch)
    if not earlier:
        return []
    held = {app_id for app_id, _name in master.applications()}
    killed = []
    for term, path, app_id in earlier:
        if app_id in held and app_id != own:
            master.kill(app_id)
            killed.append(app_id)
            log.warning(STALE_APPLICATION_KILLED, app_id=app_id, app_epoch=term, epoch=epoch,
                        why="an earlier term's application still held the cluster's cores (a paused leader?)")
        path.unlink(missing_ok=True)
    return killed
