"""The runner in-process against the shared real ensemble: ZooKeeper failures around a term, stale events.

Each test drives a real ``Runner`` with a real ``Election`` (its own kazoo client) and the counter career on
a thread of the test process. The only seams are test subclasses: an ``Election`` whose handover calls fail
on demand, and a gate between the election and the runner's queue that holds events back, as a busy control
thread would.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tenure.career import BatchFailed, CareerContext, CareerObserver, HandoverRecord
from tenure.career._counter import CounterCareer
from tenure.career.lifecycle import (
    BACKING_OFF,
    BATCH_ATTEMPT_FAILED,
    CAREER_FAILED,
    HANDED_OVER,
    HANDOVER_RECORD_NOT_WRITTEN,
    INAUGURATION_ABANDONED,
    RUNNER_STATE,
    STALE_ELECTED_IGNORED,
    ReplicaState,
    Runner,
    RunnerSettings,
    SeatState,
)
from tenure.election import (
    Elected,
    Election,
    ElectionEvent,
    GroupPaths,
    Identity,
    OperatorRequests,
    Revoked,
    TermHistory,
)
from tenure.errors import CommitOutcomeUnknown, NotLeader, Unresponsive, ZooKeeperUnavailable
from tenure.service.local import wait_for
from tenure.service.replica import Metrics
from tenure.service.replica._lifecycle import build_runner
from tenure.service.replica._progress import ProgressClock
from tenure.service.replica._watchdog import WatchdogSettings

SESSION_S = 3.0


class _FlakyElection(Election):
    """An election whose ``read_handover``/``write_handover`` first raise the errors queued for them (the errors the
    election's public calls raise: the product's, ``tests/test_election_boundary.py`` shows ZooKeeper's are mapped)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_faults: list[BaseException] = []
        self.write_faults: list[BaseException] = []

    def read_handover(self) -> HandoverRecord | None:
        if self.read_faults:
            raise self.read_faults.pop(0)
        return super().read_handover()

    def write_handover(self, record: HandoverRecord) -> None:
        if self.write_faults:
            raise self.write_faults.pop(0)
        super().write_handover(record)


class _RecordingCounter(CounterCareer):
    """The counter career, keeping every context it was inaugurated with."""

    def __init__(self, path: Path, observer: CareerObserver) -> None:
        super().__init__(path, interval_s=0.05, observer=observer)
        self.contexts: list[CareerContext] = []
        self.poison: BatchFailed | None = None  # raised by every execute() while set
        self.sick: str | None = None  # what unhealthy() says while set
        self.cannot_start: Unresponsive | None = None  # raised by the next inaugurate(), once

    def execute(self) -> bool:
        if self.poison is not None:
            raise self.poison
        return super().execute()

    def unhealthy(self) -> str | None:
        return self.sick or super().unhealthy()

    def inaugurate(self, ctx: CareerContext) -> None:
        self.contexts.append(ctx)
        if self.cannot_start is not None:
            error, self.cannot_start = self.cannot_start, None
            raise error
        super().inaugurate(ctx)


@dataclass
class _Gate:
    """Between the election and the runner's queue: while closed, events are held back in order."""

    is_open: bool = True
    post: Callable[[ElectionEvent], None] | None = None
    held: list[ElectionEvent] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: ElectionEvent) -> None:
        with self.lock:
            if not self.is_open:
                self.held.append(event)
                return
        assert self.post is not None
        self.post(event)

    def open(self, events: list[ElectionEvent]) -> None:
        """Deliver ``events`` (instead of what was held), then let everything through."""
        assert self.post is not None
        with self.lock:
            for event in events:
                self.post(event)
            self.held.clear()
            self.is_open = True


@dataclass
class _Harness:
    runner: Runner
    election: _FlakyElection
    career: _RecordingCounter
    gate: _Gate
    logs: list[MutableMapping[str, Any]]
    counter_log: Path
    thread: threading.Thread
    outcome: list[object] = field(default_factory=list)  # run()'s exit code, or what it raised

    def died(self) -> bool:
        return not self.thread.is_alive() and bool(self.outcome) and isinstance(self.outcome[0], BaseException)

    def leading(self) -> bool:
        assert not self.died(), f"the runner died: {self.outcome[0]!r}"
        return self.runner.seat_state() is SeatState.LEADING

    def events(self, name: str) -> list[MutableMapping[str, Any]]:
        return [e for e in list(self.logs) if e.get("event") == name]

    def counter_lines(self) -> list[tuple[int, int]]:
        if not self.counter_log.exists():
            return []
        return [(int(e), int(n)) for e, n in (line.split(",") for line in self.counter_log.read_text().splitlines())]

    def stop(self) -> object:
        self.runner.request_stop("SIGTERM")
        self.thread.join(SESSION_S + 10)
        assert not self.thread.is_alive(), "the runner did not stop"
        return self.outcome[0]


