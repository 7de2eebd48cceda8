"""Every znode path tenure uses (ARCHITECTURE.md "ZooKeeper layout"): a group's and each of its queues', a topic's
registry, and election-node name parsing."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from tenure.errors import ConfigError

__all__ = ["MAX_QUEUES", "NODE_MARK", "QUEUES", "GroupPaths", "QueuePaths", "node_sequence", "sort_nodes"]

ROOT = "/tenure"
#: The queue registry (``election/_registry.py``). Group names start with a letter or digit, so ``_queues`` never
#: collides with a group's own ``/tenure/<group>``.
QUEUES = f"{ROOT}/_queues"
#: kazoo's Lock recipe naming: ``<guid>-n_<seq>``; the guid finds our node after a lost create reply.
NODE_MARK = "-n_"
#: The most queues a group may have: every replica stands in every queue's line, each line an election with a
#: control thread and a liveness round-trip (``docs/concepts/queues.md`` says what they cost).
MAX_QUEUES = 64
_GROUP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_SEQ_RE = re.compile(r"-n_(-?\d{10})$")


@dataclass(frozen=True)
class GroupPaths:
    """A consumer group's znodes: those of one of its queues, and the group's own.

    Each queue of the group (``queue`` of ``queues``) has its own election line, commit record, handover record,
    handover request and term history: ``/tenure/<group>/{election,commit,handover,handover-request,history}`` in a
    group of one queue (exactly the paths of a group from before queues, so it upgrades in place), and
    ``/tenure/<group>/queues/<k>/…`` in a group of several. What belongs to the group — who is drained, what it is
    bound to (``identity``), its members — is under ``/tenure/<group>`` whatever the count.

    Example::

        GroupPaths("orders").commit                          # '/tenure/orders/commit'
        GroupPaths("orders", queue=2, queues=4).commit       # '/tenure/orders/queues/2/commit'
        GroupPaths("orders", queues=4).of_queue(3).election  # '/tenure/orders/queues/3/election'
        GroupPaths("orders", queue=2, queues=4).drained      # '/tenure/orders/drained'
    """

    group: str
    queue: int = 0
    queues: int = 1

    def __post_init__(self) -> None:
        if not _GROUP_RE.match(self.group):
            raise ConfigError(f"group={self.group!r} is not a valid group name: use 1–128 letters, digits, "
                              "'_', '.' or '-', starting with a letter or digit")
        if not 1 <= self.queues <= MAX_QUEUES:
            raise ConfigError(f"queues={self.queues} is not a number of queues: use 1 to {MAX_QUEUES}")
        if not 0 <= self.queue < self.queues:
            raise ConfigError(f"queue={self.queue} is not a queue of a topic of {self.queues}: use 0 to "
                              f"{self.queues - 1}")

    def of_queue(self, queue: int) -> GroupPaths:
        """The paths of queue ``queue`` of the same group."""
        return GroupPaths(self.group, queue, self.queues)

    @property
    def label(self) -> str:
        """How messages name what these paths are: ``group orders`` (one queue), ``group orders, queue 2``."""
        return f"group {self.group}" if self.queues == 1 else f"group {self.group}, queue {self.queue}"

    # -- the group's own ---------------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        return f"{ROOT}/{self.group}"

    @property
    def drained(self) -> str:
        """Operators' requests to keep replicas out of the election, one child per replica (``tenure drain``)."""
        return f"{self.root}/drained"

    def drained_node(self, replica_id: str) -> str:
        return f"{self.drained}/{replica_id}"

    @property
    def identity(self) -> str:
        """What the group is bound to: its data root's and its queue's ids, its number of queues
        (``election/_group_identity.py``)."""
        return f"{self.root}/identity"

    @property
    def members(self) -> str:
        """The group's replicas that are ready to lead, one ephemeral child each (the balance's members)."""
        return f"{self.root}/members"

    def member_node(self, replica_id: str) -> str:
        return f"{self.members}/{replica_id}"

    # -- the queue's -------------------------------------------------------------------------------------------

    @property
    def queue_root(self) -> str:
        """Where this queue's znodes live: the group's root in a group of one queue."""
        return self.root if self.queues == 1 else f"{self.root}/queues/{self.queue}"

    @property
    def election(self) -> str:
        return f"{self.queue_root}/election"

    @property
    def commit(self) -> str:
        return f"{self.queue_root}/commit"

    @property
    def handover(self) -> str:
        return f"{self.queue_root}/handover"

    @property
    def handover_request(self) -> str:
        """An operator's request that the queue's leader hand over (``tenure handover``, ``election/_requests.py``)."""
        return f"{self.queue_root}/handover-request"

    @property
    def history(self) -> str:
        """The queue's last terms, for operators (``election/_history.py``)."""
        return f"{self.queue_root}/history"

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
