"""What a group is bound to, ``/tenure/<group>/identity``: the ids of its data root and of its queue, and its number of
queues, recorded by its first replica, so that a replica on other data, or counting other queues, is refused rather
than sharing the group's elections and commit records with it.

The ids are those of the folders' identity files (``tenure.career.identity``: ``_data_root.json``,
``_topic.json``), not paths: a folder reached by another path is the same data, and another folder at a path the
group once used is not. A group that predates the record (an upgrade) is bound by its first replica to start.

The number of queues is written once, by the group's first replica (a group that predates it has one queue, and
learns so from its first replica of this release): the queues' znodes, checkpoints and outputs are laid out by it,
so a replica that counts otherwise would read and write other paths than the group's.
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
    such as the counter), with the paths its first replica saw them at (for messages only), and its number of
    queues (None: not recorded yet, a group of one queue from before queues; in what a replica wants, None means
    "whatever the group records, or one").

    Example::

        GroupIdentity(data_root_id="6f1c…", data_root="/srv/a", topic_id="9e2d…", queue_dir="/srv/a", queues=4)
    """

    data_root_id: str
    data_root: str
    topic_id: str | None = None
    queue_dir: str | None = None
    bound_at: float = 0.0
    queues: int | None = None

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> GroupIdentity:
        data = lenient_object(raw)
        topic = data.get("topic_id")
        queue = data.get("queue_dir")
        queues = data.get("queues")
        return cls(data_root_id=str(data.get("data_root_id", "")), data_root=str(data.get("data_root", "")),
                   topic_id=None if topic is None else str(topic), queue_dir=None if queue is None else str(queue),
                   bound_at=float(data.get("bound_at") or 0.0), queues=None if queues is None else int(queues))

    @property
    def queue_count(self) -> int:
        """The group's number of queues as recorded: one for a group from before queues."""
        return 1 if self.queues is None else self.queues

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
    """The data ``group`` is bound to and its number of queues; None for a group no replica of this release has
    started yet (a group with a ``/tenure/<group>/commit`` is then one of one queue, see ``bind_group``).

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


def _queues_mismatch(group: str, path: str, wanted: int, recorded: int, why: str) -> ConfigError:
    """A replica given ``wanted`` queues for a group that has ``recorded``: one line naming both and the fix."""
    return ConfigError(f"--queues {wanted} does not match group {group!r}, which has {recorded} "
                       f"{'queue' if recorded == 1 else 'queues'} ({why}{path}): pass --queues {recorded}, or give "
                       "this deployment a group of its own (--group)")


def bind_group(client: ZooKeeperClient, group: str, wanted: GroupIdentity, *,
               credential: DigestCredential | None = None, timeout_s: float = 10.0) -> GroupIdentity:
    """Bind ``group`` to the data and number of queues of ``wanted`` if it is bound to nothing yet
    (create-if-absent: the first replica's wins a race), else check that ``wanted`` is the group's data and count;
    returns what the group is bound to, its ``queues`` always recorded. A group bound before it had a queue learns
    its queue's topic here, and one bound before queues learns that it has one.

    ``wanted.queues`` None takes the group's count (one for a new group, or one that predates the record). A group
    that predates the identity record but has a commit record (``/tenure/<group>/commit``) has one queue: binding
    it to more is refused, since its progress is at the one queue's paths.

    Raises:
        ConfigError: ``wanted`` is other data than the group's, or counts other queues: one line naming both
            (``GroupIdentity.mismatch``).
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    paths = GroupPaths(group)
    acl = credential.acls() if credential else None
    with zookeeper_errors(f"group {group}: binding it to its data"):
        bound = replace(wanted, bound_at=time.time(), queues=wanted.queue_count)
        if bound.queue_count > 1 and client.exists_async(paths.commit).get(timeout=timeout_s) is not None:
            # A group from before the identity record: its one queue's progress is at these paths.
            raise _queues_mismatch(group, paths.commit, bound.queue_count, 1, "its progress is at ")
        try:
            client.create_async(paths.identity, bound.encode(), acl=acl, makepath=True).get(timeout=timeout_s)
            _log.info("group_bound", group=group, data_root_id=bound.data_root_id, data_root=bound.data_root,
                      topic_id=bound.topic_id, queue_dir=bound.queue_dir, queues=bound.queues)
            return bound
        except NodeExistsError:
            pass
        raw, stat = client.get_async(paths.identity).get(timeout=timeout_s)
        stored = GroupIdentity.decode(raw)
        problem = stored.mismatch(group, wanted, "this replica")
        if problem is not None:
            raise ConfigError(problem)
        if wanted.queues is not None and wanted.queues != stored.queue_count:
            raise _queues_mismatch(group, paths.identity, wanted.queues, stored.queue_count, "")
        learnt = stored
        if stored.topic_id is None and wanted.topic_id is not None:
            learnt = replace(learnt, topic_id=wanted.topic_id, queue_dir=wanted.queue_dir)
            _log.info("group_bound_to_queue", group=group, topic_id=learnt.topic_id, queue_dir=learnt.queue_dir)
        if stored.queues is None:
            learnt = replace(learnt, queues=1)  # written once: a group from before queues has one
        if learnt != stored:
            client.set_async(paths.identity, learnt.encode(), version=stat.version).get(timeout=timeout_s)
        return learnt

