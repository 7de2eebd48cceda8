"""Spark replicas reading a Redis topic, on real processes: the leader SIGKILLed mid-stream, frozen or SIGTERMed
while it reads a batch and while it trims, Redis SIGKILLed and restarted on its append-only file, and Redis restarted
without it (a lost tail, which stops the leader)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure.career.redis_queue import RedisTopic, committed_positions
from tenure.career.redis_streams import connect
from tenure.career.spark import BATCH_COMMITTED
from tenure.career.spark._redis_topic import STREAM_LOST
from tenure.election import connected, read_commit
from tenure.service.drill import read_events
from tenure.service.local import RedisServer, Topology, start_redis
from tenure.service.ops import GroupCommits, VerifyReport, by_queue, verify
from tenure.service.replica import FAULT_INJECTED, IS_LEADER, QUEUE_LOST, ReplicaSpec
from tests._polling import stays_for
from tests._replicas import every_replica_in_every_line

SESSION_S = 6.0


@pytest.fixture()
def redis_for_fleet(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of the test's own (append-only file, ``appendfsync always``), killed and reaped after the test."""
    server = start_redis(tmp_path / "redis")
    yield server
    server.kill()


def _topology(tmp_path: Path, server: RedisServer, *, replicas: int, queues: int, fault_files: bool = False,
              **settings: Any) -> tuple[Topology, str]:
    url = f"{server.url}?prefix=orders"
    spec = ReplicaSpec(career="spark", queues=queues, queue_url=url, session_timeout_s=SESSION_S,
                       handover_timeout_s=4.0, max_entries_per_trigger=500, **settings)
    topology = Topology(tmp_path / "fleet", replicas=replicas, spec=spec, fault_files=fault_files)
    topology.make_dirs()
    topology.ensemble.start()
    return topology, url


def _records(topology: Topology, queues: int) -> dict[int, dict[str, Any] | None]:
    with connected(topology.ensemble.connect_string) as client:
        return {k: read_commit(client, topology.group, queue=k, queues=queues)[0] for k in range(queues)}


def _audit(topology: Topology, url: str) -> VerifyReport:
    """verify with the group's commit records (its trim points and committed positions), as ``--zk --group``."""
    with connected(topology.ensemble.connect_string) as client:
        return verify(topology.data_root, queue_url=url, group=topology.group,
                      commit_records=GroupCommits(client, topology.group))


def _written(topology: Topology) -> int:
    """Ids in the table now (the table's part files, read without the audit: the streams may be trimmed)."""
    import pyarrow.dataset as ds

    parts = sorted(str(p) for p in (topology.data_root / "table").glob("*.parquet"))
    return len(set(ds.dataset(parts, format="parquet").to_table(columns=["id"]).column("id").to_pylist())) \
        if parts else 0


def _leads(topology: Topology, replica_id: str) -> set[int]:
    metrics = topology.replica(replica_id).metrics()
    return {q for q, leading in by_queue(metrics, IS_LEADER).items() if leading == 1.0}


def _produce(topology: Topology, *args: str) -> None:
    producer = topology.start_producer(list(args))
    topology.wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")
    assert producer.returncode == 0, (topology.logs / "producer.log").read_text()[-2000:]


@pytest.mark.fleet
@pytest.mark.timeout(600)
def test_a_redis_topic_of_two_queues_is_read_once_when_its_leader_is_killed(tmp_path: Path,
                                                                          redis_for_fleet: RedisServer) -> None:
    """Two Spark replicas on a Redis topic of two queues, a producer adding 4 000 records (repeats and bad entries
    among them) to both streams; SIGKILL the leader of queue 0 mid-stream: the other leads both, and verify (with
    the commit records' trim points) finds every id written once, in order, every bad entry quarantined once,
    nothing lost; the streams were trimmed behind the commits."""
    records, queues = 4000, 2
    topology, url = _topology(tmp_path, redis_for_fleet, replicas=2, queues=queues)
    try:
        for replica in topology.replicas:  # warmed up side by side: a Spark start each
            replica.start()

        topology.wait_for(lambda: every_replica_in_every_line(topology, queues), 300,
                          "both replicas warm and in both lines", interval_s=1.0)
        producer = topology.start_producer(["--records", str(records), "--keys", "100", "--rate", "800",
                                            "--duplicates", "0.02", "--bad", "0.005", "--seed", "5",
                                            "--queues", str(queues)])
        topology.wait_for(lambda: _written(topology) >= records // 3, 300, f"{records // 3} ids written",
                          interval_s=1.0)
        victim = next(r for r in topology.replicas if 0 in _leads(topology, r.replica_id))
        survivor = next(r for r in topology.replicas if r is not victim)
        victim.signal(signal.SIGKILL)
        topology.wait_for(lambda: not victim.alive, 30, "the leader of queue 0 to die")
        topology.wait_for(lambda: _leads(topology, survivor.replica_id) == {0, 1}, SESSION_S + 120,
                          "the survivor to lead both")
        topology.wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")

        def drained() -> bool:
            report = _audit(topology, url)
            return report.unaccounted == 0 and report.unquarantined == 0

        topology.wait_for(drained, 300, "both streams to drain", interval_s=2.0)
        report = _audit(topology, url)  # the commit records are ZooKeeper's: read while it runs
    finally:
        topology.stop()
    assert report.ok, report.render()
    assert report.ids_written == records and report.rows_written == records
    streams = report.examples["streams"]
    assert [s["lost"] for s in streams] == [0, 0] and sum(s["trimmed"] for s in streams) > 0, streams


