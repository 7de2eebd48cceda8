"""Consumer groups sharing one queue, for operators: list them with their lag, and remove one.

Several groups (``--group``) may consume one queue (``--queue-dir``), each with its own election, commit
record, checkpoint and output (its own ``--data-root``). Replicas register their group at start-up in the queue
registry (``tenure.election``'s, which also says how it is laid out); ``tenure groups remove`` deletes a group's
entry and its consumption marks, so the other groups' leaders archive what it held back.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import structlog

from tenure.career.identity import read_data_root_id, read_topic
from tenure.career.queue import QueueLayout, is_queue_file
from tenure.election import (
    GroupIdentity,
    QueueKey,
    RegisteredGroup,
    ZooKeeperClient,
    list_groups,
    read_contenders,
    read_group_identity,
    unregister_group,
)
from tenure.errors import TenureError

__all__ = [
    "GroupError",
    "check_group_data",
    "format_groups",
    "queue_backlogs",
    "queue_key",
    "queue_lag",
    "queue_report",
    "remove_group",
]

_log = structlog.get_logger("tenure.groups")


class GroupError(TenureError):
    """A group operation that cannot be done; the message says why and what to do."""


def queue_lag(queue_dir: str | os.PathLike[str], group: str) -> int | None:
    """Queue files in the ``landing/`` of each queue of the topic that ``group`` has not consumed yet; None when a
    queue is not readable here."""
    lags = [_backlog(queue, group) for queue in _queues(queue_dir)]
    return None if None in lags else sum(lag for lag in lags if lag is not None)


def queue_backlogs(queue_dir: str | os.PathLike[str], group: str) -> dict[int, int | None]:
    """Each queue's files in its ``landing/`` that ``group`` has not consumed yet, by queue (None for a queue not
    readable here): a topic's backlog queue by queue, as ``tenure status`` shows it."""
    return {queue.queue: _backlog(queue, group) for queue in _queues(queue_dir)}


def _backlog(queue: QueueLayout, group: str) -> int | None:
    try:
        waiting = {e.name for e in os.scandir(queue.landing) if is_queue_file(e.name)}
    except OSError:
        return None
    try:
        consumed = set(os.listdir(queue.marks(group)))
    except FileNotFoundError:
        consumed = set()
    except OSError:
        return None
    return len(waiting - consumed)


def _queues(queue_dir: str | os.PathLike[str]) -> list[QueueLayout]:
    """Every queue of the topic in ``queue_dir`` (one without a ``_topic.json``)."""
    topic = read_topic(Path(queue_dir))
    return QueueLayout.each(Path(queue_dir), 1 if topic is None else topic.queues)


def queue_key(queue_dir: str | os.PathLike[str]) -> QueueKey:
    """The queue at ``queue_dir`` as the registry knows it: by its topic id (``_topic.json``), and by its path for
    the entries of an earlier release.

    Raises:
        ConfigError: ``_topic.json`` is unreadable.
    """
    topic = read_topic(Path(queue_dir))
    return QueueKey(None if topic is None else topic.topic_id, str(queue_dir))


def check_group_data(client: ZooKeeperClient, group: str, data_root: str | os.PathLike[str],
                     queue_dir: str | os.PathLike[str] | None = None) -> None:
    """Refuse to audit ``data_root`` (and its queue) against ``group`` when the group is bound to other data (its
    ``/tenure/<group>/identity``); a group no replica of this release has started yet is bound to nothing.

    Raises:
        GroupError: one line naming the group's data and this data root's (ids and paths).
        ConfigError: an identity file is unreadable.
    """
    bound = read_group_identity(client, group)
    if bound is None:
        return
    root = Path(data_root)
    topic = read_topic(Path(queue_dir) if queue_dir is not None else root)
    here = GroupIdentity(data_root_id=read_data_root_id(root) or "(none: no _data_root.json)",
                         data_root=str(root.resolve()), topic_id=None if topic is None else topic.topic_id,
                         queue_dir=str(Path(queue_dir or root).resolve()))
    problem = bound.mismatch(group, here, "this audit")
    if problem is not None:
        raise GroupError(problem)


def remove_group(client: ZooKeeperClient, queue_dir: str | os.PathLike[str], group: str, *,
                 force: bool = False) -> tuple[RegisteredGroup, int]:
    """Unregister ``group`` from ``queue_dir`` and delete its consumption marks in every queue of the topic; returns
    (entry, marks deleted).

    The other groups' leaders then archive what it held back (within a housekeeping round, about a second).

    Raises:
        GroupError: the group is not registered on the queue, or it still has live election contenders
            (its replicas run) and ``force`` is not set.
    """
    key = queue_key(queue_dir)
    queue = key.queue_dir
    known = list_groups(client, key)
    entry = next((g for g in known if g.group == group), None)
    if entry is None:
        raise GroupError(f"group {group!r} is not registered on queue {queue} (registered: "
                         f"{', '.join(g.group for g in known) or 'none'}): check the group name and --queue-dir")
    contenders = read_contenders(client, group)
    if contenders and not force:
        raise GroupError(f"group {group!r} still has {len(contenders)} live election contender(s): stop its "
                         "replicas first (a running leader would keep consuming), or pass --force")
    unregister_group(client, key, group)
    deleted = 0
    for each in _queues(queue_dir):
        marks = each.marks(group)
        deleted += len(os.listdir(marks)) if marks.is_dir() else 0
        shutil.rmtree(marks, ignore_errors=True)
    _log.info("group_removed", group=group, queue_dir=queue, marks=deleted, forced=force,
              contenders=len(contenders))
    return entry, deleted


def queue_report(client: ZooKeeperClient, queue: QueueKey) -> dict[str, Any]:
    """One queue's groups with their lag, as JSON: ``{"queue_dir", "topic_id", "groups": [{"group", "data_root",
    "data_root_id", "queue_dir", "registered_at", "lag"}]}`` (``lag`` is None when the queue is not readable on
    this machine)."""
    groups = [{**g.to_json(), "lag": queue_lag(queue.queue_dir, g.group)} for g in list_groups(client, queue)]
    return {"queue_dir": queue.queue_dir, "topic_id": queue.topic_id, "groups": groups}


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at > 0 else "-"


def format_groups(report: dict[str, Any]) -> str:
    """The text view of a :func:`queue_report`: a headline, then group, data root, registration time, lag."""
    groups = report["groups"]
    lines = [f"queue {report['queue_dir']}: {len(groups)} group{'s' if len(groups) != 1 else ''}"]
    rows = [("group", "data root", "registered", "lag (files)")]
    rows += [(g["group"], g["data_root"], _when(g["registered_at"]), "unknown" if g["lag"] is None else str(g["lag"]))
             for g in groups]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines) + "\n"
