"""The queue registry in ZooKeeper: the consumer groups registered on a queue, which a replica registers at
start-up, archiving waits for, and ``tenure groups`` lists and removes.

``/tenure/_queues/<topic id>/<group>`` (``QueuePaths``) — persistent; JSON ``{group, data_root, data_root_id,
queue_dir, registered_at}``. A queue file may be archived only once every group registered on its queue has
consumed it. A queue is known by its topic id (its ``_topic.json``, ``tenure.career.identity``), so one folder
reached by two paths is one queue. Entries of an earlier release are keyed by the queue's path (``QueuePaths.of_path``):
they are read beside the topic's (:class:`QueueKey`), and a replica moves its group's entry to the topic's key when
its group is the only one on that path key; otherwise it copies it, leaving the path-keyed entry for the other
groups' replicas of the earlier release, whose archiving reads only that key.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from tenure.election._acl import DigestCredential
from tenure.election._boundary import zookeeper_errors
from tenure.election._client import ZooKeeperClient
from tenure.election._layout import QUEUES, GroupPaths, QueuePaths
from tenure.election._transaction import lenient_object
from tenure.errors import ConfigError, ElectionError, ZooKeeperUnavailable

__all__ = [
    "QueueKey",
    "RegisteredGroup",
    "group_queues",
    "list_groups",
    "register_group",
    "registered_groups",
    "unregister_group",
]

_log = structlog.get_logger("tenure.groups")


@dataclass(frozen=True)
class QueueKey:
    """A queue as the registry knows it: its topic id (None while the folder has no ``_topic.json``: only the
    earlier release's key is read then) and the path this process reaches it at (the earlier release's key).

    Example::

        QueueKey("9e2d4c1e-…", "/srv/q").paths()   # the topic's key, then the path's
    """

    topic_id: str | None
    queue_dir: str

    def __post_init__(self) -> None:
        if not self.remote:
            object.__setattr__(self, "queue_dir", str(Path(self.queue_dir).expanduser().resolve()))

    @property
    def remote(self) -> bool:
        """Whether the queue is a topic on a server (a Redis topic's URL, its password hidden) rather than a folder:
        such a queue is known by its topic id only (it has no earlier release's key)."""
        return "://" in self.queue_dir

    @property
    def topic(self) -> QueuePaths | None:
        return None if self.topic_id is None else QueuePaths(self.topic_id)

    @property
    def legacy(self) -> QueuePaths | None:
        return None if self.remote else QueuePaths.of_path(self.queue_dir)

    def paths(self) -> list[QueuePaths]:
        """The keys to read, the topic's first."""
        return [paths for paths in (self.topic, self.legacy) if paths is not None]


@dataclass(frozen=True)
class RegisteredGroup:
    """One group's registry entry on a queue (``data_root_id`` and ``queue_dir`` empty in an earlier release's)."""

    group: str
    data_root: str
    registered_at: float
    data_root_id: str = ""
    queue_dir: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def decode(cls, group: str, raw: bytes | None) -> RegisteredGroup:
        data = lenient_object(raw)
        return cls(group=group, data_root=str(data.get("data_root", "")),
                   registered_at=float(data.get("registered_at") or 0.0),
                   data_root_id=str(data.get("data_root_id") or ""), queue_dir=str(data.get("queue_dir") or ""))

    def same_data_root(self, data_root_id: str, data_root: str) -> bool:
        """Whether this entry's data root is the one of ``data_root_id`` (its path, for an earlier release's)."""
        return self.data_root_id == data_root_id if self.data_root_id else self.data_root == data_root


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


def _delete(client: ZooKeeperClient, path: str, timeout_s: float) -> bool:
    """Delete ``path``; False when it was gone already."""
    try:
        client.delete_async(path).get(timeout=timeout_s)
    except NoNodeError:
        return False
    return True


def list_groups(client: ZooKeeperClient, queue: QueueKey, *, timeout_s: float = 10.0) -> list[RegisteredGroup]:
    """The groups registered on ``queue``, by name, under its topic's key or its path's (an entry under both is
    the topic's; nodes that vanish while being read are left out).

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    found: dict[str, RegisteredGroup] = {}
    with zookeeper_errors(f"queue {queue.queue_dir}: listing its groups"):
        for paths in queue.paths():
            for name in _children(client, paths.root, timeout_s):
                if name not in found and (entry := _entry(client, paths.group(name), name, timeout_s)) is not None:
                    found[name] = entry
    return [found[name] for name in sorted(found)]


def registered_groups(client: ZooKeeperClient, queue: QueueKey, *, timeout_s: float) -> list[str]:
    """Names of the groups registered on ``queue`` (under its topic's key or its path's), for the career's
    archiving (one bounded read per key).

    Raises:
        ZooKeeperUnavailable: the client is not connected, or ZooKeeper did not answer within ``timeout_s``: the
            caller must then archive nothing.
    """
    if not client.connected:
        raise ZooKeeperUnavailable(f"queue {queue.queue_dir}: not connected to ZooKeeper: the groups on the queue "
                                   "are unknown")
    with zookeeper_errors(f"queue {queue.queue_dir}: listing its groups within {timeout_s:g} s"):
        return sorted({name for paths in queue.paths() for name in _children(client, paths.root, timeout_s)})


def group_queues(client: ZooKeeperClient, group: str, *, timeout_s: float = 10.0) -> list[QueueKey]:
    """The queues ``group`` is registered on (usually one), as its entries name them."""
    found: list[QueueKey] = []
    with zookeeper_errors(f"group {group}: finding its queues"):
        for key in _children(client, QUEUES, timeout_s):
            paths = QueuePaths(key)
            entry = _entry(client, paths.group(group), group, timeout_s)
            if entry is None:
                continue
            legacy = paths.legacy_dir
            queue = QueueKey(None, legacy) if legacy is not None else QueueKey(key, entry.queue_dir or "/")
            if all(q.queue_dir != queue.queue_dir for q in found):  # an entry under both keys of one queue
                found.append(queue)
    return found


def register_group(client: ZooKeeperClient, queue: QueueKey, group: str, data_root: str | os.PathLike[str],
                   data_root_id: str, *, credential: DigestCredential | None = None,
                   timeout_s: float = 10.0) -> RegisteredGroup:
    """Register ``group`` as a consumer of ``queue`` under its topic's key (idempotent); returns its entry. An
    entry of the group under the queue's path key (an earlier release's) is moved, or copied while other groups
    are registered under that key (see the module's docstring). With ``credential``, the entry (and the queue's
    node, when this creates it) carry its ACL.

    Raises:
        ConfigError: another group already registered the same data root (on any queue): two groups on one
            data root would mix their checkpoints and output.
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    GroupPaths(group)  # the same name rules as the election's
    paths = queue.topic
    if paths is None:
        raise ElectionError(f"group {group}: queue {queue.queue_dir} has no topic id to register under: this is a bug")
    root = str(Path(data_root).expanduser().resolve())
    acl = credential.acls() if credential else None
    with zookeeper_errors(f"group {group}: registering on queue {queue.queue_dir}"):
        for key in _children(client, QUEUES, timeout_s):
            for name in _children(client, QueuePaths(key).root, timeout_s):
                other = _entry(client, QueuePaths(key).group(name), name, timeout_s)
                if other is not None and other.group != group and other.same_data_root(data_root_id, root):
                    where = other.queue_dir or QueuePaths(key).legacy_dir or key
                    raise ConfigError(f"data_root={root!r} (data root {data_root_id}) is already the data root of "
                                      f"group {other.group!r} (queue {where}): give each group its own --data-root, "
                                      f"or remove that group with `tenure groups remove {other.group}`")
        entry = RegisteredGroup(group=group, data_root=root, registered_at=time.time(), data_root_id=data_root_id,
                                queue_dir=queue.queue_dir)
        legacy = None if queue.legacy is None else _entry(client, queue.legacy.group(group), group, timeout_s)
        if legacy is not None:
            entry = RegisteredGroup(**{**entry.to_json(), "registered_at": legacy.registered_at or entry.registered_at})
        client.ensure_path_async(paths.root, acl=acl).get(timeout=timeout_s)
        try:
            client.create_async(paths.group(group), entry.encode(), acl=acl).get(timeout=timeout_s)
            _log.info("group_registered", group=group, topic_id=queue.topic_id, queue_dir=queue.queue_dir,
                      data_root=root)
        except NodeExistsError:
            existing = _entry(client, paths.group(group), group, timeout_s)
            if existing is None:
                raise ElectionError(f"group {group}: its entry on queue {queue.queue_dir} was removed while it "
                                    "registered (`tenure groups remove`?): start the replica again") from None
            if (existing.data_root, existing.data_root_id, existing.queue_dir) != (root, data_root_id,
                                                                                   queue.queue_dir):
                entry = RegisteredGroup(**{**entry.to_json(), "registered_at": existing.registered_at})
                client.set_async(paths.group(group), entry.encode()).get(timeout=timeout_s)
            else:
                entry = existing
        if legacy is not None:
            _move_legacy(client, queue, group, timeout_s)
        return entry


def _move_legacy(client: ZooKeeperClient, queue: QueueKey, group: str, timeout_s: float) -> None:
    """The group's entry under the queue's path key, now that it is under the topic's: deleted (with the key's
    node) when the group is alone there; kept otherwise, for the other groups' replicas of the earlier release,
    whose archiving reads only that key and must go on waiting for this group."""
    legacy = queue.legacy
    if legacy is None:
        return
    others = [name for name in _children(client, legacy.root, timeout_s) if name != group]
    if others:
        _log.info("registry_entry_copied", group=group, topic_id=queue.topic_id, queue_dir=queue.queue_dir,
                  kept_under=legacy.root, other_groups=others)
        return
    _delete(client, legacy.group(group), timeout_s)
    with contextlib.suppress(NotEmptyError, NoNodeError):  # another group registered under it meanwhile, or gone
        client.delete_async(legacy.root).get(timeout=timeout_s)
    _log.info("registry_entry_moved", group=group, topic_id=queue.topic_id, queue_dir=queue.queue_dir,
              moved_from=legacy.root)


def unregister_group(client: ZooKeeperClient, queue: QueueKey, group: str, *,
                     timeout_s: float = 10.0) -> RegisteredGroup | None:
    """Delete ``group``'s entries on ``queue`` (under its topic's key and its path's); returns the entry (the
    topic's first), or None when it was not registered there.

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    removed: RegisteredGroup | None = None
    with zookeeper_errors(f"group {group}: removing it from queue {queue.queue_dir}"):
        for paths in queue.paths():
            entry = _entry(client, paths.group(group), group, timeout_s)
            if entry is not None and _delete(client, paths.group(group), timeout_s) and removed is None:
                removed = entry
    return removed
