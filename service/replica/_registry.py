"""The registry of consumer groups on a queue, in ZooKeeper: what a replica registers and archiving waits for.

``/tenure/_queues/<queue key>/<group>`` — persistent; JSON ``{group, data_root, registered_at}``. The queue
key is the queue's absolute path URL-quoted into one znode name (``/srv/q`` → ``%2Fsrv%2Fq``), so every
replica must see the queue at the same path. Group names start with a letter or digit, so ``_queues`` never
collides with a group's own ``/tenure/<group>``. A queue file may be archived only once every group registered
on its queue has consumed it. ``tenure groups`` (``service/ops/_groups.py``) reads and removes entries.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL

from tenure.election import ConfigError, GroupPaths, TenureError

__all__ = [
    "QUEUES",
    "GroupError",
    "RegisteredGroup",
    "absolute",
    "children",
    "list_groups",
    "queue_path",
    "register_group",
    "registered_groups",
]

QUEUES = "/tenure/_queues"

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


def absolute(path: str | os.PathLike[str]) -> Path:
    return Path(path).expanduser().resolve()


def queue_path(queue_dir: str | os.PathLike[str]) -> str:
    """The registry znode of a queue: ``/tenure/_queues/<absolute path, URL-quoted>``."""
    return f"{QUEUES}/{quote(str(absolute(queue_dir)), safe='')}"


def children(client: KazooClient, path: str) -> list[str]:
    try:
        return sorted(client.get_children(path))
    except NoNodeError:
        return []


def list_groups(client: KazooClient, queue_dir: str | os.PathLike[str]) -> list[RegisteredGroup]:
    """The groups registered on ``queue_dir``, by name (nodes that vanish while being read are left out)."""
    base = queue_path(queue_dir)
    found: list[RegisteredGroup] = []
    for name in children(client, base):
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
    root = str(absolute(data_root))
    for queue_key in children(client, QUEUES):
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
        _log.info("group_registered", group=group, queue_dir=str(absolute(queue_dir)), data_root=root)
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
