"""SparkCareer driven directly (no runner) with a real Election fence on the shared ZooKeeper and SparkSession."""

from __future__ import annotations

import json
import os
import queue
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import structlog
from kazoo.client import KazooClient

from tenure.career import BatchFailed, CareerContext, Outcome
from tenure.career.lifecycle import INAUGURATED
from tenure.career.output import batch_versions
from tenure.career.spark import (
    BATCH_COMMITTED,
    BATCH_FAILED,
    BATCH_PROGRESS,
    SparkCareer,
    SparkCareerConfig,
    SparkCareerError,
)
from tenure.career.spark._warmup import KEEP_WARM_GROUP
from tenure.election import Elected, Election, Identity
from tenure.errors import Fenced
from tenure.service.local import wait_for
from tenure.service.ops import VerifyReport, verify
from tests._polling import stays_for

# Spark's start-up (and, here, the warm-up) counts toward the first test: under a loaded CI machine it can
# take minutes, more than the suite-wide 300 s default.
pytestmark = pytest.mark.timeout(900)

MAX_LINE = 200


@dataclass
class Recorder:
    """A CareerObserver that keeps everything it is told."""

    batches: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    commits: list[float] = field(default_factory=list)
    backlogs: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    started: list[int] = field(default_factory=list)
    stuck: list[int] = field(default_factory=list)  # batches that finished without progress (row function stuck)
    lost: list[bool] = field(default_factory=list)  # the queue's lost gauge, as set

    def batch_started(self, batch_id: int) -> None:
        self.started.append(batch_id)

    def batch_finished(self, outcome: str, duration_s: float, records: dict[str, int], *,
                       progressed: bool = True) -> None:
        self.batches.append((outcome, dict(records)))
        if not progressed:
            self.stuck.append(len(self.batches) - 1)

    def commit_finished(self, duration_s: float, committed_at: float) -> None:
        self.commits.append(committed_at)

    def backlog(self, files: int, *, retry_due: bool = False) -> None:
        self.backlogs.append(files)

    def retry_waiting(self, records: int) -> None:
        self.waiting.append(records)

    def queue_lost(self, lost: bool) -> None:
        self.lost.append(lost)

    def outcomes(self) -> list[str]:
        return [outcome for outcome, _ in self.batches]

    def total(self, name: str) -> int:
        return sum(records.get(name, 0) for outcome, records in self.batches if outcome == "committed")


class Queue:
    """Queue files for a data root: complete files renamed into landing/, with rising modification times."""

    def __init__(self, root: Path) -> None:
        self.landing = root / "landing"
        self.landing.mkdir(parents=True, exist_ok=True)
        self.files = 0
        self.seq: dict[str, int] = {}
        self.written: list[bytes] = []

    def record(self, i: int, key: str) -> bytes:
        self.seq[key] = self.seq.get(key, 0) + 1
        body = {"id": f"id-{i}", "key": key, "seq": self.seq[key], "ts": 1_700_000_000_000 + i, "payload": {"i": i}}
        line = json.dumps(body).encode()
        self.written.append(line)
        return line

    def put(self, lines: list[bytes]) -> str:
        """Write one file atomically (hidden name, then rename); files sort by mtime in writing order."""
        self.files += 1
        name = f"q-{self.files:05d}.jsonl"
        hidden = self.landing / f".{name}"
        hidden.write_bytes(b"".join(line + b"\n" for line in lines))
        stamp = time.time() - 1000 + self.files  # distinct, rising: the file source reads oldest first
        os.utime(hidden, (stamp, stamp))
        os.replace(hidden, self.landing / name)
        return name

    def standard(self, files: int, per_file: int = 20, keys: int = 4, start: int = 0) -> None:
        """``files`` files of valid records over ``keys`` keys, each after the first repeating two earlier
        lines, plus one bad line of a different reason each."""
        bad = [b"{not json", b"[1]", b'{"id":"x","key":"k","seq":1.5,"ts":1,"payload":1}', b"", b"z" * 300]
        n = start
        for f in range(files):
            lines = []
            for _ in range(per_file):
                lines.append(self.record(n, f"key-{n % keys}"))
                n += 1
            if f:
                lines.extend(self.written[-per_file - 2:-per_file])  # repeats from the previous file
            lines.append(bad[f % len(bad)])
            self.put(lines)


