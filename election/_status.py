"""Read-only queries: who leads a group, who contends, the last commit and handover records, the last terms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tenure.election._drain import DrainRequest, drain_requests
from tenure.election._history import TermRecord, read_history
from tenure.election._identity import Identity
from tenure.election._layout import GroupPaths, node_sequence, sort_nodes
from tenure.election._transaction import parse_record

__all__ = ["Contender", "GroupStatus", "group_status"]


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
    handover: dict[str, Any] | None
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
            "handover": self.handover,
            "queues": self.queues,
            "history": [t.to_json() for t in self.history],
            "drained": [d.to_json() for d in self.drained],
        }


def _read(client: KazooClient, path: str) -> tuple[dict[str, Any] | None, int | None]:
    try:
        raw, stat = client.get(path)
    except NoNodeError:
        return None, None
    return parse_record(raw), int(stat.version)


_STATUS_TERMS = 5


def group_status(client: KazooClient, group: str) -> GroupStatus:
    """Read the group's contenders (in line order), commit and handover records from ZooKeeper.

    Args:
        client: a started kazoo client (read access to the group's znodes is enough).
        group: the consumer group.

    Nodes that vanish while being read are left out: the answer is a snapshot, not a lock.
    """
    paths = GroupPaths(group)
    try:
        names = sort_nodes(client.get_children(paths.election))
    except NoNodeError:
        names = []
    contenders: list[Contender] = []
    for name in names:
        try:
            raw, stat = client.get(paths.node(name))
        except NoNodeError:
            continue
        seq = node_sequence(name)
        assert seq is not None, "sort_nodes keeps only sequenced names"
        contenders.append(Contender(node=name, sequence=seq, epoch=int(stat.czxid),
                                    session_id=int(stat.ephemeralOwner), identity=Identity.from_bytes(raw)))
    commit, commit_version = _read(client, paths.commit)
    handover, _ = _read(client, paths.handover)
    return GroupStatus(leader=contenders[0] if contenders else None, contenders=contenders, commit=commit,
                       handover=handover, group=group, commit_version=commit_version,
                       history=read_history(client, group)[-_STATUS_TERMS:], drained=drain_requests(client, group))
