"""A leader of several Spark queues frozen (its whole tree, or its JVM alone) or SIGTERMed, on real replicas.

Three Spark replicas share a topic of four queues (2, 1, 1); a producer routes records, repeats and bad lines to
every queue. The replica leading two queues is faulted mid-stream: each of its queues must get a new leader that
commits, and afterwards `tenure verify --zk` finds every queue and the whole exactly once and in order, and each
queue's terms (`tenure history --json --data-root`) committed batch ranges that never overlap. The SIGTERM case
runs in CI (`fleet`); the two freezes are `long` (`make test-long`).
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tenure.career.lifecycle import HANDOVER_RECORDED, STALLED
from tenure.career.output import batch_versions
from tenure.service.local import Topology
from tenure.service.ops import verify
from tenure.service.replica import EXIT_STALLED, GROUP_BALANCED, ReplicaSpec
from tests._replicas import every_replica_in_every_line, queue_commits, queues_led, replica_events, tenure

QUEUES = 4
SESSION_S = 6.0
RECORDS = 6000
#: Deadline of a Spark replica's start-up (a SparkSession, a warm-up run, a seat in every line): about a minute on
#: two idle cores, several when the machine is shared.
WARM_UP_S = 600.0
#: Deadline of draining what a producer left once it finished or was stopped: the backlog a producer builds while
#: replicas warm up on a shared machine takes minutes.
DRAIN_S = 600.0
#: The watchdog's timeouts are the defaults, which a loaded machine's slow Spark calls stay within.
SPEC = ReplicaSpec(career="spark", queues=QUEUES, session_timeout_s=SESSION_S, handover_timeout_s=3.0,
                   failure_backoff_s=0.5, balance_settle_s=2.0)
#: The frozen JVM's test only: a short probe timeout, so that the freeze is found out in seconds.
PROBE_S = 3.0


def _balanced(topology: Topology) -> bool:
    """Every queue led by exactly one replica, the shares 2, 1, 1, and every replica's view of the plan balanced."""
    led = [queues_led(topology, r.replica_id) for r in topology.replicas]
    every = [q for queues in led for q in queues]
    return (sorted(every) == list(range(QUEUES)) and sorted(len(queues) for queues in led) == [1, 1, 2]
            and all(r.metrics().get(GROUP_BALANCED) == 1.0 for r in topology.replicas))


def _committers(topology: Topology) -> dict[int, str | None]:
    """The replica named by each queue's commit record (None before the queue's first commit)."""
    return {q: record.get("replica_id") if record else None for q, record in queue_commits(topology, QUEUES).items()}


def _drained(topology: Topology) -> bool:
    """Every valid record of every queue written, every bad line quarantined."""
    report = verify(topology.data_root)
    return report.ids_in > 0 and report.unaccounted == 0 and report.unquarantined == 0


def _produce(topology: Topology, records: int, rate: float, seed: int) -> None:
    """Start the producer: ``records`` records on 100 keys at ``rate`` lines a second, 2 % repeats, 0.5 % bad
    lines, routed to the topic's four queues."""
    topology.start_producer(["--records", str(records), "--keys", "100", "--rate", str(rate), "--duplicates", "0.02",
                             "--bad", "0.005", "--seed", str(seed), "--queues", str(QUEUES)])


@contextlib.contextmanager
def _three_sharing_four(tmp_path: Path, spec: ReplicaSpec = SPEC) -> Iterator[Topology]:
    """Three Spark replicas of a topic of four queues (``spec``), balanced 2, 1, 1 and all in every queue's line;
    the whole topology stopped afterwards."""
    topology = Topology(tmp_path, replicas=3, spec=spec)
    topology.start()
    try:
        topology.wait_for(lambda: every_replica_in_every_line(topology, QUEUES), WARM_UP_S,
                          "every replica warm and in every line", interval_s=1.0)
        topology.wait_for(lambda: _balanced(topology), WARM_UP_S, "the queues shared 2, 1, 1", interval_s=1.0)
        yield topology
    finally:
        topology.stop()


@contextlib.contextmanager
def _producing(tmp_path: Path, spec: ReplicaSpec = SPEC) -> Iterator[Topology]:
    """Three Spark replicas sharing four queues 2, 1, 1, the producer running and a third of its records written."""
    with _three_sharing_four(tmp_path, spec) as topology:
        _produce(topology, RECORDS, 500, seed=11)
        topology.wait_for(lambda: verify(topology.data_root).ids_written >= RECORDS // 3, 300,
                          f"{RECORDS // 3} ids written", interval_s=1.0)
        yield topology


