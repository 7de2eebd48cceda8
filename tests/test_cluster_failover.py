"""The Spark career on a real standalone cluster (master and workers from the PySpark wheel): a worker SIGKILLed
mid-batch, the master restarted, the leader SIGKILLed, all while the producer writes, then the next leader paused
as a whole while it holds its share of cores; verify finds every record exactly once and in order per key, a
follower holds one warm executor and no more, and each new leader leads on the application it held as a follower."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tenure.career.spark import STANDBY_EXECUTORS_HELD
from tenure.career.spark._cluster import STALE_APPLICATION_KILLED
from tenure.service.local import Topology
from tenure.service.ops import verify
from tenure.service.replica import ReplicaSpec
from tests._replicas import committed_by, land_now, line_of, replica_events

ROOT = Path(__file__).resolve().parent.parent
LINE_LIMIT = 64 * 1024
SESSION_S = 6.0
RECORDS = 24000
AFTER_PAUSE_FILES = 10  # of 10 records each, landed once the leader is paused: work only its successor can commit


def _apps(topology: Topology) -> list[dict[str, Any]]:
    assert topology.spark is not None
    return list(topology.spark.state().get("activeapps", []))


def _cores(topology: Topology) -> dict[str, int]:
    """Cores held per application, by what it is: ``standby <replica>`` or ``leader``."""
    held = {}
    for app in _apps(topology):
        standby = re.fullmatch(rf"tenure \[{topology.group} standby (.+)\]", app["name"])
        held[app["id"]] = app["cores"]
        held[f"standby {standby.group(1)}" if standby else app["name"]] = app["cores"]
    return held


def _standby_app(topology: Topology, replica_id: str) -> str:
    """The id of the standby application ``replica_id`` holds now (its last ``standby_executors_held``)."""
    held = [e["app_id"] for e in replica_events(topology, replica_id) if e.get("event") == STANDBY_EXECUTORS_HELD]
    assert held, f"{replica_id} holds no standby application"
    return str(held[-1])


def _term_app(topology: Topology, epoch: int) -> str:
    """The application the term ``epoch`` recorded as its own (what a later leader kills, should it pause)."""
    return str(json.loads((topology.data_root / "_applications" / f"epoch-{epoch}.json").read_text())["app_id"])


def _retried_tasks(spark_dir: Path, killed: str) -> list[str]:
    """Second (or later) attempts of a task, from the executors' logs on the workers that were not killed."""
    return [line for log in spark_dir.glob("worker*/work/*/*/stderr") if f"/{killed}/" not in str(log)
            for line in log.read_text(errors="replace").splitlines() if re.search(r"Running task \d+\.[1-9]", line)]


def _written(topology: Topology) -> int:
    return verify(topology.data_root, max_line_bytes=LINE_LIMIT).ids_written


def _drained_all(topology: Topology) -> bool:
    report = verify(topology.data_root, max_line_bytes=LINE_LIMIT)
    return report.ids_in == RECORDS + AFTER_PAUSE_FILES * 10 and report.unaccounted == 0


