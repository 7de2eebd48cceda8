"""`tenure handover` with real replicas: a clean handover to a named replica (those ahead of it step aside) or to
the next in line; the old leader rejoins at the back; refusals are one line."""

from __future__ import annotations

import re
import time
from pathlib import Path

from kazoo.client import KazooClient

from tenure.career.lifecycle import (
    DEFERRED_TO_HANDOVER_TARGET,
    HANDOVER_RECORDED,
    HANDOVER_REQUESTED,
    HandoverRequests,
)
from tenure.election import GroupPaths, HandoverRequest, group_status, read_history
from tenure.service.local import wait_for
from tests._replicas import Replica, ReplicaSet, counter_exactly_once, election_line, tenure

#: No test here waits for a session to expire: a session of 10 s, not the fixture's 3 s, keeps a leader starved of
#: CPU for a few seconds (CI saw it) from losing its term in the middle of a test about handover requests.
_SESSION_S = 10


def _three(counter_replicas: ReplicaSet, zk_client: KazooClient, group: str) -> list[Replica]:
    """r1 leading, then r2 and r3 in line, all ready. The deadlines are the machine's: CI on a starved host once
    took over 30 s to start a replica process and see it in line."""
    started = [counter_replicas.start("r1", session_timeout_s=_SESSION_S)]
    wait_for(started[0].is_leader, 90, "r1 to lead")
    for name in ("r2", "r3"):
        started.append(counter_replicas.start(name, session_timeout_s=_SESSION_S))
        wait_for(lambda: election_line(zk_client, group)[-1] == name, 90, f"{name} in line")  # noqa: B023
    wait_for(lambda: all(r.get("/readyz")[0] == 200 for r in started), 90, "every replica ready")
    return started



def test_handover_to_a_named_replica_past_the_next_in_line(counter_replicas: ReplicaSet, zk_client: KazooClient,
                                                           zk_hosts: str, zk_group: str, tmp_path: Path) -> None:
    """`tenure handover --to r3 --wait` while r2 is next in line: r2 steps aside, r1 hands over cleanly to r3, the
    command prints the request and the gap to r3's first commit, the request is deleted, r1 and r2 rejoin behind r3,
    and the counter stays exactly once."""
    r1, r2, r3 = _three(counter_replicas, zk_client, zk_group)
    epoch = group_status(zk_client, zk_group).leader.epoch  # type: ignore[union-attr]
    wait_for(lambda: read_history(zk_client, zk_group) and read_history(zk_client, zk_group)[-1].first_commit_at,
             20, "r1's first commit")

    done = tenure("handover", "--zk", zk_hosts, "--group", zk_group, "--to", "r3", "--wait")
    assert done.returncode == 0, done.stderr
    first, last = done.stdout.strip().splitlines()
    assert first == f"handover of epoch {epoch} to r3 requested"
    assert re.fullmatch(r"r3 leads \(epoch \d+\); its first commit came \d+\.\d\d s after r1's last", last), last
    assert counter_replicas.one_leader() is r3
    assert r2.has_event(DEFERRED_TO_HANDOVER_TARGET)  # next in line, it stepped aside for the target
    assert r1.has_event(HANDOVER_REQUESTED, to="r3") and r1.has_event(HANDOVER_RECORDED, clean=True)
    assert r1.alive and r2.alive
    wait_for(lambda: election_line(zk_client, zk_group)[0] == "r3" and len(election_line(zk_client, zk_group)) == 3, 10,
             "r1 and r2 back in line")
    terms = read_history(zk_client, zk_group)
    assert [(t.replica_id, t.ended) for t in terms] == [("r1", "clean"), ("r3", None)]
    assert not zk_client.exists(GroupPaths(zk_group).handover_request)  # the target deleted it
    wait_for(lambda: r3.metrics().get("tenure_batches_total{outcome=committed}", 0) >= 3, 20, "r3 committing")
    counter_exactly_once(tmp_path / "data")


def test_handover_to_the_next_in_line(counter_replicas: ReplicaSet, zk_client: KazooClient, zk_hosts: str,
                                      zk_group: str) -> None:
    """`tenure handover --wait` without a target: the next in line leads and the old leader rejoins at the back."""
    r1, r2, _r3 = _three(counter_replicas, zk_client, zk_group)
    done = tenure("handover", "--zk", zk_hosts, "--group", zk_group, "--wait")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("r2 leads")
    assert counter_replicas.one_leader() is r2
    wait_for(lambda: election_line(zk_client, zk_group) == ["r2", "r3", "r1"], 10, "r1 at the back of the line")
    assert r1.has_event(HANDOVER_REQUESTED, to=None)


