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
import subprocess
import sys
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


SPAN_S = 30.0  # --set-aside-after-s here: a batch failing for less is not set aside, whatever its attempts


def _files(topology: Topology, first: int, pill: Path) -> None:
    """Three queue files of 5 records (keys k0–k4, seq 10·i + j), one batch each; the middle one's record 3 holds
    the poison pill naming ``pill``: its batch fails while that file exists."""
    for i in range(first, first + 3):
        lines: list[dict[str, object]] = [{"id": f"{i}-{j}", "key": f"k{j}", "seq": i * 10 + j, "ts": 0,
                                           "payload": {"n": j}} for j in range(5)]
        if i == first + 1:
            lines[3]["payload"] = {POISON_PILL: str(pill)}
        _land(topology, f"part-{i}.jsonl", lines, order=i)


def _failed_terms(topology: Topology) -> int:
    with connected(topology.ensemble.connect_string) as client:
        return [t.ended for t in read_history(client, topology.group)].count("failed")


@pytest.mark.fleet
@pytest.mark.timeout(900)
def test_an_outage_sets_nothing_aside_and_a_poison_record_is_split_out_and_replayed(tmp_path: Path) -> None:
    """One Spark replica whose transform fails a batch while a flag file exists. (1) A failure that lasts three
    terms — more than --max-batch-attempts 2, less than --set-aside-after-s — sets nothing aside: once the flag goes
    the batch is written whole. (2) One that lasts is split once it has failed 2 terms for 30 s: only the failing
    record is set aside, the rest of its batch and the later batches are written. (3) The cause fixed, `tenure
    replay` has the next batch write the record, past its key's order: verify is clean."""
    outage, poison = tmp_path / "outage", tmp_path / "poison"
    topology = Topology(tmp_path, replicas=1,
                        spec=FAST | ReplicaSpec(transform="tenure.career.drills:fail_on_poison_pill",
                                                max_batch_attempts=2, set_aside_after_s=SPAN_S,
                                                max_files_per_trigger=1))
    topology.start()
    try:
        topology.wait_for_leader(300)
        outage.touch()
        _files(topology, 0, outage)
        topology.wait_for(lambda: _failed_terms(topology) >= 3, 120, "three failed terms", interval_s=0.5)
        outage.unlink()
        topology.wait_for(lambda: verify(topology.data_root).ids_written == 15, 120, "the first files written")
        assert not (topology.data_root / "set-aside").exists(), "an outage of three terms set a batch aside"
        failed_before = _failed_terms(topology)

        poison.touch()
        _files(topology, 3, poison)
        topology.wait_for(lambda: list((topology.data_root / "set-aside").glob("batch-*-manifest.json")), 240,
                          "the poison batch to be split", interval_s=1.0)
        topology.wait_for(lambda: verify(topology.data_root).ids_written == 29, 120, "the rest written")
        split = verify(topology.data_root)
        set_aside = sum(r.metrics().get(sample_key(f"{BATCHES}_total", outcome="set_aside"), 0.0)
                        for r in topology.replicas)
        poison.unlink()
        manifest = json.loads(next((topology.data_root / "set-aside").glob("batch-*-manifest.json")).read_text())
        replayed = subprocess.run([sys.executable, "-m", "tenure", "replay", "--data-root", str(topology.data_root),
                                   "--batch", str(manifest["batch_id"])],
                                  capture_output=True, text=True, timeout=60, check=False)
        assert replayed.returncode == 0, replayed.stderr
        topology.wait_for(lambda: verify(topology.data_root).ids_replayed == 1, 120, "the replay written")
        failed_after = _failed_terms(topology)
    finally:
        topology.stop()
    assert manifest["split"] and manifest["files"] == ["part-4.jsonl"] and manifest["lines"] == {"part-4.jsonl": [4]}
    assert manifest["records"] == 1 and manifest["failing_s"] >= SPAN_S and POISON_PILL in manifest["error"]
    assert split.ok and split.ids_set_aside == 1 and split.set_aside_batches == 1, split.render()
    assert set_aside == 1.0 and failed_before >= 3 and failed_after > failed_before
    report = verify(topology.data_root)
    assert report.ok and report.ids_written == report.ids_in == 30, report.render()
    assert report.ids_replayed == 1 and report.ids_set_aside == 0 and report.inversions == 0, report.render()