@pytest.fixture()
def topology(tmp_path: Path) -> Iterator[Topology]:
    """Three Spark replicas sharing four queues 2, 1, 1, the producer running and a third of its records written."""
    with _producing(tmp_path) as topology:
        yield topology


def _leader_of_two(topology: Topology) -> tuple[str, set[int]]:
    """The replica leading two queues, and those queues."""
    led = {r.replica_id: queues_led(topology, r.replica_id) for r in topology.replicas}
    victim = next(r for r, queues in led.items() if len(queues) == 2)
    return victim, led[victim]


def _sigterm(topology: Topology, replica_id: str, led: int) -> int:
    """SIGTERM ``replica_id``, leading ``led`` queues, and wait for its exit code: a handover budget and two seconds
    per queue, then Spark's stop (seconds on a loaded machine)."""
    replica = topology.replica(replica_id)
    replica.signal(signal.SIGTERM)
    assert replica.process is not None
    return replica.process.wait(timeout=led * (topology.handover_timeout_s + 2) + 30)


def _moved_and_committed(topology: Topology, victim: str, queues: set[int]) -> Callable[[], bool]:
    """A poll: each of ``queues`` committed by a replica other than ``victim``."""
    def moved() -> bool:
        committers = _committers(topology)
        return all(committers[q] not in (None, victim) for q in queues)
    return moved


def _audit(topology: Topology, *, stop_producer: bool = False) -> dict[int, list[tuple[int, int, int]]]:
    """Once the producer is done (or, with ``stop_producer``, stopped: its files land whole, a hidden name then a
    rename) and every queue drained: `tenure verify --zk` passes, and each queue's committed batch ranges, by term
    in `tenure history`'s order, never overlap. Returns each queue's (epoch, first batch, last batch) of the terms
    that committed."""
    producer = topology.producer
    assert producer is not None
    if stop_producer:
        producer.terminate()
    topology.wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")
    if not stop_producer:
        assert verify(topology.data_root).ids_in == RECORDS, "the producer wrote every record"
    topology.wait_for(lambda: _drained(topology), DRAIN_S, "every queue to drain", interval_s=2.0)
    zk = topology.ensemble.connect_string
    audit = tenure("verify", "--data-root", str(topology.data_root), "--zk", zk, "--group", topology.group)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    shown = tenure("history", "--zk", zk, "--group", topology.group, "--json", "--data-root", str(topology.data_root))
    assert shown.returncode == 0, shown.stderr
    return committed_ranges(json.loads(shown.stdout)["terms"], topology.data_root)


def committed_ranges(terms: list[dict[str, object]], data_root: Path) -> dict[int, list[tuple[int, int, int]]]:
    """Each queue's committing terms as (epoch, first batch, last batch), in the order `tenure history` lists them,
    from its JSON terms (with ``delta_versions``) and the batch each Delta version of ``table/`` holds; asserts that
    every committed batch is in one term of its own queue and that the ranges of a queue's terms never overlap (a
    later term's first batch above every batch of the terms before it: no two committing epochs at once)."""
    batches = {v.version: (v.queue, v.batch) for v in batch_versions(data_root / "table") if v.batch is not None}
    ranges: dict[int, list[tuple[int, int, int]]] = {}
    claimed: set[int] = set()
    for term in terms:
        queue, epoch, versions = term["queue"], term["epoch"], term["delta_versions"]
        assert isinstance(queue, int) and isinstance(epoch, int) and isinstance(versions, list), term
        if not versions:
            continue
        claimed.update(versions)
        assert {batches[v][0] for v in versions} == {queue}, f"epoch {epoch} of queue {queue} wrote {versions}"
        numbers = sorted(batches[v][1] for v in versions)
        assert len(set(numbers)) == len(numbers), f"queue {queue}, epoch {epoch}: a batch in two versions {numbers}"
        before = ranges.setdefault(queue, [])
        assert not before or numbers[0] > before[-1][2], f"queue {queue}: epoch {epoch}'s batches {numbers} " \
                                                         f"overlap an earlier term's {before}"
        before.append((epoch, numbers[0], numbers[-1]))
    assert claimed == set(batches), f"versions of no term: {sorted(set(batches) - claimed)}"
    return ranges


