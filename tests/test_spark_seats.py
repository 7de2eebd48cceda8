"""Spark replicas of a group of two queues: each queue exactly once, whoever leads it, when the leader of both dies."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure.election import connected, read_history
from tenure.service.local import Topology
from tenure.service.ops import by_queue, verify
from tenure.service.replica import GROUP_BALANCED, IS_LEADER, ReplicaSpec
from tests._replicas import every_replica_in_every_line

QUEUES = 2
SESSION_S = 6.0
RECORDS = 6000


def _led(topology: Topology, replica_id: str) -> set[int]:
    """The queues ``replica_id`` says it leads."""
    metrics = topology.replica(replica_id).metrics()
    return {q for q, leading in by_queue(metrics, IS_LEADER).items() if leading == 1.0}


def _drained(topology: Topology) -> bool:
    """Every valid record of every queue written, every bad line quarantined."""
    report = verify(topology.data_root)
    return report.unaccounted == 0 and report.unquarantined == 0


@contextlib.contextmanager
def _first_leading_both(tmp_path: Path, **settings: Any) -> Iterator[Topology]:
    """Two Spark replicas of a topic of two queues (``settings`` over the spec), the first started and leading both;
    the whole topology stopped afterwards."""
    topology = Topology(tmp_path, replicas=2, spec=ReplicaSpec(career="spark", queues=QUEUES,
                                                               session_timeout_s=SESSION_S, handover_timeout_s=4.0,
                                                               **settings))
    topology.make_dirs()
    topology.ensemble.start()
    try:
        topology.replicas[0].start()
        topology.wait_for(lambda: _led(topology, topology.replicas[0].replica_id) == {0, 1}, 300,
                          "the first replica to lead both queues")
        yield topology
    finally:
        topology.stop()


def _terms(topology: Topology) -> dict[int, list[str]]:
    """Each queue's terms, by the replica that led each."""
    with connected(topology.ensemble.connect_string) as client:
        return {q: [t.replica_id for t in read_history(client, topology.group, queue=q, queues=QUEUES)]
                for q in range(QUEUES)}



@pytest.mark.fleet
@pytest.mark.long  # in CI, test_demo kills the replica leading the most of four queues and audits every queue
@pytest.mark.timeout(900)
def test_two_queues_are_each_written_once_when_the_leader_of_both_is_killed(tmp_path: Path) -> None:
    """Two Spark replicas on a topic of two queues, the first leading both, the producer routing 6 000 records
    (repeats and bad lines among them) to both queues; SIGKILL the first mid-stream: the second leads both queues,
    each in a term of its own, and verify finds every queue and the whole exactly once, in order, every bad line
    quarantined once."""
    with _first_leading_both(tmp_path) as topology:
        first, second = topology.replicas
        second.start()

        topology.wait_for(lambda: every_replica_in_every_line(topology, QUEUES), 300,
                          "the second replica warm and in both lines", interval_s=1.0)
        producer = topology.start_producer(["--records", str(RECORDS), "--keys", "100", "--rate", "1000",
                                            "--duplicates", "0.02", "--bad", "0.005", "--seed", "5",
                                            "--queues", str(QUEUES)])
        topology.wait_for(lambda: verify(topology.data_root).ids_written >= RECORDS // 3, 300,
                          f"{RECORDS // 3} ids written", interval_s=1.0)
        first.signal(signal.SIGKILL)
        topology.wait_for(lambda: not first.alive, 30, "the first replica to die")
        topology.wait_for(lambda: _led(topology, second.replica_id) == {0, 1}, SESSION_S + 120,
                          "the second to lead both")
        topology.wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")

        topology.wait_for(lambda: _drained(topology), 300, "both queues to drain", interval_s=2.0)
        terms = _terms(topology)
    assert terms == {q: [first.replica_id, second.replica_id] for q in range(QUEUES)}, terms
    report = verify(topology.data_root)
    assert report.ok, report.render()
    assert report.queues == QUEUES and report.ids_in == RECORDS and report.ids_written == RECORDS
    assert report.bad_lines_in > 0 and report.quarantined == report.bad_lines_in
    assert [(q["queue"], q["lost"]) for q in report.per_queue] == [(0, 0), (1, 0)], report.per_queue
    assert all(q["rows_written"] > 0 for q in report.per_queue), report.per_queue


@pytest.mark.fleet
@pytest.mark.long  # in CI, test_spark_queue_faults's SIGTERM test shares four queues 2, 1, 1 and audits each
@pytest.mark.timeout(900)
def test_two_spark_replicas_share_two_queues_one_each_and_every_record_is_written_once(tmp_path: Path) -> None:
    """Two Spark replicas on a topic of two queues, the first leading both: once the second is warm the balance
    moves one queue to it (a clean handover of that queue's query), each leads one, and with the producer routing
    4 000 records to both queues verify finds every queue and the whole exactly once, in order."""
    records = 4000
    with _first_leading_both(tmp_path, balance_settle_s=2.0) as topology:
        first, second = topology.replicas
        producer = topology.start_producer(["--records", str(records), "--keys", "100", "--rate", "500",
                                            "--duplicates", "0.02", "--seed", "7", "--queues", str(QUEUES)])
        second.start()
        topology.wait_for(lambda: [len(_led(topology, r.replica_id)) for r in (first, second)] == [1, 1], 300,
                          "one queue each", interval_s=1.0)
        moved = _led(topology, second.replica_id).pop()
        topology.wait_for(lambda: all(topology.replica(r.replica_id).metrics().get(GROUP_BALANCED) == 1.0
                                      for r in (first, second)), 60, "both views balanced")
        topology.wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")

        topology.wait_for(lambda: _drained(topology), 300, "both queues to drain", interval_s=2.0)
        terms = _terms(topology)
    assert terms == {q: [first.replica_id, second.replica_id] if q == moved else [first.replica_id]
                     for q in range(QUEUES)}, terms
    report = verify(topology.data_root)
    assert report.ok, report.render()
    assert report.queues == QUEUES and report.ids_in == records and report.ids_written == records
    assert all(q["rows_written"] > 0 and q["lost"] == 0 for q in report.per_queue), report.per_queue
