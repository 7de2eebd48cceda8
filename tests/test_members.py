"""The balance's members in ZooKeeper (``tenure.election.Membership``) on the real ensemble: a replica's member node
kept true across its own changes and an earlier session's node, and the view the plan reads (members, each queue's
leader, the queues' handover requests) with its watch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from tenure.election import (
    Election,
    GroupPaths,
    HandoverRequest,
    Identity,
    Member,
    Membership,
    OperatorRequests,
    ZooKeeperClient,
    connect,
    disconnect,
    read_members,
)
from tenure.service.local import wait_for

EVERY = frozenset({0, 1})


@pytest.fixture()
def other_client(zk_hosts: str) -> Iterator[ZooKeeperClient]:
    """A client of its own session, disconnected afterwards."""
    client = connect(zk_hosts, session_timeout_s=4.0)
    yield client
    disconnect(client)


def test_keep_creates_rewrites_and_deletes_the_member_node(zk_client: KazooClient, zk_group: str) -> None:
    """keep(member) creates an ephemeral node of this session holding the member; the same member again writes
    nothing; another readiness rewrites it; keep(None) deletes it."""
    membership = Membership(zk_client, zk_group, "r1", queues=2)
    path = GroupPaths(zk_group).member_node("r1")
    assert membership.keep(Member(None, EVERY))
    raw, stat = zk_client.get(path)
    assert stat.ephemeralOwner == zk_client.client_id[0] and Member.decode(raw) == Member(None, EVERY)
    assert not membership.keep(Member(None, EVERY))
    assert membership.keep(Member(2, frozenset({1})))
    assert read_members(zk_client, zk_group) == {"r1": Member(2, frozenset({1}))}
    assert membership.keep(None)
    assert zk_client.exists(path) is None and not membership.keep(None)


def test_an_earlier_sessions_node_is_replaced_when_wanted_and_left_alone_otherwise(
        zk_client: KazooClient, other_client: ZooKeeperClient, zk_group: str) -> None:
    """A node of the same replica left by an earlier session (a killed process's, before its session expired) is
    replaced by the new session's at once when it wants to be a member; a replica that wants none leaves it to
    expire with its session."""
    path = GroupPaths(zk_group).member_node("r1")
    Membership(other_client, zk_group, "r1", queues=2).keep(Member(None, EVERY))
    membership = Membership(zk_client, zk_group, "r1", queues=2)
    assert not membership.keep(None)
    assert zk_client.exists(path).ephemeralOwner == other_client.client_id[0]
    assert membership.keep(Member(1, EVERY))
    raw, stat = zk_client.get(path)
    assert stat.ephemeralOwner == zk_client.client_id[0] and Member.decode(raw) == Member(1, EVERY)


def test_the_view_reads_members_leaders_and_requests_and_the_watch_hears_changes(
        zk_client: KazooClient, other_client: ZooKeeperClient, zk_group: str) -> None:
    """The view has the members, each queue's leader (the replica of its lowest node; None for an empty line) and
    the handover requests; the watch is called at once, then when a member joins and when a line changes."""
    changes = threading.Semaphore(0)
    membership = Membership(zk_client, zk_group, "r1", queues=2)
    membership.watch(changes.release)
    assert changes.acquire(timeout=5)
    membership.keep(Member(None, EVERY))
    wait_for(lambda: changes.acquire(timeout=0.1), 5, "the watch to hear r1 join the members")
    election = Election(other_client, group=zk_group, queue=1, queues=2, identity=Identity.local("r2"))
    election.start()
    try:
        wait_for(lambda: election.epoch is not None, 10, "r2 elected in queue 1")
        wait_for(lambda: changes.acquire(timeout=0.1), 5, "the watch to hear queue 1's line change")
        request = HandoverRequest(election.epoch or 0, "r1", time.time(), time.time() + 30)
        OperatorRequests(zk_client, zk_group, queues=2).put_handover(request, 1)
        view = membership.view()
        assert view.members == {"r1": Member(None, EVERY)}
        assert view.leaders == {0: None, 1: "r2"}
        assert view.requests == {1: request}
    finally:
        election.close()
