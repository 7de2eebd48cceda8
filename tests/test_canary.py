"""Canary handovers with real replicas: the leader hands over on schedule to the next follower, the successor
reports the gap it saw, the history marks each canary; alone, a leader skips its canary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from election import read_history
from tests._replicas import ReplicaSet, counter_exactly_once, counter_replica_set, tenure, wait_for


@pytest.fixture()
def replicas(zk_hosts: str, zk_group: str, tmp_path: Path) -> Iterator[ReplicaSet]:
    replica_set = counter_replica_set(zk_hosts, zk_group, tmp_path)
    yield replica_set
    replica_set.reap_all()


def test_canaries_hand_over_on_schedule_and_report_their_gap(replicas: ReplicaSet, zk_client: KazooClient,
                                                             zk_hosts: str, zk_group: str, tmp_path: Path) -> None:
    canary = ["--canary-handover-every-s", "2"]
    first = replicas.start("r1", canary)
    wait_for(first.is_leader, 30, "r1 to lead")
    second = replicas.start("r2", canary)
    wait_for(lambda: len(read_history(zk_client, zk_group)) >= 3, 30, "three terms, two canaries")
    terms = read_history(zk_client, zk_group)
    assert [t.replica_id for t in terms[:3]] == ["r1", "r2", "r1"]
    assert all(t.ended == "clean" and t.reason == "canary" for t in terms[:2])
    # Each successor measured the gap after the canary it followed, from its predecessor's last commit.
    for replica in (first, second):
        wait_for(lambda r=replica: r.metrics().get("tenure_canary_gap_seconds", 0) > 0, 10,
                 "a canary gap")
        assert replica.has_event("canary_handover") and replica.has_event("canary_gap")
    assert second.metrics()["tenure_handover_gap_seconds_count"] >= 1
    assert "clean (canary)" in tenure("history", "--zk", zk_hosts, "--group", zk_group).stdout
    counter_exactly_once(tmp_path / "data")


def test_a_leader_alone_skips_its_canary(replicas: ReplicaSet) -> None:
    alone = replicas.start("r1", ["--canary-handover-every-s", "0.5"])
    wait_for(alone.is_leader, 30, "r1 to lead")
    wait_for(lambda: alone.has_event("canary_skipped", reason="no follower in line"), 10, "a skipped canary")
    assert alone.is_leader() and not alone.has_event("canary_handover")