def test_a_request_from_a_host_whose_clock_is_an_hour_behind_is_honoured(
        counter_replicas: ReplicaSet, zk_client: KazooClient, zk_group: str) -> None:
    """The requester's wall clock is an hour behind the replicas': by their clocks its request expired long ago.
    A replica counts the request's 60 s from when it reads it, so the leader hands over to the named target."""
    r1, _r2, r3 = _three(counter_replicas, zk_client, zk_group)
    epoch = group_status(zk_client, zk_group).leader.epoch  # type: ignore[union-attr]
    behind = time.time() - 3600
    zk_client.create(GroupPaths(zk_group).handover_request,
                     HandoverRequest(epoch, "r3", behind, behind + 60).encode())
    wait_for(lambda: counter_replicas.one_leader() is r3, 30, "r3 to lead")
    assert r1.has_event(HANDOVER_REQUESTED, to="r3")


def test_a_request_lives_for_its_timeout_from_when_the_replica_read_it() -> None:
    """Pure logic: whatever the requester's clock said (here 10 minutes ahead), a replica honours a request for
    its timeout from its first reading, on its own monotonic clock."""
    now = [1000.0]
    requests = HandoverRequests(None, "r1", clock=lambda: now[0])  # type: ignore[arg-type]  # no reads here
    ahead = time.time() + 600
    request = HandoverRequest(7, "r2", ahead, ahead + 60)
    assert requests.live(request)
    now[0] += 59.0
    assert requests.live(request)
    now[0] += 2.0
    assert not requests.live(request)


def test_refusals_are_one_line(counter_replicas: ReplicaSet, zk_client: KazooClient, zk_hosts: str,
                               zk_group: str) -> None:
    """`tenure handover` to the leader itself, to an unknown or a drained replica, or while another request is live, is
    refused in one line and the leader keeps its term."""
    r1, _r2, _r3 = _three(counter_replicas, zk_client, zk_group)
    base = ["handover", "--zk", zk_hosts, "--group", zk_group]

    def refused(*extra: str) -> str:
        done = tenure(*base, *extra)
        assert done.returncode == 2, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert lines[-1].startswith("tenure: error: ")
        return lines[-1]

    assert "replica 'r1' already leads" in refused("--to", "r1")
    assert "replica 'nobody' is not in the election" in refused("--to", "nobody")
    assert tenure("drain", "r2", "--zk", zk_hosts, "--group", zk_group).returncode == 0
    assert "replica 'r2' is drained: undrain it first" in refused("--to", "r2")
    epoch = group_status(zk_client, zk_group).leader.epoch  # type: ignore[union-attr]
    # A live request the leader ignores (it names the leader itself) blocks a second one.
    zk_client.create(GroupPaths(zk_group).handover_request,
                     HandoverRequest(epoch, "r1", time.time(), time.time() + 60).encode())
    assert "is already requested" in refused("--to", "r3")
    assert counter_replicas.one_leader() is r1
    zk_client.delete(GroupPaths(zk_group).handover_request)
    wait_for(lambda: counter_replicas.one_leader() is r1, 5, "r1 still leading")


def test_a_target_that_does_not_answer_is_not_ready(counter_replicas: ReplicaSet, zk_client: KazooClient, zk_hosts: str,
                                                    zk_group: str) -> None:
    """A frozen follower keeps its node until its session expires, but cannot say it is ready: refused."""
    leader = counter_replicas.start("r1")
    wait_for(leader.is_leader, 30, "r1 to lead")
    frozen = counter_replicas.start("r2", session_timeout_s=9)  # its node outlives the check below
    wait_for(lambda: election_line(zk_client, zk_group) == ["r1", "r2"] and frozen.get("/readyz")[0] == 200, 30,
             "r2 ready in line")
    frozen.pause()
    try:
        done = tenure("handover", "--zk", zk_hosts, "--group", zk_group, "--to", "r2")
    finally:
        frozen.resume()
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("tenure: error: replica 'r2' is not ready (") and "does not answer" in line
    assert counter_replicas.one_leader() is leader and not zk_client.exists(GroupPaths(zk_group).handover_request)
