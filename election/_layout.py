"""Every znode path tenure uses (ARCHITECTURE.md "ZooKeeper layout"): a group's, a queue's registry, and
election-node name parsing."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from tenure.errors import ConfigError

__all__ = ["NODE_MARK", "QUEUES", "GroupPaths", "QueuePaths", "node_sequence", "sort_nodes"]

ROOT = "/tenure"
#: The queue registry (``election/_registry.py``). Group names start with a letter or digit, so ``_queues`` never
#: collides with a group's own ``/tenure/<group>``.
QUEUES = f"{ROOT}/_queues"
#: kazoo's Lock recipe naming: ``<guid>-n_<seq>``; the guid finds our node after a lost create reply.
NODE_MARK = "-n_"
_GROUP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_SEQ_RE = re.compile(r"-n_(-?\d{10})$")


@dataclass(frozen=True)
class GroupPaths:
    """``/tenure/<group>/{election,commit,handover}`` for one consumer group."""

    group: str

    def __post_init__(self) -> None:
        if not _GROUP_RE.match(self.group):
            raise ConfigError(f"group={self.group!r} is not a valid group name: use 1–128 letters, digits, "
                              "'_', '.' or '-', starting with a letter or digit")

    @property
    def root(self) -> str:
        return f"{ROOT}/{self.group}"

    @property
    def election(self) -> str:
        return f"{self.root}/election"

    @property
    def commit(self) -> str:
        return f"{self.root}/commit"

    @property
    def handover(self) -> str:
        return f"{self.root}/handover"

    @property
    def handover_request(self) -> str:
        """An operator's request that the leader hand over (``tenure handover``, ``election/_handover_request.py``)."""
        return f"{self.root}/handover-request"

    @property
    def drained(self) -> str:
        """Operators' requests to keep replicas out of the election, one child per replica (``tenure drain``)."""
        return f"{self.root}/drained"

    def drained_node(self, replica_id: str) -> str:
        return f"{self.drained}/{replica_id}"

    @property
    def history(self) -> str:
        """The last terms, for operators (``election/_history.py``)."""
        return f"{self.root}/history"

    @property
    def identity(self) -> str:
        """What the group is bound to: its data root's and its queue's ids (``election/_group_identity.py``)."""
        return f"{self.root}/identity"

    def node(self, name: str) -> str:
        return f"{self.election}/{name}"


@dataclass(frozen=True)
class QueuePaths:
    """``/tenure/_queues/<queue key>/<group>``: the groups registered on one queue.

    The key is the queue's topic id (its ``_topic.json``), so a queue folder reached by two paths (a symlink, a
    bind mount, another host's mount point) is one queue. Before issue 50 the key was the queue's absolute path
    URL-quoted into one znode name (``/srv/q`` → ``%2Fsrv%2Fq``: :meth:`of_path`); a replica moves its group's
    entry from such a key to its topic's.

    Example::

        QueuePaths("9e2d4c1e-…").group("orders")   # '/tenure/_queues/9e2d4c1e-…/orders'
        QueuePaths.of_path("/srv/q").root         # '/tenure/_queues/%2Fsrv%2Fq' (a legacy key)
    """

    key: str

    @classmethod
    def of_path(cls, queue_dir: str | os.PathLike[str]) -> QueuePaths:
        """The legacy key of the queue at ``queue_dir``: its absolute path (``~`` expanded, links resolved)."""
        return cls(quote(str(Path(queue_dir).expanduser().resolve()), safe=""))

    @property
    def legacy_dir(self) -> str | None:
        """The queue's path, when the key is a legacy one (a quoted absolute path); None for a topic id."""
        path = unquote(self.key)
        return path if path.startswith("/") else None

    @property
    def root(self) -> str:
        return f"{QUEUES}/{self.key}"

    def group(self, group: str) -> str:
        """The registry entry of ``group`` on this queue."""
        return f"{self.root}/{group}"


def node_sequence(name: str) -> int | None:
    """The sequence number of an election node name, or ``None`` for a name that is not ours."""
    match = _SEQ_RE.search(name)
    return int(match.group(1)) if match else None


def sort_nodes(names: list[str]) -> list[str]:
    """Election node names in line order (lowest sequence first); foreign names are left out."""
    ours = [(seq, n) for n in names if (seq := node_sequence(n)) is not None]
    return [n for _, n in sorted(ours)]
