"""`tenure drain` / `tenure undrain` with real replicas: a drained leader hands over cleanly and stays warm and
observable; refusals are one line; a replica drained before it starts never joins."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kazoo.client import KazooClient

from tenure.career.lifecycle import DRAINED, HANDOVER_RECORDED
from tenure.election import DrainRequest, GroupPaths, read_history
from tenure.service.local import wait_for
from tests._replicas import ReplicaSet, counter_exactly_once, election_line, tenure


def test_a_drained_leader_hands_over_cleanly_and_stays_warm(counter_replicas: ReplicaSet, zk_client: KazooClient,
                                                            zk_hosts: str, zk_group: str, tmp_path: Path) -> None:
    """`tenure drain` of the leader: it hands over cleanly to a follower and stays alive, out of the election, reporting
    itself drained (``/readyz`` 503 with the reason, `tenure status`); `tenure undrain` puts it back at the end of
    the line without disturbing the new leader, and the counter stays exactly once."""
    first = counter_replicas.start("r1")
    wait_for(first.is_leader, 30, "r1 to lead")
    others = [counter_replicas.start("r2"), counter_replicas.start("r3")]
    wait_for(lambda: all(r.get("/readyz")[0] == 200 for r in others), 30, "r2 and r3 ready")

    done = tenure("drain", "r1", "--zk", zk_hosts, "--group", zk_group, "--reason", "kernel upgrade")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "r1 drained (kernel upgrade): out of the election"
    successor = wait_for(counter_replicas.one_leader, 20, "a successor to lead")
    assert successor.replica_id in ("r2", "r3")
    assert first.alive and first.get("/livez")[0] == 200 and "tenure_is_leader 0.0" in first.get("/metrics")[1]
    code, body = first.get("/readyz")
    assert code == 503 and json.loads(body)["role"] == "drained"
    assert any(reason.startswith("drained: kernel upgrade") for reason in json.loads(body)["reasons"])
    assert first.has_event(DRAINED, was_leading=True) and first.has_event(HANDOVER_RECORDED, clean=True)
    assert read_history(zk_client, zk_group)[0].ended == "clean"
    status = tenure("status", "--zk", zk_hosts, "--group", zk_group)
    assert "drained: r1 since" in status.stdout and "kernel upgrade" in status.stdout

    done = tenure("undrain", "r1", "--zk", zk_hosts, "--group", zk_group)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "r1 undrained: back in the election"
    assert election_line(zk_client, zk_group)[-1] == "r1"  # at the back of the line
    wait_for(lambda: first.get("/readyz")[0] == 200, 10, "r1 ready again")
    assert counter_replicas.one_leader() is successor
    counter_exactly_once(tmp_path / "data")


def test_refusals_are_one_line(counter_replicas: ReplicaSet, zk_client: KazooClient, zk_hosts: str,
                               zk_group: str) -> None:
    """`tenure drain` of an unknown replica, or of the last one in the election without ``--force``, is refused in one
    line naming the fix and changes nothing; with ``--force`` the group has no leader until `tenure undrain`;
    undraining a replica that is not drained is refused too."""
    only = counter_replicas.start("r1")
    wait_for(only.is_leader, 30, "r1 to lead")
    base = ["--zk", zk_hosts, "--group", zk_group]

    unknown = tenure("drain", "nobody", *base)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines()[-1] == (
        f"tenure: error: replica 'nobody' is not in the election of group '{zk_group}' (contenders: r1): check the "
        "replica id (`tenure status`)")
    last = tenure("drain", "r1", *base)
    assert last.returncode == 2
    assert "is the last replica in the election of group" in last.stderr and "--force" in last.stderr
    assert only.is_leader() and not zk_client.exists(GroupPaths(zk_group).drained_node("r1"))

    forced = tenure("drain", "r1", *base, "--force")
    assert forced.returncode == 0, forced.stderr
    assert election_line(zk_client, zk_group) == [] and not only.is_leader()
    assert tenure("undrain", "r1", *base).returncode == 0
    wait_for(only.is_leader, 20, "r1 to lead again")
    again = tenure("undrain", "r1", *base)
    assert again.returncode == 2 and "replica 'r1' is not drained" in again.stderr


def test_a_replica_drained_before_it_starts_never_joins(counter_replicas: ReplicaSet, zk_client: KazooClient,
                                                        zk_hosts: str, zk_group: str) -> None:
    """A replica whose drain request exists before it starts never joins the election (it reports itself drained from
    the start) until `tenure undrain`, which puts it in line."""
    leader = counter_replicas.start("r1")
    wait_for(leader.is_leader, 30, "r1 to lead")
    paths = GroupPaths(zk_group)
    zk_client.create(paths.drained_node("r2"), DrainRequest("r2", "new disk", time.time()).encode(),
                     makepath=True)
    late = counter_replicas.start("r2")
    wait_for(lambda: late.get("/readyz")[0] == 503 and "drained: new disk" in late.get("/readyz")[1], 30,
             "r2 up and reporting drained")
    assert late.has_event(DRAINED, at_start=True)
    assert "r2" not in election_line(zk_client, zk_group)
    assert tenure("undrain", "r2", "--zk", zk_hosts, "--group", zk_group).returncode == 0
    assert election_line(zk_client, zk_group) == ["r1", "r2"]