def landing_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "landing").glob("*.jsonl"))


@contextmanager
def leadership(client: KazooClient, group: str, replica: str) -> Iterator[tuple[Election, CareerContext]]:
    """A real term: join the group's election, wait for Elected, hand out the fence; release at exit."""
    events: queue.Queue[Any] = queue.Queue()
    election = Election(client, group=group, identity=Identity.local(replica), on_event=events.put)
    election.start()

    def elected() -> bool:
        try:
            return isinstance(events.get(timeout=0.1), Elected)
        except queue.Empty:
            return False

    wait_for(elected, 30, f"{replica} to be elected", interval_s=0)
    fence = election.fence()
    ctx = CareerContext(epoch=fence.epoch, fence=fence, still_leading=election.is_leader, previous_handover=None)
    try:
        yield election, ctx
    finally:
        election.close()


def make_config(root: Path, **overrides: Any) -> SparkCareerConfig:
    settings: dict[str, Any] = {"data_root": root, "standby": "cold", "max_files_per_trigger": 2,
                                "trigger_interval_s": 0.2, "max_line_bytes": MAX_LINE, "handover_budget_s": 30.0}
    settings.update(overrides)
    return SparkCareerConfig(**settings)


class Crash(Exception):
    """The deliberate crash a :func:`crash_at` fault hook raises."""


def crash_at(point: str) -> Callable[[str], None]:
    """A fault hook that raises :class:`Crash` every time the career reaches ``point``."""

    def hook(reached: str) -> None:
        if reached == point:
            raise Crash(f"injected crash at {point}")

    return hook


def audit(root: Path) -> VerifyReport:
    return verify(root, max_line_bytes=MAX_LINE)


def run_until(career: SparkCareer | list[SparkCareer], done: Callable[[], bool], timeout_s: float = 180.0) -> None:
    """Call execute() as a runner would (on each career in turn, when given several) until ``done()``; fail past
    the deadline."""
    careers = career if isinstance(career, list) else [career]
    next_check = [0.0]

    def worked_until_done() -> bool:
        for each in careers:
            each.execute()
        if time.monotonic() < next_check[0]:
            return False
        next_check[0] = time.monotonic() + 0.5
        return done()

    wait_for(worked_until_done, timeout_s, "the careers to be done")


def drained(root: Path) -> Callable[[], bool]:
    """Done when nothing is lost or unquarantined and landing/ is empty (everything consumed and archived)."""

    def check() -> bool:
        report = audit(root)
        return report.unaccounted == 0 and report.unquarantined == 0 and not landing_names(root)

    return check


def assert_exactly_once(root: Path) -> VerifyReport:
    report = audit(root)
    assert report.ok, report.render()
    assert report.ids_written == report.ids_in == report.rows_written
    assert report.quarantined == report.bad_lines_in == report.quarantine_rows
    return report


def drain_term(root: Path, zk_client: KazooClient, zk_group: str, replica: str,
               faults: Callable[[str], None] | None = None, **config: Any) -> dict[str, Any] | None:
    """One term on ``root`` that drains the queue and hands over cleanly; the commit record it leaves."""
    career = SparkCareer(make_config(root, **config), Recorder(), replica_id=replica, faults=faults)
    try:
        with leadership(zk_client, zk_group, replica) as (_, ctx):
            career.inaugurate(ctx)
            run_until(career, drained(root))
            career.hand_over(Outcome.CLEAN)
            record, _ = ctx.fence.read_commit()
    finally:
        career.close()
    return record


def refused_inauguration(root: Path, zk_client: KazooClient, zk_group: str, replica: str,
                         error: type[BaseException]) -> BaseException:
    """A term whose inauguration must raise ``error``; what it raised."""
    career = SparkCareer(make_config(root), Recorder(), replica_id=replica)
    try:
        with leadership(zk_client, zk_group, replica) as (_, ctx), pytest.raises(error) as refused:
            career.inaugurate(ctx)
    finally:
        career.close()
    return refused.value


