"""The Spark career through real replicas: 60k records; the leader SIGKILLed twice and SIGTERMed once, handed
over with `tenure handover --to` and drained, all while the producer writes."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tenure.election import connected, group_status, read_history
from tenure.service.local import ReplicaStatus, Topology
from tenure.service.ops import verify
from tenure.service.replica import ReplicaSpec
from tests._replicas import tenure

LINE_LIMIT = 64 * 1024
SESSION_S = 6.0
RECORDS = 60000


@pytest.mark.fleet
@pytest.mark.timeout(1200)
def test_exactly_once_through_two_crashes_and_a_handover(tmp_path: Path) -> None:
    """60k records with repeats and bad lines through 3 Spark replicas; the leader is SIGKILLed twice and
    SIGTERMed once mid-stream; after the first crash, while the producer writes, the victim restarts (it leads
    after the SIGTERM), `tenure handover --to` moves the lock to the follower and `tenure drain` of the new leader
    moves it back; verify finds 0 lost, 0 duplicated, 0 inversions and every bad line quarantined once.

    Only the first victim restarts: a replica restarted later would still be warming up when the queue drains,
    and its warm-up would only slow the leader down."""
    topology = Topology(tmp_path, replicas=3, spec=ReplicaSpec(career="spark", session_timeout_s=SESSION_S,
                                                               handover_timeout_s=4.0, max_line_bytes=LINE_LIMIT))
    topology.start()
    try:
        leader = topology.wait_for_leader(600)
        producer = topology.start_producer(["--records", str(RECORDS), "--keys", "200", "--rate", "2000",
                                            "--duplicates", "0.02", "--bad", "0.005", "--seed", "11",
                                            "--max-line-bytes", str(LINE_LIMIT)])
        epochs = [leader.epoch]
        for threshold, fault in ((12000, signal.SIGKILL), (27000, signal.SIGKILL), (42000, signal.SIGTERM)):
            topology.wait_for(lambda t=threshold: verify(tmp_path / "data", max_line_bytes=LINE_LIMIT).ids_written >= t,
                              300, f"{threshold} ids written", interval_s=1.0)
            victim = topology.replica(leader.replica_id)
            victim.signal(fault)
            if fault is signal.SIGTERM:
                assert victim.process is not None and victim.process.wait(timeout=30) == 0
            topology.wait_for(lambda v=victim: not v.alive, 30, "the old leader to exit")
            leader = topology.wait_for_leader(SESSION_S + 120)
            assert leader.replica_id != victim.replica_id
            epochs.append(leader.epoch)
            if len(epochs) == 2:
                topology.restart(victim.replica_id)
                leader = _operators_move_leadership(topology, leader.replica_id, producer)
        assert epochs == sorted(epochs) and len(set(epochs)) == 4, f"epochs must rise: {epochs}"
        topology.wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")

        def drained() -> bool:
            report = verify(tmp_path / "data", max_line_bytes=LINE_LIMIT)
            return report.unaccounted == 0 and report.unquarantined == 0

        topology.wait_for(drained, 300, "the queue to drain", interval_s=2.0)
    finally:
        topology.stop()
    report = verify(tmp_path / "data", max_line_bytes=LINE_LIMIT)
    assert report.ok, report.render()
    assert report.ids_in == RECORDS and report.ids_written == RECORDS
    assert report.bad_lines_in > 0 and report.quarantined == report.bad_lines_in
    assert report.repeated_lines_in > 0
    # The queue stays small: every consumed file was archived, none is left in landing/.
    assert not list((tmp_path / "data" / "landing").glob("*.jsonl"))


def _operators_move_leadership(topology: Topology, leader: str, producer: subprocess.Popen[bytes]) -> ReplicaStatus:
    """While the producer writes: hand over to the replica last in line, then drain that new leader (it hands over
    again) and undrain it. Both handovers are clean in the term history. Returns the leader after them."""
    zk, group = topology.ensemble.connect_string, topology.group
    with connected(zk) as client:
        target = group_status(client, group).contenders[-1].identity.replica_id  # type: ignore[union-attr]
    assert target != leader and producer.poll() is None, "the producer must still be writing"
    done = tenure("handover", "--zk", zk, "--group", group, "--to", target, "--wait", "--timeout-s", "120",
                  timeout_s=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith(f"{target} leads (epoch ")
    drained = tenure("drain", target, "--zk", zk, "--group", group, "--reason", "test", "--wait-s", "120",
                     timeout_s=180)
    assert drained.returncode == 0, drained.stdout + drained.stderr
    successor = topology.wait_for_leader(120)
    assert successor.replica_id == leader  # the only other replica in the election (the victim still warms up)
    assert tenure("undrain", target, "--zk", zk, "--group", group, "--wait-s", "120",
                  timeout_s=180).returncode == 0
    with connected(zk) as client:
        terms = read_history(client, group)
    assert [(t.replica_id, t.ended) for t in terms[-3:]] == [(leader, "clean"), (target, "clean"), (leader, None)]
    return successor
