"""Calls that may hang run under a deadline (``career.Probe``, ``call_within``, ``StorageHealth``), and the
progress clock the watchdog reads (``ProgressClock``): their pure logic, with real threads and a fake clock."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tenure.career import FailedBatch, HandoverRecord, Probe, StorageHealth, call_within
from tenure.career.lifecycle._attempts import BatchAttempts
from tenure.errors import Unresponsive
from tenure.service.local import wait_for
from tenure.service.replica import Metrics
from tenure.service.replica._progress import ProgressClock
from tenure.service.replica._watchdog import WatchdogSettings, find_stall


def test_call_within_returns_raises_or_abandons() -> None:
    """A call's value or its own error comes back as is; one that does not answer raises Unresponsive at the
    deadline, not when the call returns."""
    assert call_within(lambda: 42, 1.0, "answer") == 42
    with pytest.raises(KeyError):
        call_within(lambda: {}["x"], 1.0, "lookup")
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(Unresponsive, match=r"the frozen call did not answer within 0\.2 s"):
        call_within(release.wait, 0.2, "the frozen call")
    assert time.monotonic() - started < 2
    release.set()


def test_a_stuck_probe_fails_every_later_call_at_once_until_it_returns() -> None:
    """One helper thread: while a call is stuck, later calls do not queue behind it (a frozen JVM costs one
    thread, not one per health check); they fail at once with how long it has waited, and once the stuck call
    returns the probe works again."""
    probe = Probe("Spark's JVM", timeout_s=0.2)
    assert probe(lambda: "ok") == "ok" and probe.stuck_for is None
    release = threading.Event()
    with pytest.raises(Unresponsive, match=r"did not answer within 0\.2 s"):
        probe(release.wait)
    assert probe.stuck_for is not None and probe.stuck_for >= 0.2
    started = time.monotonic()
    with pytest.raises(Unresponsive, match=r"has not answered for \d+ s \(a call is still waiting\)"):
        probe(lambda: "never run")
    assert time.monotonic() - started < 0.1, "a call behind a stuck one must fail at once"
    release.set()
    wait_for(lambda: probe.stuck_for is None, 5, "the stuck call to return", interval_s=0.01)
    assert probe(lambda: "again") == "again"


def test_storage_health_reports_a_hung_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A storage probe that hangs (a dead NFS mount) makes the storage unhealthy at the deadline, with a reason
    that says so; a writable folder is healthy and a full one is not."""
    # A healthy probe's deadline is the machine's: CI on a starved disk once took over 0.3 s to write and sync one.
    health = StorageHealth([tmp_path], min_free_bytes=0, timeout_s=30)
    assert health.problem() is None
    assert "below the" in (StorageHealth([tmp_path], min_free_bytes=1 << 62, timeout_s=1).problem() or "")
    release = threading.Event()
    import tenure.career._health as module

    monkeypatch.setattr(module, "storage_problem", lambda folder, min_free: release.wait())
    hung = StorageHealth([tmp_path], min_free_bytes=0, timeout_s=0.3)
    reason = hung.problem()
    assert reason is not None and "did not answer within 0.3 s" in reason and "hung file system" in reason
    assert "still waiting" in (hung.problem() or "")
    release.set()