@pytest.fixture()
def harness(zk_hosts: str, zk_group: str, tmp_path: Path) -> Iterator[Callable[..., _Harness]]:
    """Builds and starts one in-process runner (gate open or closed); stops it and its client afterwards. Its
    batches are set aside on their count alone unless ``set_aside_after_s`` is given."""
    made: list[_Harness] = []
    clients: list[KazooClient] = []

    def make(*, gate_open: bool = True, read_faults: tuple[BaseException, ...] = (),
             write_faults: tuple[BaseException, ...] = (), set_aside_after_s: float = 0.0) -> _Harness:
        client = KazooClient(hosts=zk_hosts, timeout=SESSION_S)
        client.start(timeout=15)
        clients.append(client)
        gate = _Gate(is_open=gate_open)
        elections: list[_FlakyElection] = []

        def election_factory(_queue: int, post: Callable[[ElectionEvent], None]) -> Election:
            gate.post = post
            election = _FlakyElection(client, group=zk_group, identity=Identity.local("r1"), on_event=gate,
                                      session_timeout_s=SESSION_S, op_timeout_s=SESSION_S / 2)
            election.read_faults.extend(read_faults)
            election.write_faults.extend(write_faults)
            elections.append(election)
            return election

        metrics = Metrics(CollectorRegistry(), replica_id="r1", group=zk_group, default_collectors=False)
        counter_log = tmp_path / "counter.log"
        progress = ProgressClock(metrics)
        career = _RecordingCounter(counter_log, progress.queue(0))
        runner, _control = build_runner(election_factory, career, [career], metrics,
                                        RunnerSettings(replica_id="r1", handover_timeout_s=2.0, idle_backoff_s=0.02,
                                                       failure_backoff_s=0.5, tick_s=0.05,
                                                       set_aside_after_s=set_aside_after_s),
                                        watchdog=WatchdogSettings(), progress=progress,
                                        requests=OperatorRequests(client, zk_group, timeout_s=SESSION_S / 2),
                                        histories=[TermHistory(client, zk_group, timeout_s=SESSION_S / 2)])
        outcome: list[object] = []

        def run() -> None:
            try:
                outcome.append(runner.run())
            except BaseException as exc:  # the process would die here: keep it for the assertion
                outcome.append(exc)

        thread = threading.Thread(target=run, name="test-runner", daemon=True)
        h = _Harness(runner, elections[0], career, gate, logs, counter_log, thread, outcome)
        made.append(h)
        thread.start()
        return h

    with capture_logs() as logs:  # for the whole test: structlog captures only while this is open
        yield make
        for h in made:
            if h.thread.is_alive():
                if not h.gate.is_open:
                    h.gate.open([])
                h.stop()
    for client in clients:
        client.stop()
        client.close()


@pytest.mark.parametrize(
    ("where", "fault"),
    [
        ("write", CommitOutcomeUnknown("injected: connection lost while writing; outcome unknown")),
        ("read", ZooKeeperUnavailable("injected: ZooKeeper did not answer (ConnectionLoss)")),
        ("read", NotLeader("injected: suspended while inaugurating")),
    ],
    ids=["write-CommitOutcomeUnknown", "read-ZooKeeperUnavailable", "read-NotLeader"],
)
def test_zookeeper_failure_at_inauguration_rejoins_then_leads(harness: Callable[..., _Harness], where: str,
                                                              fault: BaseException) -> None:
    """A ZooKeeper error from the handover record at inauguration: no term, node released, back in line,
    elected again, commits; no career failure, no back-off, the process lives."""
    h = harness(**{f"{where}_faults": (fault,)})
    wait_for(h.leading, 20, "the runner to lead after the failed inauguration")
    abandoned = h.events(INAUGURATION_ABANDONED)
    assert len(abandoned) == 1 and type(fault).__name__ in abandoned[0]["reason"]
    assert not h.events(CAREER_FAILED) and not h.events(BACKING_OFF)
    assert len(h.career.contexts) == 1, "the career began one term, after the rejoin"
    ctx = h.career.contexts[0]
    assert ctx.epoch > abandoned[0]["epoch"], "the term runs on a new node, not the abandoned one"
    assert ctx.epoch == ctx.fence.epoch == h.election.epoch
    wait_for(lambda: len(h.counter_lines()) >= 3, 10, "commits of the new term")
    assert {e for e, _ in h.counter_lines()} == {ctx.epoch}
    assert h.stop() == 0


