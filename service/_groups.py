"""Consumer groups sharing one queue: their registry in ZooKeeper, their lag, and removing one.

Several groups (``--group``) may consume one queue (``--queue-dir``), each with its own election, commit
record, checkpoint and output (its own ``--data-root``). A queue file may be archived only once every group
registered on the queue has consumed it, so the registry is what archiving waits for:

``/tenure/_queues/<queue key>/<group>`` — persistent; JSON ``{group, data_root, registered_at}``. The queue
key is the queue's absolute path URL-quoted into one znode name (``/srv/q`` → ``%2Fsrv%2Fq``), so every
replica must see the queue at the same path. Group names start with a letter or digit, so ``_queues`` never
collides with a group's own ``/tenure/<group>``.

A Spark replica registers its group at start-up (idempotent); ``tenure groups remove`` deletes a group's
node and its consumption marks, so the other groups' leaders archive what it held back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL

from election import ElectionError, GroupPaths, TenureError
from service._config import ConfigError

__all__ = [
    "GroupError",
    "RegisteredGroup",
    "connected",
    "format_groups",
    "group_queues",
    "list_groups",
    "queue_lag",
    "queue_path",
    "queue_report",
    "register_group",
    "registered_groups",
    "remove_group",
]

QUEUES = "/tenure/_queues"
#: ``<queue>/consumed/<group>/<file name>``: the marks ``career/spark/_marks.py`` writes (kept apart on purpose,
#: so that ``tenure status`` and ``tenure groups`` never import Spark).
_MARKS = "consumed"

_log = structlog.get_logger("tenure.groups")


class GroupError(TenureError):
    """A group operation that cannot be done; the message says why and what to do."""


@dataclass(frozen=True)
class RegisteredGroup:
    """One group's registry entry on a queue."""

    group: str
    data_root: str
    registered_at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_bytes(cls, group: str, raw: bytes) -> RegisteredGroup:
        try:
            data = json.loads(raw.decode()) if raw else {}
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        return cls(group=group, data_root=str(data.get("data_root", "")),
                   registered_at=float(data.get("registered_at") or 0.0))


def _absolute(path: str | os.PathLike[str]) -> Path:
    return Path(path).expanduser().resolve()


def queue_path(queue_dir: str | os.PathLike[str]) -> str:
    """The registry znode of a queue: ``/tenure/_queues/<absolute path, URL-quoted>``."""
    return f"{QUEUES}/{quote(str(_absolute(queue_dir)), safe='')}"


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


def _children(client: KazooClient, path: str) -> list[str]:
    try:
        return sorted(client.get_children(path))
    except NoNodeError:
        return []


def list_groups(client: KazooClient, queue_dir: str | os.PathLike[str]) -> list[RegisteredGroup]:
    """The groups registered on ``queue_dir``, by name (nodes that vanish while being read are left out)."""
    base = queue_path(queue_dir)
    found: list[RegisteredGroup] = []
    for name in _children(client, base):
        try:
            raw, _stat = client.get(f"{base}/{name}")
        except NoNodeError:
            continue
        found.append(RegisteredGroup.from_bytes(name, raw))
    return found


def registered_groups(client: KazooClient, queue_dir: str | os.PathLike[str], *, timeout_s: float) -> list[str]:
    """Names of the groups registered on ``queue_dir``, for the career's archiving (one bounded read).

    Raises:
        GroupError: the client is not connected, or ZooKeeper did not answer within ``timeout_s``: the caller
            must then archive nothing.
    """
    if not client.connected:
        raise GroupError("not connected to ZooKeeper: the groups on the queue are unknown")
    try:
        return sorted(client.get_children_async(queue_path(queue_dir)).get(timeout=timeout_s))
    except NoNodeError:
        return []
    except KazooTimeoutError as exc:
        raise GroupError(f"ZooKeeper did not list the queue's groups within {timeout_s:g} s") from exc


