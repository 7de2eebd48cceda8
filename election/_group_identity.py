"""What a group is bound to, ``/tenure/<group>/identity``: the ids of its data root and of its queue, recorded by its
first replica, so that a replica on other data is refused rather than sharing the group's election and commit
record with it.

The ids are those of the folders' identity files (``tenure.career.identity``: ``_data_root.json``,
``_topic.json``), not paths: a folder reached by another path is the same data, and another folder at a path the
group once used is not. A group that predates the record (an upgrade) is bound by its first replica to start.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace

import structlog
from kazoo.exceptions import NodeExistsError, NoNodeError

from tenure.election._acl import DigestCredential
from tenure.election._boundary import zookeeper_errors
from tenure.election._client import ZooKeeperClient
from tenure.election._layout import GroupPaths
from tenure.election._transaction import lenient_object
from tenure.errors import ConfigError

__all__ = ["GroupIdentity", "bind_group", "read_group_identity"]

_log = structlog.get_logger("tenure.groups")


@dataclass(frozen=True)
class GroupIdentity:
    """The data a group works on: its data root's id and its queue's topic id (None for a career without a queue,
    such as the counter), with the paths its first replica saw them at (for messages only).

    Example::

        GroupIdentity(data_root_id="6f1c…", data_root="/srv/a", topic_id="9e2d…", queue_dir="/srv/a")
    """

    data_root_id: str
    data_root: str
    topic_id: str | None = None
    queue_dir: str | None = None
    bound_at: float = 0.0

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> GroupIdentity:
        data = lenient_object(raw)
        topic = data.get("topic_id")
        queue = data.get("queue_dir")
        return cls(data_root_id=str(data.get("data_root_id", "")), data_root=str(data.get("data_root", "")),
                   topic_id=None if topic is None else str(topic), queue_dir=None if queue is None else str(queue),
                   bound_at=float(data.get("bound_at") or 0.0))

    def mismatch(self, group: str, other: GroupIdentity, who: str) -> str | None:
        """Why ``other`` (what ``who`` works on) is not this group's data, in one line naming both; None when it
        is (a topic unknown on either side is no mismatch)."""
        problems: list[tuple[str, str, str | None, str, str | None]] = []
        if other.data_root_id != self.data_root_id:
            problems.append(("data root", self.data_root_id, self.data_root, other.data_root_id, other.data_root))
        if self.topic_id is not None and other.topic_id is not None and other.topic_id != self.topic_id:
            problems.append(("queue", self.topic_id, self.queue_dir, other.topic_id, other.queue_dir))
        if not problems:
            return None
        bound = " and ".join(f"{what} {mine} ({mine_at})" for what, mine, mine_at, _theirs, _at in problems)
        theirs = " and ".join(f"{what} {other_id} ({at})" for what, _mine, _mine_at, other_id, at in problems)
        return (f"group {group!r} is bound to {bound}, but {who} works on {theirs}: point it at the group's own data, "
                "or give this deployment a group of its own (--group)")


def read_group_identity(client: ZooKeeperClient, group: str, *, timeout_s: float = 10.0) -> GroupIdentity | None:
    """The data ``group`` is bound to; None for a group no replica of this release has started yet.

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    path = GroupPaths(group).identity
    with zookeeper_errors(f"group {group}: reading what it is bound to"):
        try:
            raw, _stat = client.get_async(path).get(timeout=timeout_s)
        except NoNodeError:
            return None
    return GroupIdentity.decode(raw)


def bind_group(client: ZooKeeperClient, group: str, wanted: GroupIdentity, *,
               credential: DigestCredential | None = None, timeout_s: float = 10.0) -> GroupIdentity:
    """Bind ``group`` to the data of ``wanted`` if it is bound to nothing yet (create-if-absent: the first
    replica's data wins a race), else check that ``wanted`` is the group's data; returns what the group is bound
    to. A group bound before it had a queue learns its queue's topic here.

    Raises:
        ConfigError: ``wanted`` is other data than the group's: one line naming both (``GroupIdentity.mismatch``).
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    paths = GroupPaths(group)
    acl = credential.acls() if credential else None
    with zookeeper_errors(f"group {group}: binding it to its data"):
        bound = replace(wanted, bound_at=time.time())
        try:
            client.create_async(paths.identity, bound.encode(), acl=acl, makepath=True).get(timeout=timeout_s)
            _log.info("group_bound", group=group, data_root_id=bound.data_root_id, data_root=bound.data_root,
                      topic_id=bound.topic_id, queue_dir=bound.queue_dir)
            return bound
        except NodeExistsError:
            pass
        raw, stat = client.get_async(paths.identity).get(timeout=timeout_s)
        stored = GroupIdentity.decode(raw)
        problem = stored.mismatch(group, wanted, "this replica")
        if problem is not None:
            raise ConfigError(problem)
        if stored.topic_id is None and wanted.topic_id is not None:
            stored = replace(stored, topic_id=wanted.topic_id, queue_dir=wanted.queue_dir)
            client.set_async(paths.identity, stored.encode(), version=stat.version).get(timeout=timeout_s)
            _log.info("group_bound_to_queue", group=group, topic_id=stored.topic_id, queue_dir=stored.queue_dir)
        return stored

