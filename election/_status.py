"""Read-only queries: who leads a group, who contends, the last commit and handover records, the last terms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from tenure.election._boundary import zookeeper_errors
from tenure.election._client import ZooKeeperClient
from tenure.election._handover import HandoverRecord, read_handover
from tenure.election._history import TermRecord, read_history
from tenure.election._identity import Identity
from tenure.election._layout import GroupPaths, node_sequence, sort_nodes
from tenure.election._requests import DrainRequest, OperatorRequests
from tenure.election._transaction import parse_record
from tenure.errors import ElectionError

__all__ = ["Contender", "GroupStatus", "group_status", "read_commit", "read_contenders"]


@dataclass(frozen=True)
class Contender:
    """One election node: its name, line position data, identity and fencing epoch (its ``czxid``)."""

    node: str
    sequence: int
    epoch: int
    session_id: int
    identity: Identity | None

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "sequence": self.sequence,
            "epoch": self.epoch,
            "session_id": f"0x{self.session_id:x}",
            "identity": self.identity.to_json() if self.identity else None,
        }


@dataclass(frozen=True)
class GroupStatus:
    """A snapshot of one group. ``leader`` is the lowest live node (it leads, or will within milliseconds
    once it has verified ownership); ``contenders`` are in line order, leader first. ``queues`` lists the
    queues the group is registered on with every group sharing each and its lag (``{"queue_dir", "groups":
    [{"group", "data_root", "registered_at", "lag"}]}``); ``tenure status`` fills it (``service/ops/_groups.py``).

    Example::

        status = group_status(client, "orders")
        print(status.leader.identity.replica_id if status.leader else "no leader")
    """

    leader: Contender | None
    contenders: list[Contender]
    commit: dict[str, Any] | None
    handover: HandoverRecord | None
    group: str = ""
    commit_version: int | None = None
    queues: list[dict[str, Any]] = field(default_factory=list)
    history: list[TermRecord] = field(default_factory=list)  # the last few terms, oldest first
    drained: list[DrainRequest] = field(default_factory=list)  # replicas kept out of the election

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "leader": self.leader.to_json() if self.leader else None,
            "epoch": self.leader.epoch if self.leader else None,
            "contenders": [c.to_json() for c in self.contenders],
            "commit": self.commit,
            "commit_version": self.commit_version,
            "handover": None if self.handover is None else self.handover.to_json(),
            "queues": self.queues,
            "history": [t.to_json() for t in self.history],
            "drained": [d.to_json() for d in self.drained],
        }


_STATUS_TERMS = 5


def read_commit(client: ZooKeeperClient, group: str, *, queue: int = 0, queues: int = 1,
                timeout_s: float = 10.0) -> tuple[dict[str, Any] | None, int | None]:
    """The commit record of queue ``queue`` of ``group``, a group of ``queues``, as stored (``None`` before its first
    commit) and its znode version (``None`` when the node is missing); a plain read, for operators (a term reads it
    through its ``Fence``).

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed, or the node holds no JSON object.
    """
    paths = GroupPaths(group, queue, queues)
    path = paths.commit
    with zookeeper_errors(f"{paths.label}: reading the commit record"):
        try:
            raw, stat = client.get_async(path).get(timeout=timeout_s)
        except NoNodeError:
            return None, None
    try:
        return parse_record(raw), int(stat.version)
    except ValueError as exc:
        raise ElectionError(f"{paths.label}: {path} holds no commit record ({exc}): it was written by something "
                            "other than tenure; check --zk and --group") from exc


def read_contenders(client: ZooKeeperClient, group: str, *, queue: int = 0, queues: int = 1,
                    timeout_s: float = 10.0) -> list[Contender]:
    """The contenders in the line of queue ``queue`` of ``group``, a group of ``queues``, in line order, the leader
    first (nodes that vanish while being read are left out).

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    paths = GroupPaths(group, queue, queues)
    with zookeeper_errors(f"{paths.label}: reading the line of contenders"):
        try:
            names = sort_nodes(client.get_children_async(paths.election).get(timeout=timeout_s))
        except NoNodeError:
            names = []
        contenders: list[Contender] = []
        for name in names:
            try:
                raw, stat = client.get_async(paths.node(name)).get(timeout=timeout_s)
            except NoNodeError:
                continue
            seq = node_sequence(name)
            assert seq is not None, "sort_nodes keeps only sequenced names"
            contenders.append(Contender(node=name, sequence=seq, epoch=int(stat.czxid),
                                        session_id=int(stat.ephemeralOwner), identity=Identity.from_bytes(raw)))
        return contenders


def group_status(client: ZooKeeperClient, group: str, *, queue: int = 0, queues: int = 1,
                 timeout_s: float = 10.0) -> GroupStatus:
    """Read one queue's contenders (in line order), commit and handover records and last terms, and the group's
    drained replicas.

    Args:
        client: a started client (read access to the group's znodes is enough).
        group: the consumer group.
        queue, queues: the queue to read, of the group's number of queues (default: a group's one queue).
        timeout_s: the bound on each ZooKeeper read.

    Nodes that vanish while being read are left out: the answer is a snapshot, not a lock.

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    where: dict[str, Any] = {"queue": queue, "queues": queues, "timeout_s": timeout_s}
    contenders = read_contenders(client, group, **where)
    commit, commit_version = read_commit(client, group, **where)
    return GroupStatus(leader=contenders[0] if contenders else None, contenders=contenders, commit=commit,
                       handover=read_handover(client, group, **where), group=group,
                       commit_version=commit_version,
                       history=read_history(client, group, **where)[-_STATUS_TERMS:],
                       drained=OperatorRequests(client, group, timeout_s=timeout_s).drains())
