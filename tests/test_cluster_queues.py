"""A topic of several queues on the embedded Spark standalone cluster, on real replicas: one replica's application
serves every queue it leads; a queue that moves off it gracefully leaves that application running for its other
queues (no later term of the moved queue kills it), and a replica paused as a whole loses every queue, its
application killed by the successor. `long` (`make test-long`): a cluster and two Spark replicas take minutes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tenure.career.spark._cluster import STALE_APPLICATION_KILLED
from tenure.service.local import Topology
from tenure.service.ops import verify
from tenure.service.replica import ReplicaSpec
from tests._replicas import every_replica_in_every_line, queue_commits, queues_led, replica_events, tenure
from tests.test_spark_queue_faults import committed_ranges

QUEUES = 3
#: More than the test reads (300 a second for 10 minutes): it stops the producer once the faults are done.
RECORDS = 180_000
SESSION_S = 6.0
WARM_UP_S = 600.0
SPEC = ReplicaSpec(career="spark", queues=QUEUES, session_timeout_s=SESSION_S, handover_timeout_s=4.0,
                   failure_backoff_s=0.5, balance_settle_s=2.0)


def _led(topology: Topology) -> dict[str, set[int]]:
    """The queues each replica says it leads."""
    return {r.replica_id: queues_led(topology, r.replica_id) for r in topology.replicas}


def _shared_two_and_one(topology: Topology) -> bool:
    led = _led(topology)
    return sorted(q for queues in led.values() for q in queues) == list(range(QUEUES)) and sorted(
        len(queues) for queues in led.values()) == [1, 2]


def _commits(topology: Topology) -> dict[int, tuple[str | None, int]]:
    """Each queue's last committer and batch (None, -1 before its first commit)."""
    return {q: (r.get("replica_id"), int(r["batch_id"])) if r else (None, -1)
            for q, r in queue_commits(topology, QUEUES).items()}


def _application(topology: Topology, queue: int) -> str:
    """The application the queue's newest recorded term runs on."""
    records = topology.data_root / "_applications" / f"queue={queue}"
    newest = max(records.glob("epoch-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    return str(json.loads(newest.read_text())["app_id"])


def _active(topology: Topology) -> set[str]:
    assert topology.spark is not None
    return {app["id"] for app in topology.spark.state().get("activeapps", [])}


def _kills(topology: Topology) -> list[str]:
    return [str(e["app_id"]) for r in topology.replicas for e in replica_events(topology, r.replica_id)
            if e.get("event") == STALE_APPLICATION_KILLED]


def _commits_on(topology: Topology, queue: int, replica_id: str, after: int) -> bool:
    committer, batch = _commits(topology)[queue]
    return committer == replica_id and batch >= after


@pytest.mark.long
@pytest.mark.timeout(1800)
def test_queues_that_move_off_a_replica_leave_its_application_to_its_other_queues(tmp_path: Path) -> None:
    """Two warm replicas on a 2-worker cluster share three queues 2, 1. The queues of one replica run on its one
    application. One of them is handed to the other replica (and the balance may move it back): its new terms kill
    no application, and the replica that gave it up goes on committing its other queue on the same application.
    Then the replica leading two is paused as a whole process tree: the other takes both queues and kills the paused
    replica's application, and only that one. Resumed, the paused replica writes nothing; `tenure verify --zk`
    finds every record once and in order, and each queue's terms committed batch ranges that never overlap."""
    topology = Topology(tmp_path, replicas=2, spec=SPEC, spark_workers=2)
    topology.start()
    try:
        topology.wait_for(lambda: every_replica_in_every_line(topology, QUEUES), WARM_UP_S,
                          "both replicas warm and in every line", interval_s=1.0)
        topology.wait_for(lambda: _shared_two_and_one(topology), WARM_UP_S, "the queues shared 2, 1", interval_s=1.0)
        producer = topology.start_producer(["--records", str(RECORDS), "--keys", "60", "--rate", "300",
                                            "--duplicates", "0.02", "--bad", "0.005", "--seed", "3",
                                            "--queues", str(QUEUES)])
        topology.wait_for(lambda: all(batch >= 1 for _, batch in _commits(topology).values()), 300,
                          "every queue's first batches", interval_s=1.0)
        # The first replica warm led all three queues; the balance moved some to the other, one at a time.
        assert _kills(topology) == [], "the balance's moves killed a live replica's application"
        topology.wait_for(lambda: _shared_two_and_one(topology), 180, "the queues shared 2, 1", interval_s=1.0)
        led = _led(topology)
        two = next(r for r, queues in led.items() if len(queues) == 2)
        one = next(r for r in led if r != two)
        moved, kept = sorted(led[two])
        application = _application(topology, kept)
        assert _application(topology, moved) == application, "one replica's queues run on one application"
        assert _application(topology, next(iter(led[one]))) != application

        handed = tenure("handover", "--zk", topology.ensemble.connect_string, "--group", topology.group,
                        "--queue", str(moved), "--to", one, "--wait", "--timeout-s", "120")
        assert handed.returncode == 0, handed.stdout + handed.stderr
        topology.wait_for(lambda: _commits(topology)[moved][0] == one, 120, f"queue {moved} committed by {one}",
                          interval_s=0.5)
        after = _commits(topology)[kept][1] + 3
        topology.wait_for(lambda: _commits_on(topology, kept, two, after), 180,
                          f"{two} to commit queue {kept} three more times on its application", interval_s=0.5)
        topology.wait_for(lambda: _shared_two_and_one(topology), 180, "the queues shared 2, 1 again", interval_s=1.0)
        assert _kills(topology) == [], "a queue's move killed a live replica's application"
        assert application in _active(topology)

        led = _led(topology)
        paused_id = next(r for r, queues in led.items() if len(queues) == 2)
        taker = next(r for r in led if r != paused_id)
        application = _application(topology, min(led[paused_id]))
        paused = topology.replica(paused_id)
        assert paused.pause()
        paused_at = time.monotonic()
        topology.wait_for(lambda: all(committer == taker for committer, _ in _commits(topology).values()),
                          SESSION_S + 240, f"{taker} to commit every queue", interval_s=0.5)
        topology.wait_for(lambda: _kills(topology), 90, "the paused replica's application killed", interval_s=0.5)
        took_over_s = time.monotonic() - paused_at
        assert _kills(topology) == [application] and application not in _active(topology)
        paused.resume()
        producer.terminate()  # its files land whole: a hidden name, then a rename
        topology.wait_for(lambda: producer.poll() is not None, 60, "the producer to stop")

        def drained() -> bool:
            report = verify(topology.data_root)
            return report.ids_in > 0 and report.unaccounted == 0 and report.unquarantined == 0

        topology.wait_for(drained, 600, "every queue to drain", interval_s=2.0)
        zk = topology.ensemble.connect_string
        audit = tenure("verify", "--data-root", str(topology.data_root), "--zk", zk, "--group", topology.group)
        assert audit.returncode == 0, audit.stdout + audit.stderr
        shown = tenure("history", "--zk", zk, "--group", topology.group, "--json", "--data-root",
                       str(topology.data_root))
        assert shown.returncode == 0, shown.stderr
        committed_ranges(json.loads(shown.stdout)["terms"], topology.data_root)
    finally:
        topology.stop()
    print(f"\n[timing] pause → every queue committed by the other replica, its application killed: {took_over_s:.1f} s")