def register_group(client: KazooClient, queue_dir: str | os.PathLike[str], group: str,
                   data_root: str | os.PathLike[str], *, acl: list[ACL] | None = None) -> RegisteredGroup:
    """Register ``group`` as a consumer of ``queue_dir`` (idempotent); returns its entry.

    Raises:
        ConfigError: another group already registered the same data root (on any queue): two groups on one
            data root would mix their checkpoints and output.
    """
    GroupPaths(group)  # the same name rules as the election's
    root = str(_absolute(data_root))
    for queue_key in _children(client, QUEUES):
        for other in list_groups(client, unquote(queue_key)):
            if other.group != group and other.data_root == root:
                raise ConfigError(f"data_root={root!r} is already the data root of group {other.group!r} (queue "
                                  f"{unquote(queue_key)}): give each group its own --data-root, or remove that "
                                  f"group with `tenure groups remove {other.group}`")
    base = queue_path(queue_dir)
    entry = RegisteredGroup(group=group, data_root=root, registered_at=time.time())
    client.ensure_path(base, acl=acl)
    try:
        client.create(f"{base}/{group}", json.dumps(entry.to_json(), sort_keys=True).encode(), acl=acl)
        _log.info("group_registered", group=group, queue_dir=str(_absolute(queue_dir)), data_root=root)
        return entry
    except NodeExistsError:
        pass
    raw, _stat = client.get(f"{base}/{group}")
    existing = RegisteredGroup.from_bytes(group, raw)
    if existing.data_root != root:
        _log.warning("group_data_root_changed", group=group, was=existing.data_root, now=root)
        existing = RegisteredGroup(group=group, data_root=root, registered_at=existing.registered_at)
        client.set(f"{base}/{group}", json.dumps(existing.to_json(), sort_keys=True).encode())
    return existing


def group_queues(client: KazooClient, group: str) -> list[Path]:
    """The queue folders ``group`` is registered on (usually one)."""
    return [Path(unquote(key)) for key in _children(client, QUEUES)
            if client.exists(f"{QUEUES}/{key}/{group}") is not None]


def queue_lag(queue_dir: str | os.PathLike[str], group: str) -> int | None:
    """Queue files in ``landing/`` that ``group`` has not consumed yet; None when the queue is not readable here."""
    queue = Path(queue_dir)
    try:
        waiting = {e.name for e in os.scandir(queue / "landing")
                   if e.name.endswith(".jsonl") and not e.name.startswith((".", "_"))}
    except OSError:
        return None
    try:
        consumed = set(os.listdir(queue / _MARKS / group))
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
        raise GroupError(f"group {group!r} is not registered on queue {_absolute(queue_dir)} (registered: "
                         f"{known}): check the group name and --queue-dir") from None
    contenders = _children(client, GroupPaths(group).election)
    if contenders and not force:
        raise GroupError(f"group {group!r} still has {len(contenders)} live election contender(s): stop its "
                         "replicas first (a running leader would keep consuming), or pass --force")
    client.delete(node)
    marks = Path(queue_dir) / _MARKS / group
    deleted = len(os.listdir(marks)) if marks.is_dir() else 0
    shutil.rmtree(marks, ignore_errors=True)
    entry = RegisteredGroup.from_bytes(group, raw)
    _log.info("group_removed", group=group, queue_dir=str(_absolute(queue_dir)), marks=deleted, forced=force,
              contenders=len(contenders))
    return entry, deleted


def queue_report(client: KazooClient, queue_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """One queue's groups with their lag, as JSON: ``{"queue_dir", "groups": [{"group", "data_root",
    "registered_at", "lag"}]}`` (``lag`` is None when the queue is not readable on this machine)."""
    groups = [{**g.to_json(), "lag": queue_lag(queue_dir, g.group)} for g in list_groups(client, queue_dir)]
    return {"queue_dir": str(_absolute(queue_dir)), "groups": groups}


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
