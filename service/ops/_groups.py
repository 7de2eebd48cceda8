"""Consumer groups sharing one queue, for operators: list them with their lag, and remove one.

Several groups (``--group``) may consume one queue (``--queue-dir``), each with its own election, commit
record, checkpoint and output (its own ``--data-root``). Replicas register their group at start-up
(``service/replica/_registry.py``, which also says how the registry is laid out); ``tenure groups remove``
deletes a group's entry and its consumption marks, so the other groups' leaders archive what it held back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from tenure.career.queue import QueueLayout, is_queue_file
from tenure.election import ElectionError, GroupPaths
from tenure.service.replica._registry import (
    QUEUES,
    GroupError,
    RegisteredGroup,
    absolute,
    children,
    list_groups,
    queue_path,
)

__all__ = [
    "connected",
    "format_groups",
    "group_queues",
    "queue_lag",
    "queue_report",
    "remove_group",
]

_log = structlog.get_logger("tenure.groups")


@contextlib.contextmanager
def connected(zk_hosts: str, *, timeout_s: float = 10.0, auth_data: list[tuple[str, str]] | None = None,
              read_only: bool = False) -> Iterator[KazooClient]:
    """A started kazoo client for a one-off command, stopped at exit.

    Raises:
        ElectionError: ZooKeeper cannot be reached within ``timeout_s`` (the message names the hosts).
    """
    client = KazooClient(hosts=zk_hosts, timeout=timeout_s, auth_data=auth_data, read_only=read_only,
                         connection_retry={"max_tries": 3})
    try:
        try:
            client.start(timeout=timeout_s)
        except KazooTimeoutError as exc:
            raise ElectionError(f"cannot reach ZooKeeper at {zk_hosts} within {timeout_s:g} s: check --zk "
                                "(a comma-separated host:port list) and that a quorum is up") from exc
        yield client
    finally:
        client.stop()
        client.close()


def group_queues(client: KazooClient, group: str) -> list[Path]:
    """The queue folders ``group`` is registered on (usually one)."""
    return [Path(unquote(key)) for key in children(client, QUEUES)
            if client.exists(f"{QUEUES}/{key}/{group}") is not None]


def queue_lag(queue_dir: str | os.PathLike[str], group: str) -> int | None:
    """Queue files in ``landing/`` that ``group`` has not consumed yet; None when the queue is not readable here."""
    queue = QueueLayout(Path(queue_dir))
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


def remove_group(client: KazooClient, queue_dir: str | os.PathLike[str], group: str, *,
                 force: bool = False) -> tuple[RegisteredGroup, int]:
    """Unregister ``group`` from ``queue_dir`` and delete its consumption marks; returns (entry, marks deleted).

    The other groups' leaders then archive what it held back (within a housekeeping round, about a second).

    Raises:
        GroupError: the group is not registered on the queue, or it still has live election contenders
            (its replicas run) and ``force`` is not set.
    """
    node = f"{queue_path(queue_dir)}/{group}"
    try:
        raw, _stat = client.get(node)
    except NoNodeError:
        known = ", ".join(g.group for g in list_groups(client, queue_dir)) or "none"
        raise GroupError(f"group {group!r} is not registered on queue {absolute(queue_dir)} (registered: "
                         f"{known}): check the group name and --queue-dir") from None
    contenders = children(client, GroupPaths(group).election)
    if contenders and not force:
        raise GroupError(f"group {group!r} still has {len(contenders)} live election contender(s): stop its "
                         "replicas first (a running leader would keep consuming), or pass --force")
    client.delete(node)
    marks = QueueLayout(Path(queue_dir)).marks(group)
    deleted = len(os.listdir(marks)) if marks.is_dir() else 0
    shutil.rmtree(marks, ignore_errors=True)
    entry = RegisteredGroup.from_bytes(group, raw)
    _log.info("group_removed", group=group, queue_dir=str(absolute(queue_dir)), marks=deleted, forced=force,
              contenders=len(contenders))
    return entry, deleted


def queue_report(client: KazooClient, queue_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """One queue's groups with their lag, as JSON: ``{"queue_dir", "groups": [{"group", "data_root",
    "registered_at", "lag"}]}`` (``lag`` is None when the queue is not readable on this machine)."""
    groups = [{**g.to_json(), "lag": queue_lag(queue_dir, g.group)} for g in list_groups(client, queue_dir)]
    return {"queue_dir": str(absolute(queue_dir)), "groups": groups}


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