@pytest.mark.fleet
@pytest.mark.timeout(600)
def test_redis_killed_and_restarted_on_its_append_only_file_loses_and_repeats_nothing(
        tmp_path: Path, redis_for_fleet: RedisServer) -> None:
    """A Spark replica reading a Redis topic while Redis is SIGKILLed mid-stream (``appendfsync always``) and
    started again on its append-only file: the producer's acknowledged entries are all there, and the group writes
    each id once (the leader's batches failing meanwhile, then going on), every bad entry quarantined once."""
    records = 3000
    topology, url = _topology(tmp_path, redis_for_fleet, replicas=1, queues=1)
    (replica,) = topology.replicas
    try:
        replica.start()
        topology.wait_for(lambda: _leads(topology, replica.replica_id) == {0}, 300, "the replica to lead")
        producer = topology.start_producer(["--records", str(records), "--keys", "50", "--rate", "600",
                                            "--duplicates", "0.02", "--bad", "0.005", "--seed", "7"])
        topology.wait_for(lambda: _written(topology) >= records // 4, 300, f"{records // 4} ids written",
                          interval_s=0.5)
        redis_for_fleet.kill(signal.SIGKILL)
        redis_for_fleet.start()
        topology.wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")
        assert producer.returncode == 0, (topology.logs / "producer.log").read_text()[-2000:]

        def drained() -> bool:
            report = _audit(topology, url)
            return report.unaccounted == 0 and report.unquarantined == 0

        topology.wait_for(drained, 300, "the stream to drain", interval_s=2.0)
        report = _audit(topology, url)
    finally:
        topology.stop()
    assert report.ok, report.render()
    assert report.ids_written == records and report.rows_written == records
    assert report.examples["streams"][0]["lost"] == 0, report.examples["streams"]


@pytest.mark.fleet
@pytest.mark.timeout(600)
def test_redis_restarted_without_its_append_only_file_stops_the_leader_at_the_hole(
        tmp_path: Path, redis_for_fleet: RedisServer) -> None:
    """Redis SIGKILLed after the group committed every entry, then started without its append-only file (it lost
    them all) and given 200 new records: the leader stops at the hole — one ``stream_lost`` line naming the stream
    and both positions, ``tenure_queue_lost`` = 1, its commit record unchanged, none of the new ids written — and
    it keeps leading (no failure, no handover)."""
    topology, url = _topology(tmp_path, redis_for_fleet, replicas=1, queues=1)
    (replica,) = topology.replicas
    stream = RedisTopic.parse(url).stream(0)
    try:
        replica.start()
        topology.wait_for(lambda: _leads(topology, replica.replica_id) == {0}, 300, "the replica to lead")
        _produce(topology, "--records", "500", "--keys", "20", "--seed", "3")
        topology.wait_for(lambda: _written(topology) == 500, 300, "500 ids written", interval_s=0.5)
        before = _records(topology, 1)[0]
        assert before is not None
        committed = committed_positions(before).through
        redis_for_fleet.kill(signal.SIGKILL)
        redis_for_fleet.appendonly = False
        redis_for_fleet.start()
        _produce(topology, "--records", "200", "--keys", "20", "--seed", "4")
        assert int(connect(RedisTopic.parse(url)).xinfo_stream(stream)["entries-added"]) == 200

        def lost() -> bool:
            return by_queue(replica.metrics(), QUEUE_LOST).get(0) == 1.0

        topology.wait_for(lost, 120, "the queue's lost gauge", interval_s=0.5)
        stays_for(lambda: _records(topology, 1)[0] == before and _leads(topology, replica.replica_id) == {0},
                  12.0, "nothing committed past the hole, and the replica still leading", interval_s=1.0)
        assert _written(topology) == 500
        lines = [event for line in replica.log_path.read_text(errors="replace").splitlines()
                 if line.startswith("{") and (event := json.loads(line)).get("event") == STREAM_LOST]
        assert len(lines) == 1, lines
        assert lines[0]["stream"] == stream and committed is not None
        assert lines[0]["error"].startswith(f"Redis stream {stream} lost its tail: the group has read to id "
                                            f"{committed.id} (entry {committed.n}), Redis has last-generated-id ")
    finally:
        topology.stop()


