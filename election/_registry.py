"""The queue registry in ZooKeeper: the consumer groups registered on a queue folder, which a replica registers at
start-up, archiving waits for, and ``tenure groups`` lists and removes.

``/tenure/_queues/<queue key>/<group>`` (``QueuePaths``) — persistent; JSON ``{group, data_root, registered_at}``.
A queue file may be archived only once every group registered on its queue has consumed it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog
from kazoo.exceptions import NodeExistsError, NoNodeError

from tenure.election._acl import DigestCredential
from tenure.election._boundary import zookeeper_errors
from tenure.election._client import ZooKeeperClient
from tenure.election._layout import QUEUES, GroupPaths, QueuePaths
from tenure.election._transaction import lenient_object
from tenure.errors import ConfigError, ElectionError, ZooKeeperUnavailable

__all__ = [
    "RegisteredGroup",
    "group_queues",
    "list_groups",
    "register_group",
    "registered_groups",
    "unregister_group",
]

_log = structlog.get_logger("tenure.groups")


@dataclass(frozen=True)
class RegisteredGroup:
    """One group's registry entry on a queue."""

    group: str
    data_root: str
    registered_at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def decode(cls, group: str, raw: bytes | None) -> RegisteredGroup:
        data = lenient_object(raw)
        return cls(group=group, data_root=str(data.get("data_root", "")),
                   registered_at=float(data.get("registered_at") or 0.0))


def _children(client: ZooKeeperClient, path: str, timeout_s: float) -> list[str]:
    try:
        return sorted(client.get_children_async(path).get(timeout=timeout_s))
    except NoNodeError:
        return []


def _entry(client: ZooKeeperClient, path: str, group: str, timeout_s: float) -> RegisteredGroup | None:
    try:
        raw, _stat = client.get_async(path).get(timeout=timeout_s)
    except NoNodeError:
        return None
    return RegisteredGroup.decode(group, raw)


def list_groups(client: ZooKeeperClient, queue_dir: str | os.PathLike[str], *,
                timeout_s: float = 10.0) -> list[RegisteredGroup]:
    """The groups registered on ``queue_dir``, by name (nodes that vanish while being read are left out).

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    paths = QueuePaths.of(queue_dir)
    with zookeeper_errors(f"queue {paths.queue_dir}: listing its groups"):
        entries = (_entry(client, paths.group(name), name, timeout_s) for name in _children(client, paths.root,
                                                                                            timeout_s))
        return [entry for entry in entries if entry is not None]


def registered_groups(client: ZooKeeperClient, queue_dir: str | os.PathLike[str], *, timeout_s: float) -> list[str]:
    """Names of the groups registered on ``queue_dir``, for the career's archiving (one bounded read).

    Raises:
        ZooKeeperUnavailable: the client is not connected, or ZooKeeper did not answer within ``timeout_s``: the
            caller must then archive nothing.
    """
    paths = QueuePaths.of(queue_dir)
    if not client.connected:
        raise ZooKeeperUnavailable(f"queue {paths.queue_dir}: not connected to ZooKeeper: the groups on the queue "
                                   "are unknown")
    with zookeeper_errors(f"queue {paths.queue_dir}: listing its groups within {timeout_s:g} s"):
        return _children(client, paths.root, timeout_s)


def group_queues(client: ZooKeeperClient, group: str, *, timeout_s: float = 10.0) -> list[Path]:
    """The queue folders ``group`` is registered on (usually one)."""
    with zookeeper_errors(f"group {group}: finding its queues"):
        queues = [QueuePaths.from_key(key) for key in _children(client, QUEUES, timeout_s)]
        return [Path(q.queue_dir) for q in queues
                if client.exists_async(q.group(group)).get(timeout=timeout_s) is not None]


def register_group(client: ZooKeeperClient, queue_dir: str | os.PathLike[str], group: str,
                   data_root: str | os.PathLike[str], *, credential: DigestCredential | None = None,
                   timeout_s: float = 10.0) -> RegisteredGroup:
    """Register ``group`` as a consumer of ``queue_dir`` (idempotent); returns its entry. With ``credential``, the
    entry (and the queue's node, when this creates it) carry its ACL.

    Raises:
        ConfigError: another group already registered the same data root (on any queue): two groups on one
            data root would mix their checkpoints and output.
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    GroupPaths(group)  # the same name rules as the election's
    paths = QueuePaths.of(queue_dir)
    root = str(Path(data_root).expanduser().resolve())
    acl = credential.acls() if credential else None
    with zookeeper_errors(f"group {group}: registering on queue {paths.queue_dir}"):
        for key in _children(client, QUEUES, timeout_s):
            for other in list_groups(client, QueuePaths.from_key(key).queue_dir, timeout_s=timeout_s):
                if other.group != group and other.data_root == root:
                    raise ConfigError(f"data_root={root!r} is already the data root of group {other.group!r} "
                                      f"(queue {QueuePaths.from_key(key).queue_dir}): give each group its own "
                                      f"--data-root, or remove that group with `tenure groups remove {other.group}`")
        entry = RegisteredGroup(group=group, data_root=root, registered_at=time.time())
        client.ensure_path_async(paths.root, acl=acl).get(timeout=timeout_s)
        try:
            client.create_async(paths.group(group), entry.encode(), acl=acl).get(timeout=timeout_s)
            _log.info("group_registered", group=group, queue_dir=paths.queue_dir, data_root=root)
            return entry
        except NodeExistsError:
            pass
        existing = _entry(client, paths.group(group), group, timeout_s)
        if existing is None:
            raise ElectionError(f"group {group}: its entry on queue {paths.queue_dir} was removed while it registered "
                                "(`tenure groups remove`?): start the replica again")
        if existing.data_root != root:
            _log.warning("group_data_root_changed", group=group, was=existing.data_root, now=root)
            existing = RegisteredGroup(group=group, data_root=root, registered_at=existing.registered_at)
            client.set_async(paths.group(group), existing.encode()).get(timeout=timeout_s)
        return existing


def unregister_group(client: ZooKeeperClient, queue_dir: str | os.PathLike[str], group: str, *,
                     timeout_s: float = 10.0) -> RegisteredGroup | None:
    """Delete ``group``'s entry on ``queue_dir``; returns the entry, or None when it was not registered there.

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    paths = QueuePaths.of(queue_dir)
    with zookeeper_errors(f"group {group}: removing it from queue {paths.queue_dir}"):
        entry = _entry(client, paths.group(group), group, timeout_s)
        if entry is None:
            return None
        try:
            client.delete_async(paths.group(group)).get(timeout=timeout_s)
        except NoNodeError:
            return None
        return entry
