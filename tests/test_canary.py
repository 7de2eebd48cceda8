"""Canary handovers with real replicas: the leader hands over on schedule to the next follower, the successor
reports the gap it saw, the history marks each canary; alone, a leader skips its canary."""

from __future__ import annotations

from pathlib import Path

from kazoo.client import KazooClient

from tenure.career.lifecycle import CANARY_HANDOVER, CANARY_SKIPPED
from tenure.election import read_history
from tenure.service.local import wait_for
from tenure.service.replica import CANARY_GAP
from tests._replicas import ReplicaSet, counter_exactly_once, tenure


def test_canaries_hand_over_on_schedule_and_report_their_gap(counter_replicas: ReplicaSet, zk_client: KazooClient,
                                                             zk_hosts: str, zk_group: str, tmp_path: Path) -> None:
    """Two replicas with a 2 s canary hand over cleanly on schedule, in turn (each term ended ``clean``, reason
    ``canary``); each successor reports the gap after the canary it followed, `tenure history` shows the canaries,
    and the counter stays exactly once."""
    first = counter_replicas.start("r1", canary_handover_every_s=2)
    wait_for(first.is_leader, 30, "r1 to lead")
    second = counter_replicas.start("r2", canary_handover_every_s=2)
    # A read's deadline is the machine's: CI on a starved host once saw the ensemble answer none within 10 s.
    wait_for(lambda: len(read_history(zk_client, zk_group, timeout_s=60)) >= 3, 60, "three terms, two canaries")
    terms = read_history(zk_client, zk_group)
    assert [t.replica_id for t in terms[:3]] == ["r1", "r2", "r1"]
    assert all(t.ended == "clean" and t.reason == "canary" for t in terms[:2])
    # Each successor measured the gap after the canary it followed, from its predecessor's last commit.
    for replica in (first, second):
        wait_for(lambda r=replica: r.metrics().get("tenure_canary_gap_seconds", 0) > 0, 10,
                 "a canary gap")
        assert replica.has_event(CANARY_HANDOVER) and replica.has_event(CANARY_GAP)
    assert second.metrics()["tenure_handover_gap_seconds_count"] >= 1
    assert "clean (canary)" in tenure("history", "--zk", zk_hosts, "--group", zk_group).stdout
    counter_exactly_once(tmp_path / "data")


def test_a_leader_alone_skips_its_canary(counter_replicas: ReplicaSet) -> None:
    """A leader with no follower in line skips its canary (logged with the reason) and keeps leading: a canary never
    hands over to nobody."""
    alone = counter_replicas.start("r1", canary_handover_every_s=0.5)
    wait_for(alone.is_leader, 30, "r1 to lead")
    wait_for(lambda: alone.has_event(CANARY_SKIPPED, reason="no follower in line"), 10, "a skipped canary")
    assert alone.is_leader() and not alone.has_event(CANARY_HANDOVER)