@pytest.mark.fleet
@pytest.mark.timeout(1500)
def test_a_sigtermed_leader_of_two_queues_hands_each_over_cleanly(topology: Topology) -> None:
    """SIGTERM on the replica leading two of four queues mid-stream: it records a clean handover of each, exits 0,
    the other replicas lead and commit both queues, and the audit is clean, per queue and as a whole, each queue's
    terms committing batch ranges that never overlap."""
    victim_id, queues = _leader_of_two(topology)
    before = len(replica_events(topology, victim_id))  # the balance's moves before the fault recorded handovers too
    assert _sigterm(topology, victim_id, len(queues)) == 0
    recorded = {e["queue"]: e["clean"] for e in replica_events(topology, victim_id)[before:]
                if e.get("event") == HANDOVER_RECORDED}
    assert recorded == dict.fromkeys(queues, True), recorded
    topology.wait_for(_moved_and_committed(topology, victim_id, queues), 60, "both its queues committed by others")
    ranges = _audit(topology)
    assert all(len(ranges[q]) >= 2 for q in queues), ranges


@pytest.mark.long
@pytest.mark.timeout(1500)
def test_a_leader_of_two_queues_frozen_whole_past_its_session_is_fenced_and_follows(topology: Topology) -> None:
    """SIGSTOP the whole tree (Python and its JVM) of the replica leading two of four queues, past the session
    timeout: each of its queues gets a new leader that commits. SIGCONT: whatever the thawed replica tries to
    commit is fenced (no version of its epochs after its successors' in the table), it rejoins every queue's line
    as a follower, and the audit is clean, each queue's terms committing batch ranges that never overlap."""
    victim_id, queues = _leader_of_two(topology)
    victim = topology.replica(victim_id)
    assert victim.pause(), "the replica has a process tree to freeze"
    topology.wait_for(_moved_and_committed(topology, victim_id, queues), SESSION_S + 60,
                      "both its queues committed by others while it is frozen")
    victim.resume()
    topology.wait_for(lambda: every_replica_in_every_line(topology, QUEUES), WARM_UP_S,
                      "the thawed replica back in every line", interval_s=1.0)
    assert victim.alive
    ranges = _audit(topology)
    assert all(len(ranges[q]) >= 2 for q in queues), ranges


@pytest.mark.long
@pytest.mark.timeout(1500)
def test_a_leader_of_two_queues_whose_jvm_freezes_gives_both_up(tmp_path: Path) -> None:
    """SIGSTOP only the Spark JVM (and its Python workers) of the replica leading two of four queues: its Python
    side keeps the ZooKeeper session, so the watchdog must give the queues up — the JVM does not answer, a stall
    that cannot be contained to one queue, so the replica stops (exit 4, ``stalled``) and gives every queue up at
    once. Both queues get new leaders that commit, and the audit is clean, each queue's terms committing batch
    ranges that never overlap."""
    with _producing(tmp_path, SPEC | ReplicaSpec(probe_timeout_s=PROBE_S)) as topology:
        victim_id, queues = _leader_of_two(topology)
        victim = topology.replica(victim_id)
        assert victim.freeze_spark(), "the replica has a Spark JVM to freeze"
        frozen_at = time.monotonic()
        assert victim.process is not None and victim.process.wait(timeout=60) == EXIT_STALLED
        gave_up_s = time.monotonic() - frozen_at
        stalled = [e for e in replica_events(topology, victim_id) if e.get("event") == STALLED]
        assert stalled and stalled[0]["reason"] == "spark_unresponsive", stalled
        topology.wait_for(_moved_and_committed(topology, victim_id, queues), 60,
                          "both its queues committed by others")
        ranges = _audit(topology)
    assert all(len(ranges[q]) >= 2 for q in queues), ranges
    # Its next call into Spark misses the probe's deadline: one probe and a control loop's turn.
    assert gave_up_s < PROBE_S + 15, f"the frozen JVM's replica gave up {gave_up_s:.1f} s after the freeze"


def _commit_batches(topology: Topology) -> dict[int, int]:
    """Each queue's committed batch, from its commit record (-1 before its first commit)."""
    return {q: int(record["batch_id"]) if record and record.get("batch_id") is not None else -1
            for q, record in queue_commits(topology, QUEUES).items()}


