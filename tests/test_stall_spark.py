"""Stuck leaders with the Spark career, on real replicas: a frozen JVM, a hung row function, a poison batch.

Each fault leaves the replica's own Python process running with its ZooKeeper session alive — the case a
heartbeat cannot see. Short timeouts keep the tests quick (`--probe-timeout-s 3`, `--stall-timeout-s 20`); the
drills (`tenure drill stuck-leader`) run the same faults with the defaults.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from tenure.career.drills import HANG_ENV, POISON_PILL
from tenure.career.lifecycle import STALLED
from tenure.career.spark import ROW_FUNCTION_TIMED_OUT
from tenure.election import connected, read_history
from tenure.service.local import Topology
from tenure.service.ops import sample_key, verify
from tenure.service.replica import BATCHES, EXIT_HANDOVER_OVERRUN, EXIT_STALLED, ReplicaSpec
from tests._replicas import committed_by, land_now, line_of, process_running, replica_events

SESSION_S = 6.0
STALL_S = 20.0
FIRST_BATCH_ALLOWANCE_S = 15.0
FAST = ReplicaSpec(career="spark", session_timeout_s=SESSION_S, handover_timeout_s=3.0, probe_timeout_s=3,
                   liveness_timeout_s=10, stall_timeout_s=STALL_S, first_batch_allowance_s=FIRST_BATCH_ALLOWANCE_S,
                   failure_backoff_s=0.5)


def _drained(topology: Topology, records: int) -> bool:
    report = verify(topology.data_root)
    return report.ids_in == records and report.unaccounted == 0


@pytest.mark.fleet
@pytest.mark.timeout(900)
def test_frozen_jvms_give_the_lock_up_follower_and_leader(tmp_path: Path) -> None:
    """4 Spark replicas and a producer. (1) The JVM of the follower next in line freezes (its Python process runs
    on): its health probe gets no answer, so it leaves the line, and a SIGTERMed leader hands over to the third,
    healthy replica. SIGTERMed in turn, the frozen follower cannot stop its Spark (the keep-warm job and the
    context's stop wait on the JVM): the handover budget ends it (exit 3) and kills its frozen JVM with it.
    (2) The new leader's JVM freezes: its next call into Spark misses the probe deadline, it gives the lock up
    (session closed, JVM killed, exit 4) and the fourth replica commits, within the probe timeout and a few
    seconds, the files landed after the freeze. The successor drains the queue: nothing lost or written twice.

    A fourth replica, not a restarted one, takes over from the frozen leader: a restart's warm-up is a minute on
    this machine, so it would set the test's pace."""
    records = 6000  # 40 s at 150 records/s
    topology = Topology(tmp_path, replicas=4, spec=FAST)
    topology.start()
    try:
        topology.wait_for_leader(300)
        topology.wait_for(lambda: len(line_of(topology)) == 4, 300, "all four replicas in line")
        producer = topology.start_producer(["--records", str(records), "--keys", "40", "--rate", "150", "--seed", "5"])
        line = line_of(topology)
        leader, next_in_line, third, fourth = (topology.replica(r) for r in line)
        topology.wait_for(lambda: committed_by(topology, leader.replica_id), 60, "the leader to commit")

        # 1. The next in line freezes; it must leave the line before the leader goes.
        frozen = next_in_line.freeze_spark()
        assert frozen, "the follower has a Spark JVM to freeze"
        froze_at = time.monotonic()
        topology.wait_for(lambda: next_in_line.replica_id not in line_of(topology), 20, "the frozen follower to leave")
        left_s = time.monotonic() - froze_at
        leader.signal(signal.SIGTERM)
        topology.wait_for(lambda: committed_by(topology, third.replica_id), 40, f"{third.replica_id} to commit")
        assert leader.process is not None and leader.process.wait(timeout=30) == 0
        assert left_s < 3 + 2 + 3, f"the frozen follower left the line {left_s:.1f} s after the freeze"
        next_in_line.signal(signal.SIGTERM)
        stopping_at = time.monotonic()
        assert next_in_line.process is not None and next_in_line.process.wait(timeout=30) == EXIT_HANDOVER_OVERRUN
        stopped_s = time.monotonic() - stopping_at
        assert stopped_s < 3 + 2 + 3, f"the frozen follower took {stopped_s:.1f} s to stop (budget 3 + 2 s)"
        topology.wait_for(lambda: not any(process_running(pid) for pid in frozen), 10, "the frozen JVM to be killed")
        overrun = [e for e in replica_events(topology, next_in_line.replica_id) if e.get("event") == "close_overrun"]
        assert overrun and overrun[0].get("replica_id") == next_in_line.replica_id, overrun

        # 2. The new leader's JVM freezes; the fourth replica takes over.
        assert line_of(topology) == [third.replica_id, fourth.replica_id]
        assert third.freeze_spark()
        froze_at = time.monotonic()
        land_now(topology, "after-freeze", AFTER_FREEZE_FILES, ts=int(time.time() * 1000))
        assert third.process is not None and third.process.wait(timeout=30) == EXIT_STALLED
        gave_up_s = time.monotonic() - froze_at
        successor = topology.wait_for_leader(30)
        assert successor.replica_id == fourth.replica_id
        topology.wait_for(lambda: committed_by(topology, successor.replica_id), 30, "the successor to commit")
        took_over_s = time.monotonic() - froze_at
        assert gave_up_s < 3 + 1 + 3, f"the frozen leader gave up {gave_up_s:.1f} s after the freeze"
        assert took_over_s < gave_up_s + 15, f"a successor committed {took_over_s:.1f} s after the freeze"
        stalled = [e for e in replica_events(topology, third.replica_id) if e.get("event") == STALLED]
        assert stalled and stalled[0]["reason"] == "spark_unresponsive"
        with connected(topology.ensemble.connect_string) as client:
            ended = [t for t in read_history(client, topology.group) if t.replica_id == third.replica_id]
        assert ended[-1].ended == "stalled" and "Spark's JVM" in (ended[-1].reason or "")

        topology.wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")
        topology.wait_for(lambda: _drained(topology, records + AFTER_FREEZE_FILES * 10), 300, "the queue to drain",
                          interval_s=2.0)
    finally:
        topology.stop()
    report = verify(topology.data_root)
    assert report.ok, report.render()


#: Files of 10 records landed once the leader's JVM is frozen: work that only its successor can commit.
AFTER_FREEZE_FILES = 10


def _land(topology: Topology, name: str, lines: list[dict[str, object]], order: int) -> None:
    """Write one queue file as a producer must: a hidden name, then a rename into landing/; its modification
    time is ``order`` seconds past a fixed point, so the file source reads the files in that order."""
    landing = topology.data_root / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    hidden = landing / f".{name}"
    hidden.write_text("".join(json.dumps(line) + "\n" for line in lines))
    stamp = time.time() - 1000 + order
    os.utime(hidden, (stamp, stamp))
    hidden.replace(landing / name)


@pytest.mark.fleet
@pytest.mark.timeout(900)
def test_a_row_function_that_hangs_in_one_replica_moves_the_lock(tmp_path: Path) -> None:
    """The row function hangs in the leader only, first on a socket that never answers (``--row-timeout-s``
    interrupts each call: its records wait for retry and the batches finish without progress), then, in the next
    leader, in a call that ignores signals (its batch never finishes). Each stalls and gives the lock up; the
    third, healthy replica writes every record, none dead-lettered."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # accepts connections (the kernel's backlog) and never answers
    hang = {f"replica-{i}": tmp_path / f"hang-{i}" for i in (1, 2, 3)}
    topology = Topology(tmp_path, replicas=3,
                        spec=FAST | ReplicaSpec(row_function="tenure.career.drills:hang_when_told", row_timeout_s=2,
                                                retry_attempts=8, max_files_per_trigger=2),
                        replica_env={name: {HANG_ENV: str(path)} for name, path in hang.items()})
    topology.start()
    try:
        topology.wait_for(lambda: len(line_of(topology)) == 3, 300, "all three in line")
        first, second, third = (topology.replica(r) for r in line_of(topology))
        topology.wait_for(lambda: first.status().leader, 60, f"{first.replica_id} to lead")
        # Only now, warm-ups done (they run the row function too): the leader's calls wait on a socket, the next
        # in line's ignore signals, the last in line's are healthy.
        hang[first.replica_id].write_text(f"socket 127.0.0.1:{listener.getsockname()[1]}\n")
        hang[second.replica_id].write_text("native\n")
        for i in range(20):
            _land(topology, f"part-{i:03d}.jsonl", [{"id": f"{i}-{j}", "key": f"k{j % 4}", "seq": i * 10 + j,
                                                      "ts": 0, "payload": {"n": j}} for j in range(10)], order=i)
        landed_at = time.monotonic()
        assert first.process is not None and first.process.wait(timeout=120) == EXIT_STALLED
        assert second.process is not None and second.process.wait(timeout=120) == EXIT_STALLED
        topology.wait_for(lambda: _drained(topology, 200), 120, "the healthy replica to write everything")
        drained_s = time.monotonic() - landed_at
    finally:
        for path in hang.values():
            path.unlink(missing_ok=True)
        topology.stop()
        listener.close()
    reasons = [next(e for e in replica_events(topology, r.replica_id) if e.get("event") == STALLED)["reason"]
               for r in (first, second)]
    assert reasons == ["no_progress", "no_progress"]
    timeouts = [e for e in replica_events(topology, first.replica_id) if e.get("event") == ROW_FUNCTION_TIMED_OUT]
    assert timeouts, f"{first.replica_id}'s calls should have timed out, not hung"
    assert not [e for e in replica_events(topology, third.replica_id) if e.get("event") == STALLED]
    report = verify(topology.data_root)
    assert report.ok and report.ids_written == 200 and report.ids_dead_lettered == 0, report.render()
    # Each hung leader stalls within its first batch's allowance plus the stall timeout (and a few seconds to
    # notice and give the lock up); the healthy replica then writes 200 records in well under a minute.
    bound_s = 2 * (STALL_S + FIRST_BATCH_ALLOWANCE_S + 5) + 60
    assert drained_s < bound_s, f"drained {drained_s:.0f} s after the files landed (bound {bound_s:.0f} s)"


@pytest.mark.fleet
@pytest.mark.timeout(900)
def test_a_poison_batch_is_set_aside_after_max_attempts(tmp_path: Path) -> None:
    """A batch that fails on every leader (the transform raises on a record's poison pill) fails two terms in a
    row, on both replicas; the third term commits it without running it: its file and a manifest go to
    set-aside/, the queue moves on, and verify accounts for the set-aside ids and passes."""
    topology = Topology(tmp_path, replicas=2,
                        spec=FAST | ReplicaSpec(transform="tenure.career.drills:fail_on_poison_pill",
                                                max_batch_attempts=2, max_files_per_trigger=1))
    topology.start()
    try:
        topology.wait_for_leader(300)
        topology.wait_for(lambda: len(line_of(topology)) == 2, 300, "both replicas in line")
        for i in range(6):
            lines: list[dict[str, object]] = [{"id": f"{i}-{j}", "key": f"k{j}", "seq": i * 10 + j, "ts": 0,
                                               "payload": {"n": j}} for j in range(5)]
            if i == 2:
                lines[3]["payload"] = {POISON_PILL: True}
            _land(topology, f"part-{i}.jsonl", lines, order=i)  # one file per batch, in this order
        topology.wait_for(lambda: list((topology.data_root / "set-aside").glob("batch-*-manifest.json")), 240,
                          "the poison batch to be set aside", interval_s=1.0)
        topology.wait_for(lambda: verify(topology.data_root).ids_written == 25, 120, "the other batches")
        set_aside = sum(r.metrics().get(sample_key(f"{BATCHES}_total", outcome="set_aside"), 0.0)
                        for r in topology.replicas)
        assert set_aside == 1.0
        with connected(topology.ensemble.connect_string) as client:
            ended = [t.ended for t in read_history(client, topology.group)]
    finally:
        topology.stop()
    manifest = json.loads(next((topology.data_root / "set-aside").glob("batch-*-manifest.json")).read_text())
    assert manifest["files"] == ["part-2.jsonl"] and manifest["attempts"] == 2 and manifest["records"] == 5
    assert POISON_PILL in manifest["error"]
    report = verify(topology.data_root)
    assert report.ok and report.ids_set_aside == 5 and report.set_aside_batches == 1, report.render()
    assert ended.count("failed") == 2, ended
