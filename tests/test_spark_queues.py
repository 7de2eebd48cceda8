"""Spark careers of several queues of one topic on one replica's standby and SparkSession (issue 51), each driven
through its terms on its own real Election fence on the shared ZooKeeper, all committing into the same tables.

The runner that drives several seats and the per-queue znode paths are stage B's: here each queue's line is a group of
its own on the real ensemble (what the queue's paths give it), and the careers are driven as the runner would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.output import batch_versions
from tenure.career.queue import QueueLayout, queue_of
from tenure.career.spark import SparkCareer, SparkStandby
from tenure.errors import ConfigError
from tenure.service.ops import produce, verify
from tests.test_spark_career import MAX_LINE, Crash, Recorder, crash_at, leadership, make_config, run_until

pytestmark = pytest.mark.timeout(900)

QUEUES = 2


def _drained(root: Path) -> bool:
    """Every queue of the topic consumed and archived, nothing lost or left unquarantined."""
    report = verify(root, max_line_bytes=MAX_LINE)
    return (report.unaccounted == 0 and report.unquarantined == 0
            and not any(any(q.landing.glob("*.jsonl")) for q in QueueLayout.each(root, QUEUES)))


def test_two_queues_on_one_standby_commit_into_the_same_tables(spark: Any, zk_client: KazooClient, zk_group: str,
                                                               tmp_path: Path) -> None:
    """The careers of queues 0 and 1 of a topic of two share one standby (one SparkSession), each leads on its own
    fence, reads its own queue (a record of the other queue's key there quarantined as wrong_queue) and commits its
    batches into the same tables: verify is clean, each table row carries its key's queue, each queue's batches are
    versions of its own application id, and each queue keeps its own checkpoint, order and archive."""
    root = tmp_path / "data"
    produced = produce(root, records=400, keys=10, duplicates=0.1, bad=0.05, misroute=0.05, queues=QUEUES, seed=11,
                       progress=False, batch_records=50, max_line_bytes=MAX_LINE)
    config = make_config(root, max_files_per_trigger=3)
    standby = SparkStandby.for_replica(config, replica_id="r1", group=zk_group)
    observers = [Recorder() for _ in range(QUEUES)]
    careers = [SparkCareer(config, observers[k], replica_id="r1", group=zk_group, standby=standby, queue=k,
                           queues=QUEUES) for k in range(QUEUES)]
    try:
        careers[0].prepare()
        with leadership(zk_client, f"{zk_group}.q0", "r1") as (_, zero), \
                leadership(zk_client, f"{zk_group}.q1", "r1") as (_, one):
            for career, ctx in zip(careers, (zero, one), strict=True):
                career.inaugurate(ctx)
            run_until(careers, lambda: _drained(root))
            last = [career.hand_over(Outcome.CLEAN) for career in careers]
            records = [ctx.fence.read_commit()[0] for ctx in (zero, one)]
    finally:
        for career in careers:
            career.close()
        standby.close()
    report = verify(root, max_line_bytes=MAX_LINE)
    assert report.ok, report.render()
    # A misrouted record is a bad line where it was written (its repeats too): no valid id.
    assert report.ids_in == report.ids_written == 400 - produced.misrouted
    assert report.bad_by_reason["wrong_queue"] >= produced.misrouted > 0
    assert [q["rows_written"] for q in report.per_queue] == [observer.total("written") for observer in observers]
    assert all(observer.total("written") > 0 for observer in observers)
    rows = ds.dataset(root / "table").to_table(columns=["key", "_queue"]).to_pylist()
    assert {(row["_queue"] == queue_of(row["key"], QUEUES)) for row in rows} == {True}
    assert all(record is not None and record["queue"] == k and record["batch_id"] == last[k]
               for k, record in enumerate(records))
    versions = batch_versions(root / "table")
    for k in range(QUEUES):
        assert [v.batch for v in versions if v.queue == k] == sorted({v.batch for v in versions if v.queue == k})
        assert (root / "checkpoint" / f"queue={k}").is_dir() and (root / "order" / f"queue={k}").is_dir()
        assert any((root / "queues" / str(k) / "archive").iterdir())
    assert not (root / "landing").exists() and not (root / "checkpoint" / "offsets").exists()


def _queue_1_of_3_drained(root: Path) -> bool:
    """Queue 1 of a topic of three consumed and archived, and the audit clean but for the other queues' files,
    which wait."""
    return (not any(QueueLayout(root, 1, 3).landing.glob("*.jsonl"))
            and verify(root, max_line_bytes=MAX_LINE, allow_waiting=True).ok)


@pytest.mark.parametrize("point", ["after_commit", "inside_delta_commit"])
def test_a_crash_window_in_queue_1_of_3_then_its_new_leader_writes_it_exactly_once(
        spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, point: str) -> None:
    """``test_crash_window_then_new_leader_exactly_once`` on queue 1 of a topic of three: a crash forced inside
    queue 1's first batch after its fenced commit (or inside its Delta commit), then a new leader of queue 1 (a new
    epoch on queue 1's line): it rolls the batch forward under queue 1's staging, skips it when Spark runs it again,
    and queue 1 ends exactly once, each of its batches one Delta version of its own; queues 0 and 2, led by nobody,
    are untouched."""
    root = tmp_path / "data"
    produce(root, records=150, keys=12, duplicates=0.05, bad=0.02, queues=3, seed=5, progress=False,
            batch_records=20, max_line_bytes=MAX_LINE)
    crashing = SparkCareer(make_config(root, max_files_per_trigger=3), Recorder(), replica_id="r1", group=zk_group,
                           faults=crash_at(point), queue=1, queues=3)
    with leadership(zk_client, f"{zk_group}.q1", "r1") as (_, ctx):
        crashing.inaugurate(ctx)
        with pytest.raises(Crash):
            run_until(crashing, lambda: False)
        crashing.hand_over(Outcome.FAILED)
        record, _ = ctx.fence.read_commit()
    assert record is not None and record["queue"] == 1 and record["batch_id"] == 0, record
    assert list((root / "table" / "_staging").glob("queue=1/*")), "the crash left queue 1's batch staged"
    second = Recorder()
    successor = SparkCareer(make_config(root), second, replica_id="r2", group=zk_group, queue=1, queues=3)
    try:
        with leadership(zk_client, f"{zk_group}.q1", "r2") as (_, ctx2):
            successor.inaugurate(ctx2)
            assert {v.batch for v in batch_versions(root / "table")} == {0}, "batch 0 not rolled forward"
            run_until(successor, lambda: _queue_1_of_3_drained(root))
            successor.hand_over(Outcome.CLEAN)
    finally:
        crashing.close()
        successor.close()
    assert second.outcomes()[0] == "skipped", second.outcomes()
    assert not list((root / "table" / "_staging").glob("queue=1/*")), "dead staging survived"
    report = verify(root, max_line_bytes=MAX_LINE, allow_waiting=True)
    assert report.ok, report.render()
    assert [(q["queue"], q["lost"], q["rows_written"] > 0) for q in report.per_queue] == [
        (0, 0, False), (1, 0, True), (2, 0, False)], report.per_queue
    versions = [v for v in batch_versions(root / "table") if v.batch is not None]
    assert {v.queue for v in versions} == {1} and [v.batch for v in versions] == list(range(len(versions)))


def test_a_career_refuses_what_reads_no_queue_of_its_topic(tmp_path: Path) -> None:
    """A career of a topic of several queues refuses another source than the queue's own landing/, a queue outside
    the topic and a shared standby built from other settings, each in one line naming what to fix."""
    config = make_config(tmp_path, source_format="kafka", source_options={"subscribe": "t"})
    with pytest.raises(ConfigError, match="read no queue of a topic of 2 queues"):
        SparkCareer(config, Recorder(), replica_id="r1", queue=0, queues=2)
    with pytest.raises(ConfigError, match="queue=2 is not a queue of a topic of 2 queues"):
        SparkCareer(make_config(tmp_path), Recorder(), replica_id="r1", queue=2, queues=2)
    other = SparkStandby.for_replica(make_config(tmp_path, max_files_per_trigger=9), replica_id="r1", group="g")
    with pytest.raises(ConfigError, match="the standby was built from other settings"):
        SparkCareer(make_config(tmp_path), Recorder(), replica_id="r1", standby=other, queue=1, queues=2)
