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
from tests.test_spark_career import MAX_LINE, Recorder, leadership, make_config, run_until

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


def test_a_career_refuses_what_reads_no_queue_of_its_topic(tmp_path: Path) -> None:
    """A career of a topic of several queues refuses another source than the queue's own landing/, a queue outside
    the topic, a cluster master (whose application, serving every queue of its replica, another queue's new term
    would kill) and a shared standby built from other settings, each in one line naming what to fix."""
    config = make_config(tmp_path, source_format="kafka", source_options={"subscribe": "t"})
    with pytest.raises(ConfigError, match="read no queue of a topic of 2 queues"):
        SparkCareer(config, Recorder(), replica_id="r1", queue=0, queues=2)
    with pytest.raises(ConfigError, match="queue=2 is not a queue of a topic of 2 queues"):
        SparkCareer(make_config(tmp_path), Recorder(), replica_id="r1", queue=2, queues=2)
    with pytest.raises(ConfigError, match="a topic of 2 queues runs on local Spark masters only"):
        SparkCareer(make_config(tmp_path, spark_master="spark://m:7077"), Recorder(), replica_id="r1", queue=0,
                    queues=2)
    other = SparkStandby.for_replica(make_config(tmp_path, max_files_per_trigger=9), replica_id="r1", group="g")
    with pytest.raises(ConfigError, match="the standby was built from other settings"):
        SparkCareer(make_config(tmp_path), Recorder(), replica_id="r1", standby=other, queue=1, queues=2)
