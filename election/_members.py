"""The balance's members in ZooKeeper: a replica's own ephemeral ``/tenure/<group>/members/<replica>``, the members
and each queue's leader as the plan reads them, and the watches that say when either changed — here alone.

A member node holds ``Member``'s JSON (``{"max_queues_led": M or null, "ready": [queues]}``). It is ephemeral, so a
replica whose session ends leaves the members with it; the replica's control loop keeps it true (``keep``): created
while the replica is active, its data rewritten when its readiness changes, deleted when it drains, turns unhealthy
or stops, and created again on a new session.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from tenure.election._acl import DigestCredential
from tenure.election._boundary import zookeeper_errors
from tenure.election._client import ZooKeeperClient
from tenure.election._identity import Identity
from tenure.election._layout import GroupPaths, sort_nodes
from tenure.election._plan import Member
from tenure.election._requests import HandoverRequest

__all__ = ["BalanceView", "Membership", "read_leaders", "read_members"]

_K = TypeVar("_K")


@dataclass(frozen=True)
class BalanceView:
    """What the plan is computed from: the members (by replica), each queue's leader now (None: nobody in line), and
    the queues' handover requests (a move under way, or an operator's)."""

    members: dict[str, Member]
    leaders: dict[int, str | None]
    requests: dict[int, HandoverRequest]


def _gather(pending: Iterable[tuple[_K, Any]], deadline: float) -> list[tuple[_K, Any]]:
    """The answers of requests sent at once (kazoo async results), each waited for until one shared ``deadline``
    (monotonic); a node gone meanwhile is left out."""
    answers = []
    for key, result in pending:
        try:
            answers.append((key, result.get(timeout=max(0.0, deadline - time.monotonic()))))
        except NoNodeError:
            continue
    return answers


def read_members(client: ZooKeeperClient, group: str, *, timeout_s: float = 10.0) -> dict[str, Member]:
    """The balance's members of ``group`` now, by replica (nodes that vanish while read, or hold no member's data, are
    left out): what ``tenure status`` shows.

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    paths = GroupPaths(group)
    deadline = time.monotonic() + timeout_s
    with zookeeper_errors(f"group {group}: reading the balance's members"):
        try:
            names = sorted(client.get_children_async(paths.members).get(timeout=timeout_s))
        except NoNodeError:
            return {}
        answers = _gather([(name, client.get_async(paths.member_node(name))) for name in names], deadline)
    return {name: member for name, (raw, _stat) in answers if (member := Member.decode(raw)) is not None}


def read_leaders(client: ZooKeeperClient, group: str, *, queues: int, timeout_s: float = 10.0) -> dict[int, str | None]:
    """Each queue's leader now: the replica of the lowest node in its line (None for an empty line, or a node not
    tenure's). Reads every line at once, then every lowest node at once, bounded by ``timeout_s`` in all.

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
    """
    lines = [GroupPaths(group, q, queues) for q in range(queues)]
    deadline = time.monotonic() + timeout_s
    leaders: dict[int, str | None] = dict.fromkeys(range(queues))
    with zookeeper_errors(f"group {group}: reading each queue's leader"):
        listed = _gather([(p.queue, client.get_children_async(p.election)) for p in lines], deadline)
        lowest = [(q, sort_nodes(names)[:1]) for q, names in listed]
        answers = _gather([(q, client.get_async(lines[q].node(first[0]))) for q, first in lowest if first], deadline)
    for q, (raw, _stat) in answers:
        identity = Identity.from_bytes(raw)
        leaders[q] = None if identity is None else identity.replica_id
    return leaders


def _read_requests(client: ZooKeeperClient, group: str, *, queues: int,
                   timeout_s: float) -> dict[int, HandoverRequest]:
    """Each queue's handover request, for the queues that have a readable one, all read at once."""
    deadline = time.monotonic() + timeout_s
    with zookeeper_errors(f"group {group}: reading the queues' handover requests"):
        answers = _gather([(q, client.get_async(GroupPaths(group, q, queues).handover_request))
                           for q in range(queues)], deadline)
    return {q: request for q, (raw, _stat) in answers if (request := HandoverRequest.decode(raw)) is not None}