def test_exactly_once_warm_then_second_term_reads_only_new_files(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """Warm standby, one term over 5 files (repeats, bad lines) and an empty one: every id written once, every
    bad line quarantined once, per-key order kept, landing/ drained into archive/. A second term (a new epoch) on the
    same data root reads only the new file: archived files are never re-read."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=5)
    q.put([])  # an empty file: Spark hands it to no batch; the career archives it all the same
    observer = Recorder()
    career = SparkCareer(make_config(root, standby="warm"), observer, replica_id="r1")
    started = time.monotonic()
    career.prepare()
    assert career.ready()
    warm_s = time.monotonic() - started
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        t0 = time.monotonic()
        run_until(career, lambda: bool(observer.commits))
        first_commit_s = time.monotonic() - t0
        run_until(career, drained(root))
        last = career.hand_over(Outcome.CLEAN)
        record, _ = ctx.fence.read_commit()
    print(f"warm-up {warm_s:.1f} s; first commit {first_commit_s:.2f} s after the first execute()")
    assert record is not None and last == record["batch_id"]
    report = assert_exactly_once(root)
    assert report.ids_in == 100 and report.repeated_lines_in == 8 and report.bad_lines_in == 5
    assert set(observer.outcomes()) <= {"committed"}
    assert observer.total("written") == 100 and observer.total("duplicate") == 8
    assert observer.total("quarantined") == 5
    assert sorted(p.name for p in (root / "archive").iterdir()) == [f"q-{i:05d}.jsonl" for i in range(1, 7)]
    assert landing_names(root) == []
    assert not list((root / "table").glob("_staging/*"))
    assert ds.dataset(root / "table").count_rows() == 100
    assert observer.backlogs and observer.backlogs[-1] == 0
    assert spark.read.parquet(str(root / "table")).count() == 100

    # A second term, new epoch: one new file (with a repeat of an old id); archived files are not read again.
    q.put([q.record(1000, "key-0"), q.written[0]])
    observer2 = Recorder()
    career2 = SparkCareer(make_config(root), observer2, replica_id="r2")
    with leadership(zk_client, zk_group, "r2") as (_, ctx2):
        assert ctx2.epoch > ctx.epoch
        career2.inaugurate(ctx2)
        run_until(career2, drained(root))
        career2.hand_over(Outcome.CLEAN)
    report = assert_exactly_once(root)
    assert report.ids_in == 101
    assert observer2.total("written") == 1 and observer2.total("duplicate") == 1
    epochs = ds.dataset(root / "table").to_table(columns=["_epoch"]).column("_epoch").to_pylist()
    assert epochs.count(ctx2.epoch) == 1 and epochs.count(ctx.epoch) == 100
    career.close()
    career2.close()


@pytest.mark.parametrize("point", ["after_stage", "after_commit", "after_rename", "inside_delta_commit",
                                   "after_publish"])
def test_crash_window_then_new_leader_exactly_once(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, point: str
) -> None:
    """A crash forced inside a batch — after staging, after the fenced commit, after the publish renames,
    inside the Delta commit, or after publishing — then a new leader (new epoch) on the same data root: output
    ends exactly once (the audit checks the Delta versions too). After 'after_commit' the new leader's
    inaugurate rolls the publish forward, and after the links its Delta version (the staging stays until the
    version is in); after 'after_stage' the dead staging stays through the inauguration and goes once the new
    term's first batch has finished (a chore kept off the new leader's path); from 'after_rename' on, Spark re-runs
    the batch and the career skips it."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=3)
    first = Recorder()
    career = SparkCareer(make_config(root, max_files_per_trigger=3), first, replica_id="r1", faults=crash_at(point))
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        with pytest.raises(Crash):
            run_until(career, lambda: False)
        career.hand_over(Outcome.FAILED)
        record, _ = ctx.fence.read_commit()
    table_files = sorted(p.name for p in (root / "table").glob("*.parquet"))
    staged = list((root / "table").glob("_staging/*/*"))
    if point == "after_stage":
        assert record is None and not table_files and staged
    elif point == "after_commit":
        assert record is not None and record["batch_id"] == 0 and not table_files and staged
    elif point == "after_publish":
        assert record is not None and table_files and not staged
    else:
        assert record is not None and table_files and staged, "the staging went before the Delta version"
    assert landing_names(root) == [f"q-{i:05d}.jsonl" for i in range(1, 4)]  # nothing archived yet

    second = Recorder()
    career2 = SparkCareer(make_config(root), second, replica_id="r2")
    with leadership(zk_client, zk_group, "r2") as (_, ctx2):
        career2.inaugurate(ctx2)
        dead = point == "after_stage"  # a committed batch's staging goes with its roll-forward
        assert bool(list((root / "table").glob("_staging/*"))) == dead, "a chore ran before the first batch"
        if point == "after_commit":
            assert list((root / "table").glob("batch-000000000000-*.parquet")), "not rolled forward"
        if record is not None:  # the record names the files its batch publishes, which the Delta step adds
            assert record["parts"]["table"] == sorted(
                p.name for p in (root / "table").glob("batch-000000000000-*.parquet"))
            assert {v.batch for v in batch_versions(root / "table")} == {0}
        run_until(career2, drained(root))
        assert not list((root / "table").glob("_staging/*")), "dead staging survived the new term's first batch"
        career2.hand_over(Outcome.CLEAN)
    assert_exactly_once(root)
    assert second.outcomes()[0] == ("committed" if point == "after_stage" else "skipped")
    career.close()
    career2.close()