def test_the_handover_record_carries_the_failing_batch_count() -> None:
    """The count of terms a batch failed in a row survives the record's JSON round trip, grows on the same
    batch, starts over on another, and keeps the error short."""
    first = FailedBatch(7, 0, "").again(7, "ValueError: bad", 0.0)
    assert first == FailedBatch(7, 1, "ValueError: bad")
    assert first.again(7, "x" * 900, 3.0).attempts == 2 and len(first.again(7, "x" * 900, 3.0).error) == 500
    assert first.again(8, "other", 3.0) == FailedBatch(8, 1, "other", 0.0)
    record = HandoverRecord(5, 6, False, 1.0, "r1", reason="stalled: …",
                            failed_batch=first.again(7, "again", 12.5, split_failed=True))
    assert HandoverRecord.from_json(record.to_json()) == record
    old = {"epoch": 3, "last_batch": None, "clean": True, "at": 2.0, "replica_id": "r2"}  # written by older code
    assert HandoverRecord.from_json(old).failed_batch is None


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_batch_is_set_aside_after_its_attempts_and_its_span_measured_without_wall_clocks() -> None:
    """Two replicas fail one batch in turn, each term failing after 2 s and the next beginning 15 s later: the
    attempts reach 3 by the third term, but the batch is set aside only once it has failed for 60 s, as measured
    by the replicas' own monotonic clocks (far apart here: no clock is compared with another), carried in the
    handover record; a term told to set it aside that fails on it too marks it ``split_failed``."""
    clocks = [_Clock(), _Clock()]
    clocks[1].now = 5.0  # another host's monotonic clock: unrelated to the first's
    replicas = [BatchAttempts(f"r{i}", max_attempts=3, min_failing_s=60.0, clock=clock)
                for i, clock in enumerate(clocks)]
    record: HandoverRecord | None = None
    spans: list[float] = []
    for term in range(12):
        attempts = replicas[term % 2]
        attempts.began(record)
        poison = attempts.poison()
        if poison is not None:
            break
        for clock in clocks:
            clock.now += 2.0  # the term fails after 2 s
        failed = attempts.failed(7, "lookup timed out")
        spans.append(failed.failing_s)
        record = attempts.record(term, clean=False, last_batch=None, reason="failed")
        for clock in clocks:
            clock.now += 15.0  # until the next term
    # The batch first failed 2 s in; term 4 begins at 68 s, 66 s later: the first to see 60 s of failing (term 3
    # began 49 s after the first failure, with 3 attempts behind it: too early).
    assert term == 4 and poison is not None and 60.0 <= poison.failing_s <= 66.0, spans
    assert poison.attempts == 4 and not poison.split_failed
    assert all(span <= 17.0 * i for i, span in enumerate(spans)), "never more than the real time"
    failed = attempts.failed(7, "still failing")
    assert failed.split_failed and failed.attempts == 5
    assert attempts.record(99, clean=False, last_batch=7, reason=None).failed_batch is None, "committed past it"


def _progress(clock: _Clock) -> ProgressClock:
    metrics = Metrics(CollectorRegistry(), replica_id="r1", group="g", default_collectors=False)
    return ProgressClock(metrics, clock=clock)


def test_progress_owed_only_while_leading_with_input_waiting() -> None:
    """The stall clock runs from the later of: leading began, input began to wait, the last batch that moved
    records on; a batch whose row calls all timed out is no progress, and input stops waiting once drained."""
    clock = _Clock()
    progress = _progress(clock)
    progress.queue(0).backlog(3)
    clock.now += 50
    assert progress.view().stalled_for() == 0.0, "a follower owes nothing"
    progress.working(True, new_term=True)
    clock.now += 10
    assert progress.view().stalled_for() == 10.0
    progress.queue(0).batch_started(4)
    assert progress.view().in_flight == 4
    clock.now += 5
    progress.queue(0).batch_finished("committed", 5.0, {"written": 10})
    assert progress.view().stalled_for() == 0.0 and progress.view().first_batch_done
    clock.now += 20
    progress.queue(0).batch_finished("committed", 1.0, {"retried": 10}, progressed=False)
    clock.now += 20
    assert progress.view().stalled_for() == 40.0, "a batch that moved nothing on is no progress"
    progress.queue(0).backlog(0)
    clock.now += 100
    assert progress.view().stalled_for() == 140.0, "records stuck in the retry store still owe progress"
    progress.queue(0).batch_finished("committed", 1.0, {"written": 10})
    progress.queue(0).backlog(0)
    clock.now += 500
    assert progress.view().stalled_for() == 0.0, "an idle leader with nothing waiting owes nothing"


def test_an_inauguration_gets_its_allowance_and_no_more() -> None:
    """Inside ``inaugurating`` the loop may go quiet up to the watchdog's allowance; after it the liveness timeout
    counts again from its end."""
    clock = _Clock()
    progress = _progress(clock)
    limits = WatchdogSettings(liveness_timeout_s=30.0, first_batch_allowance_s=90.0)
    with progress.inaugurating():
        clock.now += 80
        assert find_stall(progress.view(), limits) is None
        clock.now += 11
        assert find_stall(progress.view(), limits) is not None, "past the allowance"
    assert progress.view().inaugurating_since is None
    clock.now += 30
    assert find_stall(progress.view(), limits) is None
    clock.now += 1
    assert find_stall(progress.view(), limits) is not None