class Membership:
    """One replica's member node in its group, and the balance's view and watches.

    Example::

        membership = Membership(client, "orders", "r2", queues=4)
        membership.keep(Member(max_queues_led=None, ready=frozenset(range(4))))  # a member now
        membership.watch(lambda: events.put("balance"))   # from kazoo's thread: only enqueue there
        view = membership.view()                          # members, and each queue's leader
        membership.keep(None)                             # drained: no longer a member

    Every call but ``watch`` is bounded by ``timeout_s`` in all (a turn of the balance on the runner's control thread,
    its ``keep`` and its ``view``, by twice that) and raises ZooKeeperUnavailable, ZooKeeperDenied or
    ElectionError when ZooKeeper fails. With ``credential``, the nodes it creates carry its ACL.
    """

    def __init__(self, client: ZooKeeperClient, group: str, replica_id: str, *, queues: int = 1,
                 credential: DigestCredential | None = None, timeout_s: float = 10.0) -> None:
        self._client = client
        self._group = group
        self._replica_id = replica_id
        self._queues = queues
        self._paths = GroupPaths(group, queues=queues)
        self._acl = credential.acls() if credential else None
        self._timeout_s = timeout_s
        self._watches: list[ChildrenWatch] = []

    @property
    def queues(self) -> int:
        """The group's number of queues."""
        return self._queues

    def _session(self) -> int | None:
        client_id = self._client.client_id
        return int(client_id[0]) if client_id else None

    def keep(self, member: Member | None) -> bool:
        """Make the replica's member node say ``member`` (None: no node); returns whether it wrote anything.

        A node of the same name from an earlier session (this replica's last process, killed before its session
        expired) is replaced at once, so a restarted replica is a member again without waiting out that session.
        """
        path = self._paths.member_node(self._replica_id)
        deadline = time.monotonic() + self._timeout_s  # one bound for the whole keep, however many calls

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        with zookeeper_errors(f"group {self._group}: keeping the member node of {self._replica_id}"):
            try:
                raw, stat = self._client.get_async(path).get(timeout=left())
            except NoNodeError:
                raw, stat = None, None
            ours = stat is not None and stat.ephemeralOwner == self._session()
            if stat is not None and (member is None) == ours:
                # Ours and no longer wanted, or an earlier session's while we want one: delete it (an earlier
                # session's node left alone when we want none goes with that session). Gone with its session
                # already, or changed meanwhile: the next keep looks again.
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self._client.delete_async(path, version=stat.version).get(timeout=left())
                if member is None:
                    return True
                stat = None
            if member is None:
                return False
            data = member.encode()
            if stat is None:
                try:
                    self._client.create_async(path, data, acl=self._acl, ephemeral=True,
                                              makepath=True).get(timeout=left())
                except NodeExistsError:
                    return False  # created meanwhile (by an earlier session's last word): the next keep looks again
                return True
            if raw == data:
                return False
            self._client.set_async(path, data, version=stat.version).get(timeout=left())
            return True

    def view(self) -> BalanceView:
        """The members, each queue's leader and the queues' handover requests now, all read within ``timeout_s``."""
        client, group, queues = self._client, self._group, self._queues
        deadline = time.monotonic() + self._timeout_s
        members = read_members(client, group, timeout_s=self._timeout_s)
        leaders = read_leaders(client, group, queues=queues, timeout_s=max(0.0, deadline - time.monotonic()))
        return BalanceView(members, leaders, _read_requests(client, group, queues=queues,
                                                           timeout_s=max(0.0, deadline - time.monotonic())))

    def watch(self, on_change: Callable[[], None]) -> None:
        """Call ``on_change`` (no arguments) at once and whenever the members or any queue's line change, across
        reconnects; from kazoo's thread: it must only enqueue. A member's data changing (its readiness) is not
        watched: read ``view`` again from time to time. Hazard: kazoo's ``ChildrenWatch`` retries its first read until
        ZooKeeper answers, so while the ensemble is unreachable this call waits for it."""
        def changed(_children: list[str]) -> None:
            on_change()

        parents = [self._paths.members, *(self._paths.of_queue(q).election for q in range(self._queues))]
        with zookeeper_errors(f"group {self._group}: watching the balance's members and lines"):
            for parent in parents:  # a watch on a missing node stops at once: make each first
                with contextlib.suppress(NodeExistsError):
                    self._client.create_async(parent, b"", acl=self._acl, makepath=True).get(timeout=self._timeout_s)
            self._watches = [ChildrenWatch(self._client, parent, changed) for parent in parents]