def test_fenced_commit_never_publishes(spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """A zombie — it believes it leads, but its election node is gone and a newer leader committed — has its
    commit rejected by the fence: nothing it staged is published, and the new leader writes everything once."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=1)
    zombie_obs = Recorder()
    zombie = SparkCareer(make_config(root), zombie_obs, replica_id="zombie")
    with leadership(zk_client, zk_group, "zombie") as (_, ctx):
        zombie_ctx = CareerContext(epoch=ctx.epoch, fence=ctx.fence, still_leading=lambda: True,
                                   previous_handover=None)
        zombie.inaugurate(zombie_ctx)
        run_until(zombie, drained(root))
    # The zombie's election is closed (its node deleted), yet its career runs on, believing it leads.
    assert_exactly_once(root)
    q.standard(files=1, start=500)
    with pytest.raises(Fenced):
        run_until(zombie, lambda: False, timeout_s=120)
    assert zombie_obs.outcomes()[-1] == "fenced"
    assert len(list((root / "table").glob("batch-000000000001-*"))) == 0
    zombie.hand_over(Outcome.REVOKED)

    leader = SparkCareer(make_config(root), Recorder(), replica_id="new")
    with leadership(zk_client, zk_group, "new") as (_, ctx2):
        leader.inaugurate(ctx2)
        run_until(leader, drained(root))
        assert not list((root / "table").glob("_staging/*")), "the zombie's staging outlived the new term's batch"
        leader.hand_over(Outcome.CLEAN)
    report = assert_exactly_once(root)
    assert report.ids_in == 40
    zombie.close()
    leader.close()


def test_suspension_defers_the_batch_and_the_query_resumes(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """While the leader is suspended a batch refuses to start (nothing staged, nothing committed) and execute()
    reports no work; once leadership is back the query restarts and the batch is written exactly once."""
    root = tmp_path / "data"
    q = Queue(root)
    leading = {"now": False}
    observer = Recorder()
    career = SparkCareer(make_config(root), observer, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (election, ctx):
        paused = CareerContext(epoch=ctx.epoch, fence=ctx.fence, previous_handover=None,
                               still_leading=lambda: leading["now"] and election.is_leader())
        leading["now"] = True  # inaugurate refuses a term that is not leading
        career.inaugurate(paused)
        leading["now"] = False
        q.standard(files=2)
        term = career._term  # white-box: watch the query die of the deferred batch
        assert term is not None

        def query_died() -> bool:
            assert career.execute() is False
            return term.query is not None and not term.query.isActive

        wait_for(query_died, 120, "the batch to refuse to start")
        assert career.execute() is False  # still suspended: no restart, no error
        assert not observer.commits and not list((root / "table").rglob("*.parquet"))
        leading["now"] = True
        run_until(career, drained(root))
        career.hand_over(Outcome.CLEAN)
    assert_exactly_once(root)
    assert set(observer.outcomes()) == {"committed"}
    career.close()


def test_inaugurate_refuses_a_checkpoint_that_never_saw_the_committed_batch(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """If ZooKeeper says batch 5 is committed but the checkpoint never planned it (deleted or foreign), Spark
    would restart at batch 0 and every batch up to 5 would be skipped as a re-run: inaugurate refuses."""
    career = SparkCareer(make_config(tmp_path / "data"), Recorder(), replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        _, version = ctx.fence.read_commit()
        ctx.fence.commit({"batch_id": 5, "staged": {}, "files": []}, version)
        with pytest.raises(SparkCareerError, match=r"checkpoint .* has no such batch"):
            career.inaugurate(ctx)
    career.close()


def test_a_warm_follower_runs_its_keep_warm_job_only_while_following(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """Warm standby keeps Spark's Python workers from their 60 s idle stop: a tiny job every interval while the
    career follows, none while it leads (the batches keep the workers busy then), again after the hand-over, and
    none after close."""
    root = tmp_path / "data"
    Queue(root)
    career = SparkCareer(make_config(root, standby="warm", keep_warm_interval_s=0.3), Recorder(), replica_id="r1")
    tracker = spark.sparkContext.statusTracker()

    def jobs() -> int:
        return len(tracker.getJobIdsForGroup(KEEP_WARM_GROUP))

    def wait_for_jobs(count: int) -> None:
        wait_for(lambda: jobs() >= count, 120, f"{count} keep-warm jobs", interval_s=0.1)

    def lead_while(holds: Callable[[], bool], seconds: float, what: str) -> None:
        def executed() -> bool:
            career.execute()
            return holds()

        stays_for(executed, seconds, what)

    before = jobs()
    career.prepare()
    wait_for_jobs(before + 3)
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        lead_while(lambda: True, 1.0, "the term leading")  # a job begun just before inaugurate may still finish
        during = jobs()
        lead_while(lambda: jobs() == during, 3.0, "no keep-warm job while the career leads")  # ten intervals
        career.hand_over(Outcome.CLEAN)
    wait_for_jobs(during + 2)
    career.close()
    after = jobs()
    # three intervals: a heartbeat still running would have started a job
    stays_for(lambda: jobs() == after, 1.0, "no keep-warm job after close")


def test_a_failing_batch_raises_batch_failed_with_a_short_error_and_the_log_keeps_it_whole(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A batch whose user code fails with a huge error: ``execute`` raises ``BatchFailed`` naming the batch (so the
    runner counts the attempt against it), Spark is handed a short message (a long one overflows its interruption
    check's regex and loses the error), the log line has the error in full, and the hand-over stays in budget."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=1, per_file=5)
    q.put([json.dumps({"id": "bad-1", "key": "k", "seq": 1, "ts": 1, "payload": {"fail_long": True}}).encode()])
    with structlog.testing.capture_logs() as logs, leadership(zk_client, zk_group, "r1") as (_, ctx):
        # Made inside the capture: a structlog logger keeps the processors it was bound with.
        career = SparkCareer(make_config(root, transform="tests.pipelines:fails_long", max_files_per_trigger=1,
                                         handover_budget_s=3.0), Recorder(), replica_id="r1")
        career.inaugurate(ctx)
        with pytest.raises(BatchFailed) as failed:
            run_until(career, lambda: False, timeout_s=120)
        started = time.monotonic()
        career.hand_over(Outcome.FAILED)
        handover_s = time.monotonic() - started
    career.close()
    assert failed.value.batch_id == 1, "the first file commits as batch 0; the second fails"
    message = str(failed.value)
    assert "batch 1 failed" in message and "deep failure" in message and len(message) < 3000, message[:500]
    assert "frame 1999" in str(failed.value.__cause__), "the original error, whole, is chained"
    logged = [e for e in logs if e["event"] == BATCH_FAILED]
    assert logged and "frame 1999" in logged[0]["error"], "the log line should keep the whole error"
    assert handover_s < 3.0, f"hand-over took {handover_s:.1f} s of a 3 s budget"


def shift_checkpoint_clock(checkpoint: Path, ahead_ms: int, window_ms: int, *, offset_clock: bool = True) -> int:
    """Rewrite the newest offset-log and commit-log entries of ``checkpoint`` as a leader whose clock ran
    ``ahead_ms`` ahead writes them: its batch timestamp, a watermark of that minus the dedup window, and (with
    ``offset_clock``, a group clock seeded by that leader) the queue source's offset clock that far ahead; without
    it, as an ingestion-time leader (a release before the group clock) leaves them. Each file is replaced, not
    edited, so the hard-linked checkpoints of older terms keep theirs. Returns the batch."""
    batch = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    offsets = checkpoint / "offsets" / str(batch)
    lines = offsets.read_text().splitlines()
    meta = json.loads(lines[1])
    meta["batchTimestampMs"] = int(meta["batchTimestampMs"]) + ahead_ms
    meta["batchWatermarkMs"] = meta["batchTimestampMs"] - window_ms
    lines[1] = json.dumps(meta)
    source = json.loads(lines[2])
    if offset_clock and "clock" in source:
        source["clock"] += ahead_ms
        lines[2] = json.dumps(source)
    commit = checkpoint / "commits" / str(batch)
    commit_lines = commit.read_text().splitlines()
    commit_meta = json.loads(commit_lines[1])
    commit_meta["nextBatchWatermarkMs"] = meta["batchWatermarkMs"]
    commit_lines[1] = json.dumps(commit_meta)
    for path, text in ((offsets, lines), (commit, commit_lines)):
        fresh = path.with_name(f"{path.name}.shifted")
        fresh.write_text("\n".join(text))
        fresh.replace(path)
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old content
    return batch


def drain_one_term(client: KazooClient, group: str, root: Path) -> Path:
    """Lead one term as ``r1`` until the queue in ``root`` is drained, hand over; returns the term's checkpoint."""
    career = SparkCareer(make_config(root), Recorder(), replica_id="r1")
    with leadership(client, group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, drained(root))
        career.hand_over(Outcome.CLEAN)
    career.close()
    return max((root / "checkpoint").iterdir(), key=lambda p: p.name)


def _after_a_leader_ten_minutes_ahead(client: KazooClient, group: str, root: Path, *, files: int) -> Queue:
    """A first term drains ``files`` files; then its checkpoint is rewritten as a leader whose clock ran 10
    minutes ahead writes it with ingestion time as the event time (batch timestamp and watermark 8-10 minutes
    past the true clock; the group clock in the offsets untouched). Returns the queue."""
    q = Queue(root)
    q.standard(files=files, per_file=5)
    shift_checkpoint_clock(drain_one_term(client, group, root), ahead_ms=10 * 60_000, window_ms=2 * 60_000,
                           offset_clock=False)
    return q


def test_a_successor_whose_clock_is_behind_drops_nothing(spark: Any, zk_client: KazooClient, zk_group: str,
                                                         tmp_path: Path) -> None:
    """The previous leader's clock ran 10 minutes ahead: its batches' event times in the dedup store are 8-10
    minutes past this successor's clock. The new term's batches count as of the newest event time (so the ids the
    window holds are neither forgotten at once nor dropped as too old): every record of the new term is written
    once."""
    root = tmp_path / "data"
    q = _after_a_leader_ten_minutes_ahead(zk_client, zk_group, root, files=2)
    q.standard(files=3, per_file=5, start=1000)
    observer = Recorder()
    successor = SparkCareer(make_config(root), observer, replica_id="r2")
    with leadership(zk_client, zk_group, "r2") as (_, ctx):
        successor.inaugurate(ctx)
        run_until(successor, drained(root), timeout_s=90)
        successor.hand_over(Outcome.CLEAN)
    successor.close()
    report = assert_exactly_once(root)
    assert report.ids_in == 25 and observer.total("written") == 15, report.render()


def test_a_new_terms_chores_run_on_an_idle_queue_once_their_grace_is_past(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A new term's chores wait for its first batch, but not for ever: on a queue with nothing new to read, a lower
    epoch's dead staging stays while the career's clock is within 10 s of the inauguration, and goes once it is past
    (``term_chores`` after no batch)."""
    root = tmp_path / "data"
    Queue(root).standard(files=1)
    first = SparkCareer(make_config(root), Recorder(), replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        first.inaugurate(ctx)
        run_until(first, drained(root))  # a brand-new query runs a batch 0 even with nothing to read; not the next
        first.hand_over(Outcome.CLEAN)
        dead = root / "table" / "_staging" / f"epoch={ctx.epoch}" / "batch=9"
    first.close()
    dead.mkdir(parents=True)
    (dead / "part-00000.parquet").write_bytes(b"a batch no commit names")
    shift = [0.0]
    career = SparkCareer(make_config(root), Recorder(), replica_id="r2", clock=lambda: time.monotonic() + shift[0])
    with structlog.testing.capture_logs() as logs, leadership(zk_client, zk_group, "r2") as (_, ctx):
        career.inaugurate(ctx)

        def kept_while_executing() -> bool:
            career.execute()
            return dead.exists()

        stays_for(kept_while_executing, 3.0, "the dead staging within the grace")
        assert not [e for e in logs if e["event"] in ("term_chores", BATCH_COMMITTED)], logs
        shift[0] = 10.0
        run_until(career, lambda: not dead.parent.exists(), timeout_s=30)
        career.hand_over(Outcome.CLEAN)
    career.close()
    (chores,) = [e for e in logs if e["event"] == "term_chores"]
    assert (chores["after_batches"], chores["removed_staging"]) == (0, 1), chores


def test_each_batch_logs_its_spark_progress_once_even_after_an_idle_trigger(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """Every committed batch gets exactly one ``batch_progress`` event (when its trigger started, Spark's time
    split), also the first batch after an idle trigger: the query's
    ``recentProgress`` reports that trigger under the id of the batch that runs next (checked here), so the career's
    former reader, which skipped ids it had seen, lost that batch's own progress."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=2, per_file=5)
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100ms")  # idle reports come quickly
    began = datetime.now(UTC)
    try:
        with structlog.testing.capture_logs() as logs, leadership(zk_client, zk_group, "r1") as (_, ctx):
            career = SparkCareer(make_config(root, max_files_per_trigger=1), Recorder(), replica_id="r1")
            career.inaugurate(ctx)

            def logged(event: str) -> list[int]:
                return sorted(e["batch"] for e in logs if e["event"] == event)

            run_until(career, lambda: logged(BATCH_PROGRESS) == [0, 1], timeout_s=120)
            assert career._term is not None
            query = career._term.query  # white-box: see Spark report an idle trigger before the next file
            run_until(career, lambda: any(p.batchId == 2 and "addBatch" not in p.durationMs
                                          for p in query.recentProgress), timeout_s=60)
            q.standard(files=1, per_file=5, start=100)
            run_until(career, lambda: logged(BATCH_PROGRESS) == [0, 1, 2], timeout_s=120)
            career.hand_over(Outcome.CLEAN)
        career.close()
    finally:
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    assert logged(BATCH_PROGRESS) == logged(BATCH_COMMITTED) == [0, 1, 2]
    (inaugurated,) = [e for e in logs if e["event"] == INAUGURATED]  # the time before the first batch, split
    assert 0 <= inaugurated["checkpoint_s"] + inaugurated["outputs_s"] <= inaugurated["seconds"] + 0.002, inaugurated
    ended = datetime.now(UTC)
    for event in (e for e in logs if e["event"] == BATCH_PROGRESS):
        assert {"addBatch", "latestOffset", "triggerExecution"} <= set(event["duration_ms"]), event
        assert event["input_rows"] > 0 and event["epoch"] == ctx.epoch, event
        started = datetime.fromisoformat(event["trigger_started"].replace("Z", "+00:00"))
        assert began <= started <= ended - timedelta(milliseconds=event["duration_ms"]["triggerExecution"]), event
    committed = [e for e in logs if e["event"] == BATCH_COMMITTED]
    assert [e["dedup_keys"] for e in committed] == [7, 14, 21], "each file's new keys: 5 ids, a bad line, its marker"


def _fails_on_records(frame: Any) -> Any:
    """A transform that passes the empty-batch check and fails on the first batch with records."""
    from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

    return frame.withColumn("id", F.when(F.col("id").isNotNull(), F.raise_error("boom")).otherwise(F.col("id")))


def test_a_warm_up_whose_query_fails_is_logged_not_raised(tmp_path: Path, spark: Any) -> None:
    """A warm-up whose query dies (here the user's transform fails on the sample; under load, a Python worker that
    cannot connect back) logs ``warmup_failed`` and returns: the replica can still lead, only its first batch is
    slower. It never escapes ``prepare`` as a traceback that kills ``tenure run``."""
    from tenure.career.spark._hooks import Hooks
    from tenure.career.spark._warmup import warm_up

    config = make_config(tmp_path / "root", standby="warm", warmup_timeout_s=120.0)
    with structlog.testing.capture_logs() as logs:
        warm_up(spark, config, Hooks(transform=_fails_on_records, policy=config.retry_policy), replica_id="r1",
                log=structlog.get_logger(), scratch_parent=tmp_path / "scratch")
    failed = [e for e in logs if e["event"] == "warmup_failed"]
    assert failed and "boom" in failed[0]["error"], logs