@pytest.mark.fleet
@pytest.mark.timeout(900)
def test_exactly_once_through_worker_master_and_leader_loss(tmp_path: Path) -> None:
    """Two warm replicas on a 2-worker cluster of 4 cores: the follower holds a standby application of one warm
    executor, the leader's grew to the other 3. While the producer writes: SIGKILL a worker while a batch's task
    runs on it (Spark reruns the task on the other; the term goes on), restart the master (it recovers both
    applications), SIGKILL the leader (its application dies with it; the successor leads on the application it held
    as a follower, grown). Then the successor, holding its share, is paused as a whole process tree: its driver's
    connections stay open, so the master would keep its application and cores for as long as the pause lasts. The
    restarted replica, warm again, takes over on its own standby application, kills the paused term's application
    through the master and commits; resumed, the paused replica writes nothing."""
    hold = tmp_path / "hold"
    executors = {"spark.executorEnv.PYTHONPATH": str(ROOT), "spark.executorEnv.TENURE_TEST_HOLD": str(hold)}
    spec = ReplicaSpec(career="spark", session_timeout_s=SESSION_S, handover_timeout_s=4.0, max_line_bytes=LINE_LIMIT,
                       row_function="tests.pipelines:held", spark_conf=executors)
    topology = Topology(tmp_path, replicas=2, spec=spec, spark_workers=2)
    topology.start()
    cluster = topology.spark
    assert cluster is not None
    try:
        leader = topology.wait_for_leader(600)
        topology.wait_for(lambda: all(r.status().up for r in topology), 600, "both replicas to serve metrics")
        follower = next(r.replica_id for r in topology if r.replica_id != leader.replica_id)
        leader_app = _term_app(topology, leader.epoch)  # the next leader deletes the record once the app is gone
        assert _standby_app(topology, leader.replica_id) == leader_app, \
            "the leader must lead on the application it held as a follower"
        assert _cores(topology) == {leader_app: 1, f"standby {leader.replica_id}": 1, f"standby {follower}": 1,
                                    _standby_app(topology, follower): 1}, "no batch yet: no growth yet"
        producer = topology.start_producer(["--records", str(RECORDS), "--keys", "100", "--rate", "800",
                                            "--duplicates", "0.02", "--bad", "0.005", "--seed", "5",
                                            "--max-line-bytes", str(LINE_LIMIT)])

        # A worker dies with a batch's tasks running on it (held by the row function): Spark reruns them on the
        # other worker within the same term.
        topology.wait_for(lambda: _written(topology) >= 3000, 300, "3000 ids written", interval_s=1.0)
        topology.wait_for(lambda: _cores(topology).get(leader_app) == 3, 60,
                          "the leader's application grown to its share after its first batch, 3 cores")
        assert _cores(topology)[f"standby {follower}"] == 1, _apps(topology)
        hold.touch()
        reached: list[Path] = []
        topology.wait_for(lambda: reached.extend(tmp_path.glob("hold.reached.*")) or reached, 120,
                          "a task held mid-batch")
        victim_worker = re.search(r"/(worker\d+)/work/", reached[0].read_text())
        assert victim_worker is not None, reached[0].read_text()
        cluster.kill_worker(victim_worker.group(1))
        topology.wait_for(lambda: victim_worker.group(1) not in cluster.alive_workers(), 120,
                          "the master to drop the worker")
        hold.unlink()
        before = topology.replica(leader.replica_id).status().batches
        topology.wait_for(lambda: topology.replica(leader.replica_id).status().batches >= before + 3, 180,
                          "three more commits on the surviving worker", interval_s=0.5)
        assert topology.wait_for_leader(5).epoch == leader.epoch, "a worker's loss must not end the term"
        assert _retried_tasks(cluster.directory, victim_worker.group(1)), \
            "no task attempt was rerun on the surviving worker: the fault missed the batch"
        cluster.start_worker(victim_worker.group(1))

        # The master restarts: the application and the workers come back to it; the term goes on.
        topology.wait_for(lambda: _written(topology) >= 8000, 300, "8000 ids written", interval_s=1.0)
        cluster.kill_master()
        before = topology.replica(leader.replica_id).status().batches
        cluster.start_master()
        topology.wait_for(lambda: len(_apps(topology)) == 2, 120, "both applications to rejoin the new master")
        topology.wait_for(lambda: topology.replica(leader.replica_id).status().batches >= before + 3, 180,
                          "three more commits after the master's restart", interval_s=0.5)
        assert topology.wait_for_leader(5).epoch == leader.epoch, "a master restart must not end the term"

        # The leader dies: its application goes with it and the successor's application starts.
        topology.wait_for(lambda: _written(topology) >= 14000, 300, "14000 ids written", interval_s=1.0)
        victim = topology.replica(leader.replica_id)
        victim.signal(signal.SIGKILL)
        successor = topology.wait_for_leader(SESSION_S + 120)
        assert successor.replica_id != victim.replica_id and successor.epoch > leader.epoch
        topology.wait_for(lambda: leader_app not in _cores(topology), 60,
                          "the killed leader's application to end with its driver")
        assert _term_app(topology, successor.epoch) == _standby_app(topology, successor.replica_id)
        topology.restart(victim.replica_id)
        topology.wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")

        def drained() -> bool:
            report = verify(topology.data_root, max_line_bytes=LINE_LIMIT)
            return report.unaccounted == 0 and report.unquarantined == 0

        topology.wait_for(drained, 300, "the queue to drain", interval_s=2.0)

        # The successor is paused while it holds every core; the restarted replica, next in line, takes over.
        topology.wait_for(lambda: line_of(topology) == [successor.replica_id, victim.replica_id], 300,
                          "the restarted replica in line")
        held = _term_app(topology, successor.epoch)
        topology.wait_for(lambda: _cores(topology).get(f"standby {victim.replica_id}") == 1, 120,
                          "the restarted replica's standby executor")
        assert _cores(topology).get(held) == 3, \
            f"the leader's application must hold its share, or the pause proves nothing: {_apps(topology)}"
        standby = _standby_app(topology, victim.replica_id)
        joined = [e["event"] for e in replica_events(topology, victim.replica_id)
                  if e.get("event") in (STANDBY_EXECUTORS_HELD, "joined")]
        assert joined[-2:] == [STANDBY_EXECUTORS_HELD, "joined"], f"joined the election before its executor: {joined}"
        paused = topology.replica(successor.replica_id)
        assert paused.pause()
        paused_at = time.monotonic()
        land_now(topology, "after-pause", AFTER_PAUSE_FILES)
        topology.wait_for(lambda: committed_by(topology, victim.replica_id), 180,
                          "the new leader to commit while the old one is paused", interval_s=0.5)
        took_over_s = time.monotonic() - paused_at
        # Right before its standby application grows, once its first batch has committed (or tried again while
        # it leads if the master's web UI answered too slowly then).
        topology.wait_for(lambda: any(e.get("event") == STALE_APPLICATION_KILLED
                                      for e in replica_events(topology, victim.replica_id)), 90,
                          "the paused term's application killed", interval_s=0.5)
        events = replica_events(topology, victim.replica_id)
        killed = [e for e in events if e.get("event") == STALE_APPLICATION_KILLED]
        assert [e["app_id"] for e in killed] == [held], killed
        taken_over = topology.wait_for_leader(5)
        steps = [e["event"] for e in events if e.get("epoch") == taken_over.epoch
                 and e.get("event") in ("batch_committed", STALE_APPLICATION_KILLED)]
        assert steps.index("batch_committed") < steps.index(STALE_APPLICATION_KILLED), \
            f"the master was asked before the first batch, on the handover's path: {steps}"
        assert _term_app(topology, taken_over.epoch) == standby, "the new leader must lead on its standby application"
        assert held not in _cores(topology), _apps(topology)
        paused.resume()
        topology.wait_for(lambda: _drained_all(topology), 300, "the files landed after the pause", interval_s=2.0)
        topology.wait_for(lambda: not paused.alive or paused.replica_id in line_of(topology), 120,
                          "the resumed replica to exit or follow")
        cores = _cores(topology)
        assert held not in cores and cores.get(standby) == 3, f"the leader's share, none of the paused term's: {cores}"
    finally:
        topology.stop()
    # The session timeout, then the new leader's inauguration and a first batch on its warm executor.
    print(f"\n[timing] pause → the new leader's first commit: {took_over_s:.1f} s")
    assert took_over_s < SESSION_S + 60, f"the new leader committed {took_over_s:.0f} s after the pause"
    report = verify(topology.data_root, max_line_bytes=LINE_LIMIT)
    assert report.ok, report.render()
    total = RECORDS + AFTER_PAUSE_FILES * 10
    assert report.ids_in == total and report.ids_written == total
    assert report.quarantined == report.bad_lines_in > 0