def _history(topology: Topology) -> dict[int, list[tuple[int, str]]]:
    """Each queue's terms as (epoch, replica), oldest first, from `tenure history --json`."""
    shown = tenure("history", "--zk", topology.ensemble.connect_string, "--group", topology.group, "--json")
    assert shown.returncode == 0, shown.stderr
    terms: dict[int, list[tuple[int, str]]] = {q: [] for q in range(QUEUES)}
    for term in json.loads(shown.stdout)["terms"]:
        terms[term["queue"]].append((term["epoch"], term["replica_id"]))
    return terms


def _all_advanced(topology: Topology, before: dict[int, int]) -> Callable[[], bool]:
    """A poll: every queue's committed batch past ``before``'s."""
    return lambda: all(batch > before[q] for q, batch in _commit_batches(topology).items())


@pytest.mark.long
@pytest.mark.timeout(2400)
def test_a_replica_joining_two_that_lead_two_queues_each_takes_one_and_no_queue_has_two_writers(
        tmp_path: Path) -> None:
    """Two Spark replicas lead two of four queues each, the producer running; a third joins: once it is warm the
    balance moves one queue to it (2, 1, 1), the others stay where they were (their terms unchanged), the moved
    queue's last term is the newcomer's and its commit record names it, and no queue ever had two committing
    epochs: each queue's terms committed batch ranges that never overlap, in the history's order. The audit is
    clean."""
    topology = Topology(tmp_path, replicas=3, spec=SPEC)
    first, second, third = topology.replicas
    topology.make_dirs()
    topology.ensemble.start()
    try:
        first.start()
        second.start()
        topology.wait_for(lambda: sorted(len(queues_led(topology, r.replica_id)) for r in (first, second)) == [2, 2]
                          and all(r.metrics().get(GROUP_BALANCED) == 1.0 for r in (first, second)), WARM_UP_S,
                          "two queues each", interval_s=1.0)
        _produce(topology, 100 * RECORDS, 30, seed=13)  # until stopped
        topology.wait_for(_all_advanced(topology, dict.fromkeys(range(QUEUES), -1)), 120, "every queue committing")
        before = _history(topology)
        third.start()
        topology.wait_for(lambda: _balanced(topology), WARM_UP_S, "the queues shared 2, 1, 1", interval_s=1.0)
        (moved,) = queues_led(topology, third.replica_id)
        topology.wait_for(lambda: _commit_batches(topology)[moved] >= 0
                          and _committers(topology)[moved] == third.replica_id, 60, "the newcomer to commit")
        after = _history(topology)
        ranges = _audit(topology, stop_producer=True)
    finally:
        topology.stop()
    assert {q: terms for q, terms in after.items() if q != moved} == {
        q: terms for q, terms in before.items() if q != moved}, (before, after)
    assert after[moved][:len(before[moved])] == before[moved] and after[moved][-1][1] == third.replica_id, after
    assert [epoch for epoch, _, _ in ranges[moved]][-1] == after[moved][-1][0], ranges


@pytest.mark.long
@pytest.mark.timeout(3600)
def test_a_rolling_restart_of_every_replica_keeps_every_queue_committing(tmp_path: Path) -> None:
    """Restart each of the three Spark replicas sharing four queues in turn — SIGTERM (it exits 0), start it again,
    wait until it is back in every queue's line — with the producer running throughout: after each restart every
    queue has committed again, and once the producer stops the audit is clean, each queue's terms committing batch
    ranges that never overlap."""
    with _three_sharing_four(tmp_path) as topology:
        _produce(topology, 100 * RECORDS, 30, seed=17)  # until stopped
        _restart_each(topology)
        ranges = _audit(topology, stop_producer=True)
    assert all(ranges[q] for q in range(QUEUES)), ranges


def _restart_each(topology: Topology) -> None:
    """SIGTERM each replica in turn (it must exit 0), start it again and wait until it is back in every line and
    every queue has committed since it was stopped."""
    for replica_id in [r.replica_id for r in topology.replicas]:
        before = _commit_batches(topology)
        assert _sigterm(topology, replica_id, len(queues_led(topology, replica_id))) == 0
        topology.restart(replica_id)
        topology.wait_for(lambda: every_replica_in_every_line(topology, QUEUES), WARM_UP_S,
                          f"{replica_id} back in every line", interval_s=1.0)
        topology.wait_for(_all_advanced(topology, before), 120, f"every queue committing after {replica_id}'s restart")
