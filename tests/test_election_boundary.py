"""The election's boundary: ZooKeeper's failures reach the callers of ``tenure.election`` as the product's errors.

With the ensemble gone, every public call that talks to ZooKeeper raises ``ZooKeeperUnavailable`` (an
``ElectionError``), never one of kazoo's; a write the znodes' ACL refuses raises ``ZooKeeperDenied``, which names
``--zk-auth``, and ``tenure drain`` prints it as one line. Both on real ensembles.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tenure.election import (
    DigestCredential,
    DrainRequest,
    Election,
    GroupIdentity,
    GroupPaths,
    HandoverRecord,
    HandoverRequest,
    Identity,
    OperatorRequests,
    QueueKey,
    TermHistory,
    bind_group,
    connect,
    disconnect,
    group_queues,
    group_status,
    is_connected,
    list_groups,
    read_commit,
    read_contenders,
    read_group_identity,
    read_handover,
    read_history,
    register_group,
    registered_groups,
    unregister_group,
)
from tenure.errors import ElectionError, NotLeader, ZooKeeperDenied, ZooKeeperUnavailable
from tenure.service.local import Ensemble, wait_for
from tests._replicas import tenure
from tests.test_election import contenders

_SESSION_S = 4.0  # the private ensemble's tick of 200 ms caps sessions at 20 ticks
_OP_S = 1.0


def test_every_public_call_raises_zookeeper_unavailable_once_the_ensemble_is_gone(
        private_ensemble: Ensemble, tmp_path: Path) -> None:
    """A leader's client, its election, fence, history, operators' requests and the queue registry, all set up
    while the ensemble serves; once every server is stopped, each call that reads or writes ZooKeeper raises
    ZooKeeperUnavailable, none a kazoo error, and a commit is refused before sending (NotLeader), as ever."""
    group = "boundary"
    client = connect(private_ensemble.connect_string, session_timeout_s=_SESSION_S, persistent=True)
    election = Election(client, group=group, identity=Identity.local("r1"), session_timeout_s=_SESSION_S,
                        op_timeout_s=_OP_S)
    try:
        election.start()
        wait_for(election.is_leader, 30, "r1 to lead")
        fence = election.fence()
        history = TermHistory(client, group, timeout_s=_OP_S)
        requests = OperatorRequests(client, group, timeout_s=_OP_S)
        queue = QueueKey("boundary-topic", str(tmp_path / "queue"))
        register_group(client, queue, group, tmp_path / "root", "boundary-root")
        wanted = GroupIdentity(data_root_id="boundary-root", data_root=str(tmp_path / "root"))
        bind_group(client, group, wanted)
        request = HandoverRequest(fence.epoch, None, time.time(), time.time() + 60)
        record = HandoverRecord(fence.epoch, None, False, time.time(), "r1")

        for server in private_ensemble:
            private_ensemble.stop_server(server)
        wait_for(lambda: not is_connected(client), 30, "the client to lose the ensemble")

        calls: dict[str, Callable[[], object]] = {
            "read_handover": lambda: read_handover(client, group, timeout_s=_OP_S),
            "read_commit": lambda: read_commit(client, group, timeout_s=_OP_S),
            "read_contenders": lambda: read_contenders(client, group, timeout_s=_OP_S),
            "read_history": lambda: read_history(client, group, timeout_s=_OP_S),
            "group_status": lambda: group_status(client, group, timeout_s=_OP_S),
            "Election.read_handover": election.read_handover,
            "Election.contenders": election.contenders,
            "Fence.read_commit": fence.read_commit,
            "Fence.write_handover": lambda: fence.write_handover(record),
            "TermHistory.read": history.read,
            "TermHistory.begin": lambda: history.begin(epoch=fence.epoch, node=fence.node,
                                                       node_version=fence.node_version, replica_id="r1",
                                                       elected_at=time.time(), previous=None),
            "TermHistory.update": lambda: history.update(fence.epoch, batches=1),
            "OperatorRequests.drains": requests.drains,
            "OperatorRequests.drain": lambda: requests.drain("r1"),
            "OperatorRequests.put_drain": lambda: requests.put_drain(DrainRequest("r1", "test", time.time())),
            "OperatorRequests.remove_drain": lambda: requests.remove_drain("r1"),
            "OperatorRequests.handover": requests.handover,
            "OperatorRequests.put_handover": lambda: requests.put_handover(request),
            "OperatorRequests.remove_handover": lambda: requests.remove_handover(request),
            "list_groups": lambda: list_groups(client, queue, timeout_s=_OP_S),
            "registered_groups": lambda: registered_groups(client, queue, timeout_s=_OP_S),
            "group_queues": lambda: group_queues(client, group, timeout_s=_OP_S),
            "register_group": lambda: register_group(client, queue, group, tmp_path / "root", "boundary-root",
                                                     timeout_s=_OP_S),
            "unregister_group": lambda: unregister_group(client, queue, group, timeout_s=_OP_S),
            "bind_group": lambda: bind_group(client, group, wanted, timeout_s=_OP_S),
            "read_group_identity": lambda: read_group_identity(client, group, timeout_s=_OP_S),
        }
        wrong: dict[str, str] = {}
        for name, call in calls.items():
            try:
                call()
            except ZooKeeperUnavailable as exc:
                assert isinstance(exc, ElectionError) and "ZooKeeper" in str(exc)
            except Exception as exc:  # a kazoo error, or any other: wrong here
                wrong[name] = repr(exc)
            else:
                wrong[name] = "returned without ZooKeeper"
        assert not wrong, wrong
        with pytest.raises(NotLeader):  # refused before anything is sent, as before the mapping
            fence.commit({"batch_id": 1}, expected_version=0)
    finally:
        with contextlib.suppress(ElectionError):  # the node cannot be deleted now: it goes with the session
            election.close(timeout_s=_OP_S)
        disconnect(client)


def test_a_write_the_acl_refuses_raises_zookeeper_denied_and_tenure_drain_says_so_in_one_line(
        zk_hosts: str, zk_group: str) -> None:
    """A group whose znodes carry the service's digest ACL: a client without the credential still reads it (world
    readable) but its writes raise ZooKeeperDenied naming --zk-auth, never kazoo's NoAuthError; `tenure drain`
    without --zk-auth prints that as one error line and exits 2."""
    credential = DigestCredential("tenure", "s3cret")
    stranger = KazooClient(hosts=zk_hosts, timeout=10.0)
    stranger.start(timeout=15)
    stranger.ensure_path("/tenure")  # shared by every test's groups: keep it open on this ensemble
    try:
        with contenders(zk_hosts, zk_group) as made:
            leader = made.add("r1", credential=credential)
            wait_for(leader.election.is_leader, 20, "r1 to lead")
            made.add("r2", credential=credential)
            wait_for(lambda: len(read_contenders(stranger, zk_group)) == 2, 20, "r2 in line")
            assert read_handover(stranger, zk_group) is None  # reads need no credential
            requests = OperatorRequests(stranger, zk_group)
            for write in (lambda: requests.put_drain(DrainRequest("r2", "", time.time())),
                          lambda: requests.put_handover(HandoverRequest(1, None, time.time(), time.time() + 60)),
                          lambda: TermHistory(stranger, zk_group).update(1, batches=1)):
                with pytest.raises(ZooKeeperDenied, match="--zk-auth"):
                    write()
            done = tenure("drain", "r2", "--zk", zk_hosts, "--group", zk_group)
            assert done.returncode == 2, done.stdout + done.stderr
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("tenure: error: ") and "--zk-auth" in lines[0], lines
            assert stranger.exists(GroupPaths(zk_group).drained_node("r2")) is None
    finally:
        stranger.stop()
        stranger.close()