def test_failed_handover_record_at_stop_still_releases(harness: Callable[..., _Harness], zk_client: KazooClient,
                                                       zk_group: str) -> None:
    """SIGTERM while the handover record cannot be written: logged, the node is released, exit code 0."""
    h = harness()
    wait_for(h.leading, 20, "the runner to lead")
    wait_for(lambda: len(h.counter_lines()) >= 2, 10, "commits")
    h.election.write_faults.append(ZooKeeperUnavailable("injected: ZooKeeper did not answer (ConnectionLoss)"))
    assert h.stop() == 0
    not_written = h.events(HANDOVER_RECORD_NOT_WRITTEN)
    assert len(not_written) == 1 and "ConnectionLoss" in not_written[0]["reason"]
    assert h.events(HANDED_OVER)
    assert zk_client.get_children(f"/tenure/{zk_group}/election") == []


@pytest.mark.parametrize("revoked_delivered", [True, False], ids=["in-order", "revoked-lost"])
def test_stale_elected_is_ignored_and_term_is_tied_to_its_epoch(
        harness: Callable[..., _Harness], zk_client: KazooClient, revoked_delivered: bool) -> None:
    """Elected(e1) reaches the runner only after the election lost e1 and won e2: it is ignored, the term
    runs at e2 with e2's fence, and a context's still_leading() is False once its term is over."""
    h = harness(gate_open=False)
    e1 = wait_for(lambda: h.election.epoch, 20, "the election to win a first term")
    assert e1 is not None
    node1 = h.election.node
    assert node1 is not None
    zk_client.delete(node1)  # the election sees its node go, revokes e1 and wins again with a new node
    e2 = wait_for(lambda: h.election.epoch not in (None, e1) and h.election.epoch, 20, "a second term")
    assert e2 is not None
    wait_for(lambda: any(isinstance(e, Elected) and e.epoch == e2 for e in list(h.gate.held)), 5, "Elected(e2)")
    terms = [e for e in h.gate.held if isinstance(e, Elected | Revoked)]
    assert terms == [Elected(e1), Revoked(e1, "node deleted"), Elected(e2)]
    h.gate.open([e for e in h.gate.held if revoked_delivered or not isinstance(e, Revoked)])

    wait_for(lambda: h.leading() and len(h.counter_lines()) >= 3, 20, "the runner to lead and commit")
    assert [(c.epoch, c.fence.epoch) for c in h.career.contexts] == [(e2, e2)], \
        "a term began with an epoch other than its fence's"
    assert h.runner.health().epoch == e2 and h.runner.health().leader
    assert {e for e, _ in h.counter_lines()} == {e2}
    assert [e["epoch"] for e in h.events(STALE_ELECTED_IGNORED)] == [e1]

    # The term's still_leading() answers for that term only: once e2 is over it stays False, although this
    # very election leads again at e3.
    ctx2 = h.career.contexts[0]
    assert ctx2.still_leading()
    node2 = h.election.node
    assert node2 is not None
    zk_client.delete(node2)
    wait_for(lambda: h.leading() and len(h.career.contexts) == 2, 20, "the runner to lead at a third epoch")
    ctx3 = h.career.contexts[1]
    assert ctx3.epoch == ctx3.fence.epoch == h.election.epoch and ctx3.epoch > e2
    assert ctx3.still_leading()
    assert not ctx2.still_leading(), "the old term's context still says it leads"
    assert h.stop() == 0


def _failed_batch(client: KazooClient, group: str) -> tuple[int, int] | None:
    data, _ = client.get(GroupPaths(group).handover)
    failed = HandoverRecord.from_json(json.loads(data)).failed_batch
    return None if failed is None else (failed.batch_id, failed.attempts)