def _events(replica: Any, name: str, since: float) -> list[dict[str, Any]]:
    """The replica's log events ``name`` logged at ``since`` or later, each as its fields."""
    return [e.fields for e in read_events(replica.log_path, replica.replica_id) if e.event == name and e.at >= since]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("point", "fault"), [
    pytest.param("after_read", "freeze", marks=pytest.mark.fleet),
    pytest.param("after_commit", "freeze", marks=[pytest.mark.fleet, pytest.mark.long]),
    pytest.param("after_read", "sigterm", marks=[pytest.mark.fleet, pytest.mark.long]),
    pytest.param("after_commit", "sigterm", marks=[pytest.mark.fleet, pytest.mark.long]),
])
def test_a_leader_frozen_or_sigtermed_while_it_reads_or_trims_loses_and_repeats_nothing(
        tmp_path: Path, redis_for_fleet: RedisServer, point: str, fault: str) -> None:
    """Two Spark replicas on a Redis topic while a producer adds 1 600 records; the leader stops its whole process
    tree (Python and its JVM) at ``point`` of a batch — ``after_read``: the batch's entries read, nothing staged;
    ``after_commit``: the fenced commit applied, the stream not yet trimmed — then is either frozen past the
    session timeout (its successor leads and commits; resumed, the frozen leader's in-flight batch is fenced or
    refused, and its late trim, planned below the group's committed place, removes nothing unread) or SIGTERMed
    and resumed (it hands over). Every id is written once, every bad entry quarantined once, nothing lost from the
    stream (verify with the commit records' trim points), and no batch published by two epochs."""
    records = 1600
    topology, url = _topology(tmp_path, redis_for_fleet, replicas=2, queues=1, fault_files=True)
    try:
        for replica in topology.replicas:
            replica.start()
        topology.wait_for(lambda: every_replica_in_every_line(topology, 1), 300, "both replicas warm and in line",
                          interval_s=1.0)
        producer = topology.start_producer(["--records", str(records), "--keys", "40", "--rate", "200",
                                            "--duplicates", "0.02", "--bad", "0.005", "--seed", "11"])
        victim = next(r for r in topology.replicas if _leads(topology, r.replica_id) == {0})
        successor = next(r for r in topology.replicas if r is not victim)
        armed = time.time()
        topology.wait_for(lambda: _events(victim, BATCH_COMMITTED, armed), 120, "a commit by the leader",
                          interval_s=0.5)
        victim.arm(point, "pause")
        topology.wait_for(lambda: _events(victim, FAULT_INJECTED, armed) and victim.stopped(), 120,
                          f"the leader to stop its tree at {point}", interval_s=0.5)
        paused = time.time()
        if fault == "sigterm":
            victim.signal(signal.SIGTERM)  # delivered as the tree resumes: a handover from where it stood
            victim.resume()
        topology.wait_for(lambda: _events(successor, BATCH_COMMITTED, paused), SESSION_S + 120,
                          "the successor to lead and commit", interval_s=0.5)
        resumed = time.time()
        if fault == "freeze":
            victim.resume()
            topology.wait_for(lambda: 0 not in _leads(topology, victim.replica_id), 60,
                              "the frozen leader to know it no longer leads", interval_s=0.5)
        topology.wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")

        def drained() -> bool:
            report = _audit(topology, url)
            return report.unaccounted == 0 and report.unquarantined == 0

        topology.wait_for(drained, 300, "the stream to drain", interval_s=2.0)
        report = _audit(topology, url)
        late = _events(victim, BATCH_COMMITTED, resumed) if victim.alive else []
    finally:
        topology.stop()
    assert report.ok, report.render()
    assert report.ids_written == records and report.rows_written == records
    assert report.batches_with_two_epochs == 0
    (stream,) = report.examples["streams"]
    assert stream["lost"] == 0 and stream["trimmed"] > 0, stream
    if fault == "freeze":  # resumed, the frozen leader committed no batch of its own (at most it logs the one
        # whose commit it had made before it froze, at after_commit, finishing its publish and trim)
        assert len(late) <= (1 if point == "after_commit" else 0), late