def test_a_batch_failing_term_after_term_is_counted_and_handed_to_the_term_that_sets_it_aside(
        harness: Callable[..., _Harness], zk_client: KazooClient, zk_group: str) -> None:
    """A batch that fails by itself counts one attempt per term in the handover record, across terms; once
    ``max_batch_attempts`` (3) terms failed on it, the next term's context names it to be set aside."""
    h = harness()
    wait_for(h.leading, 20, "the runner to lead")
    h.career.poison = BatchFailed(7, "batch 7 failed: ValueError: a poison pill")
    wait_for(lambda: len(h.career.contexts) >= 4, 30, "three failed terms and a fourth")
    h.career.poison = None
    assert [ctx.set_aside for ctx in h.career.contexts[:3]] == [None, None, None]
    last = h.career.contexts[3].set_aside
    assert last is not None and (last.batch_id, last.attempts) == (7, 3) and "poison pill" in last.error
    assert [e["attempts"] for e in h.events(BATCH_ATTEMPT_FAILED)][:3] == [1, 2, 3]
    assert h.stop() == 0


def test_a_batch_failing_for_less_than_its_span_is_not_set_aside(
        harness: Callable[..., _Harness], zk_client: KazooClient, zk_group: str) -> None:
    """With ``set_aside_after_s`` at 600 s, a batch that fails four terms in a few seconds — more than
    ``max_batch_attempts`` (3) — names nothing to set aside: an outage of seconds is not poison. The handover
    record carries how long it has been failing, which grows term by term with the failure back-off."""
    h = harness(set_aside_after_s=600.0)
    wait_for(h.leading, 20, "the runner to lead")
    h.career.poison = BatchFailed(7, "batch 7 failed: TimeoutError: the lookup did not answer")
    wait_for(lambda: len(h.career.contexts) >= 5, 30, "four failed terms and a fifth")
    h.career.poison = None
    assert all(ctx.set_aside is None for ctx in h.career.contexts)
    spans = [e["failing_s"] for e in h.events(BATCH_ATTEMPT_FAILED)][:4]
    assert spans[0] == 0.0 and spans == sorted(spans) and 0.5 + 1.0 + 2.0 <= spans[3] < 60.0, spans
    assert h.stop() == 0


def test_a_batch_failing_while_the_storage_is_down_counts_no_attempt(
        harness: Callable[..., _Harness], zk_client: KazooClient, zk_group: str) -> None:
    """The same failure while the career reports itself unhealthy (a full disk, say) is the infrastructure's:
    no attempt is counted against the batch, the replica leaves the election without back-off, and no good data
    could be set aside because a disk filled up."""
    h = harness()
    wait_for(h.leading, 20, "the runner to lead")
    h.career.sick = "data root /srv has 3 MiB free, below the 512 MiB minimum (--min-free-disk-mb)"
    h.career.poison = BatchFailed(7, "batch 7 failed: OSError: No space left on device")
    wait_for(lambda: h.runner.state is ReplicaState.UNHEALTHY, 20, "the runner to leave the election")
    assert not h.events(BATCH_ATTEMPT_FAILED) and not h.events(BACKING_OFF)
    assert _failed_batch(zk_client, zk_group) is None
    h.career.poison = h.career.sick = None
    wait_for(h.leading, 20, "the runner to lead again once healthy")
    assert all(ctx.set_aside is None for ctx in h.career.contexts)
    assert h.stop() == 0


def test_elected_while_spark_cannot_start_gives_the_lock_back_and_rejoins_when_healthy(
        harness: Callable[..., _Harness], zk_client: KazooClient, zk_group: str) -> None:
    """Elected while its Spark does not start in time (inaugurate raises Unresponsive): the replica gives the lock
    back at once instead of holding a term nobody works for, waits out of the line as unhealthy (no career
    failure, no back-off), and rejoins and leads once its health check passes."""
    h = harness(gate_open=False)
    h.career.cannot_start = Unresponsive("starting Spark did not answer within 120 s")
    h.gate.open([])
    wait_for(lambda: bool(h.events(INAUGURATION_ABANDONED)), 20, "the inauguration to be abandoned")
    abandoned = h.events(INAUGURATION_ABANDONED)[0]
    assert "starting Spark did not answer" in abandoned["reason"]
    wait_for(lambda: any(e.get("new") == ReplicaState.UNHEALTHY.value for e in h.events(RUNNER_STATE)), 10,
             "the unhealthy state, logged just after the abandonment")
    wait_for(h.leading, 20, "the runner to rejoin and lead once healthy")
    assert h.career.contexts[-1].epoch > abandoned["epoch"], "it leads on a new node, the first was given back"
    assert not h.events(CAREER_FAILED) and not h.events(BACKING_OFF)
    wait_for(lambda: len(h.counter_lines()) >= 3, 10, "commits of the new term")
    assert h.stop() == 0
