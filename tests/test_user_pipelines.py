"""User pipelines in the Spark career: the transform hook, and the row function's retry store and dead letter.

Real ZooKeeper fences and the shared local[2] SparkSession; the failure rule travels in each record's payload
(tests/pipelines.py), so the Python workers and the driver agree on it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.spark import HookError, SparkCareer
from tenure.service.replica import ReplicaSpec
from tests.test_spark_career import (
    Crash,
    Queue,
    Recorder,
    assert_exactly_once,
    audit,
    crash_at,
    landing_names,
    leadership,
    make_config,
    run_until,
)

pytestmark = pytest.mark.timeout(900)


def put_records(q: Queue, records: list[dict[str, Any]]) -> str:
    return q.put([json.dumps(r).encode() for r in records])


def record(i: int, key: str, seq: int, **payload: Any) -> dict[str, Any]:
    return {"id": f"id-{i}", "key": key, "seq": seq, "ts": 1_700_000_000_000 + i, "payload": {"i": i, **payload}}


def commit_record(client: KazooClient, group: str) -> dict[str, Any]:
    data, _ = client.get(f"/tenure/{group}/commit")
    return dict(json.loads(data))


def consumed(root: Path, name: str) -> Callable[[], bool]:
    return lambda: name not in landing_names(root)


def outlive_dedup_window(career: SparkCareer, q: Queue, root: Path, window_s: float) -> None:
    """Run until Spark has forgotten every id ingested so far, feeding two filler records of key ``fine``
    (seq 2 and 3, ids id-3 and id-4).

    Spark forgets an id ingested at t once a batch runs after one ingested past t + 2 × window (the watermark
    trails the latest ingestion by the window; the id expires a window after t): the first filler is ingested past
    that, the second runs after it, so the next batch starts with every earlier id forgotten.
    """
    forgotten_after = time.time() + 2 * window_s + 0.5
    run_until(career, lambda: time.time() > forgotten_after, timeout_s=30)
    for i in (3, 4):
        run_until(career, consumed(root, put_records(q, [record(i, "fine", i - 1)])))


def test_transform_enriches_every_written_row(spark: Any, zk_client: KazooClient, zk_group: str,
                                              tmp_path: Path) -> None:
    """A user transform's added column is in every written row, and the output stays exactly once."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=3)
    observer = Recorder()
    career = SparkCareer(make_config(root, transform="tests.pipelines:shouts"), observer, replica_id="r1")
    career.prepare()
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, lambda: not landing_names(root) and audit(root).unaccounted == 0)
        career.hand_over(Outcome.CLEAN)
    career.close()
    assert_exactly_once(root)
    table = ds.dataset(root / "table").to_table(columns=["key", "loud_key"]).to_pylist()
    assert len(table) == 60
    assert all(row["loud_key"] == row["key"].upper() for row in table)


@pytest.mark.parametrize(("spec", "message"), [
    ("tests.pipelines:drops_seq", "drops column 'seq'"),
    ("tests.pipelines:not_a_dataframe", "returned int, not a DataFrame"),
])
def test_transform_that_breaks_the_output_is_refused_at_prepare(spark: Any, tmp_path: Path, spec: str,
                                                                 message: str) -> None:
    """A transform that drops a column the output needs, or returns no DataFrame, is refused at ``prepare`` naming what
    it did, and the career is not ready."""
    career = SparkCareer(make_config(tmp_path, transform=spec), Recorder(), replica_id="r1")
    with pytest.raises(HookError, match=message):
        career.prepare()
    assert not career.ready()


@pytest.mark.parametrize(("spec", "message"), [
    ("no_such_module_xyz:f", "module 'no_such_module_xyz' cannot be imported"),
    ("tests.pipelines:missing", "has no attribute 'missing'"),
    ("tests.pipelines:NOT_CALLABLE", "is a int, not a function"),
])
def test_unloadable_hooks_are_refused_at_construction(tmp_path: Path, spec: str, message: str) -> None:
    """A transform or row function that cannot be loaded (no module, no such name, not a function) is refused when the
    career is built, naming why."""
    for setting in ("transform", "row_function"):
        with pytest.raises(HookError, match=message):
            SparkCareer(make_config(tmp_path, **{setting: spec}), Recorder(), replica_id="r1")


def test_tenure_run_with_a_bad_transform_exits_2_with_one_line(zk_hosts: str, tmp_path: Path) -> None:
    """The whole path: flags → config → career construction, before the replica ever joins the election."""
    for spec, expected in (("not-a-spec", "transform='not-a-spec' is not package.module:function"),
                           ("no_such_module_xyz:f", "module 'no_such_module_xyz' cannot be imported")):
        command = ReplicaSpec(data_root=tmp_path, transform=spec).command(zk=zk_hosts, replica_id="r1", metrics_port=0)
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert lines[-1].startswith("tenure: error: ") and expected in lines[-1], done.stderr


def test_failing_records_are_retried_in_key_order_then_written_or_dead_lettered_across_a_failover(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """Key ``slow`` has a record that fails until the test clears its flag: it and the later records of its
    key wait in the retry store, then are written in seq order. Key ``bad`` has a poison record: tried 3 times
    on the back-off schedule (2 s, then 4 s), then dead-lettered, and the key's later record is written after
    it. Other keys flow on. The leader changes (a new epoch) while records are held; the new leader resumes
    from the committed retry store.
    """
    root = tmp_path / "data"
    flag = tmp_path / "slow-fails"
    flag.touch()
    q = Queue(root)
    put_records(q, [record(1, "slow", 1), record(2, "slow", 2, fail_while=str(flag)), record(3, "slow", 3),
                    record(4, "bad", 1, poison=True), record(5, "fine", 1)])
    put_records(q, [record(6, "slow", 4), record(7, "bad", 2), record(8, "fine", 2)])
    settings = {"row_function": "tests.pipelines:flaky", "retry_attempts": 3, "retry_backoff_s": 2.0,
                "retry_backoff_max_s": 4.0}
    first = Recorder()
    career = SparkCareer(make_config(root, **settings), first, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, lambda: not landing_names(root) and first.waiting and first.waiting[-1] >= 5)
        career.hand_over(Outcome.REVOKED)
        held = commit_record(zk_client, zk_group)
    career.close()
    # id-2 failed with id-3 and id-6 behind it; id-4 failed with id-7 behind it.
    assert held["retry_waiting"] == 5 and first.total("retried") == 2, held
    assert first.total("written") == 3  # id-1, id-5, id-8
    mid = audit(root)
    assert mid.ok and mid.ids_waiting == 5, mid.render()
    flag.unlink()

    second = Recorder()
    career2 = SparkCareer(make_config(root, **settings), second, replica_id="r2")
    with leadership(zk_client, zk_group, "r2") as (_, ctx2):
        assert ctx2.epoch > ctx.epoch
        career2.inaugurate(ctx2)
        run_until(career2, lambda: commit_record(zk_client, zk_group)["retry_waiting"] == 0, timeout_s=240)
        career2.hand_over(Outcome.CLEAN)
    career2.close()

    report = audit(root)
    assert report.ok, report.render()
    assert (report.ids_in, report.ids_written, report.ids_dead_lettered, report.ids_waiting) == (8, 7, 1, 0)
    rows = ds.dataset(root / "table").to_table(columns=["id", "key", "seq", "_batch"]).to_pylist()
    batch_of = {row["id"]: row["_batch"] for row in rows}
    # Behind the failing id-2, the slow key's later records waited: written in the same batch or later.
    assert batch_of["id-2"] > batch_of["id-1"]
    assert batch_of["id-3"] >= batch_of["id-2"] and batch_of["id-6"] >= batch_of["id-2"]
    dead = pq.read_table(next((root / "dead-letter").glob("batch-*.parquet"))).to_pylist()
    assert len(dead) == 1 and dead[0]["id"] == "id-4" and dead[0]["attempts"] == 3
    assert "RuntimeError: poison id-4" in dead[0]["error"]
    assert batch_of["id-7"] == dead[0]["_batch"]  # the key moved on once its head was dead-lettered
    # On schedule: 2 s, then 4 s between the three attempts.
    assert dead[0]["last_failed_at"] - dead[0]["first_failed_at"] >= 6.0
    assert second.total("dead_lettered") + first.total("dead_lettered") == 1
    assert second.waiting[-1] == 0
    snapshots = list((root / "retry").glob("batch-*.parquet"))
    assert len(snapshots) == 1 and pq.read_table(snapshots[0]).num_rows == 0


def test_crash_after_the_commit_rolls_the_retry_store_and_dead_letter_forward(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """The leader dies right after committing a batch that held records, before publishing: the new leader's
    inauguration publishes the retry store from staging, and the held records are retried from it."""
    root = tmp_path / "data"
    flag = tmp_path / "held-fails"
    flag.touch()
    q = Queue(root)
    put_records(q, [record(1, "held", 1, fail_while=str(flag)), record(2, "held", 2),
                    record(3, "bad", 1, poison=True), record(4, "fine", 1)])
    settings = {"row_function": "tests.pipelines:flaky", "retry_attempts": 2, "retry_backoff_s": 0.5,
                "retry_backoff_max_s": 0.5}
    career = SparkCareer(make_config(root, **settings), Recorder(), replica_id="r1", faults=crash_at("after_commit"))
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        with pytest.raises(Crash):
            run_until(career, lambda: False)
        career.hand_over(Outcome.FAILED)
    career.close()
    committed = commit_record(zk_client, zk_group)
    assert committed["retry_waiting"] == 3 and "retry" in committed["staged"]  # id-1, id-2 behind it, id-3
    assert not list((root / "retry").glob("batch-*.parquet")), "published before the crash"

    second = Recorder()
    career2 = SparkCareer(make_config(root, **settings), second, replica_id="r2")
    with leadership(zk_client, zk_group, "r2") as (_, ctx2):
        career2.inaugurate(ctx2)
        rolled = audit(root)
        assert rolled.ok and (rolled.ids_waiting, rolled.ids_dead_lettered) == (3, 0), rolled.render()
        flag.unlink()
        run_until(career2, lambda: commit_record(zk_client, zk_group)["retry_waiting"] == 0)
        career2.hand_over(Outcome.CLEAN)
    career2.close()
    report = audit(root)
    assert report.ok, report.render()
    assert (report.ids_written, report.ids_dead_lettered, report.ids_waiting) == (3, 1, 0)


def test_a_repeat_of_a_held_record_after_the_dedup_window_is_a_duplicate_not_a_second_write(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A held record has not advanced its key's order mark, so once Spark's dedup window has forgotten its id
    only the retry store knows it: the producer's repeat of its line is dropped before the row function and
    counted as a duplicate, and the held copy — once the row function succeeds — is written exactly once.

    The repeat comes with a repeat of a record written in the same batch as the held one; that repeat is
    quarantined as late (not dropped as a duplicate), which shows Spark had truly forgotten both ids.
    """
    window_s, backoff_s = 1.0, 2.0
    root = tmp_path / "data"
    flag = tmp_path / "held-fails"
    flag.touch()
    q = Queue(root)
    lines = [record(1, "held", 1, fail_while=str(flag)), record(2, "fine", 1)]
    settings = {"row_function": "tests.pipelines:flaky", "dedup_window": f"{window_s:g} second",
                "retry_attempts": 100, "retry_backoff_s": backoff_s, "retry_backoff_max_s": backoff_s}
    observer = Recorder()
    career = SparkCareer(make_config(root, **settings), observer, replica_id="r1")

    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        first = put_records(q, lines)
        run_until(career, lambda: consumed(root, first)()
                  and commit_record(zk_client, zk_group)["retry_waiting"] == 1)
        outlive_dedup_window(career, q, root, window_s)
        run_until(career, consumed(root, put_records(q, lines)))  # the repeats
        waiting = commit_record(zk_client, zk_group)["retry_waiting"]
        flag.unlink()
        # Every failure came before the unlink, so every held record is due one back-off later: a batch woken
        # by a new file after that tries them all (the test does not hang on a retry tick's timing).
        all_due = time.time() + backoff_s + 0.5
        run_until(career, lambda: time.time() > all_due, timeout_s=30)
        last = put_records(q, [record(5, "fine", 4)])
        run_until(career, lambda: consumed(root, last)() and commit_record(zk_client, zk_group)["retry_waiting"] == 0)
        career.hand_over(Outcome.CLEAN)
    career.close()

    ids = sorted(ds.dataset(root / "table").to_table(columns=["id"]).column("id").to_pylist())
    assert ids == ["id-1", "id-2", "id-3", "id-4", "id-5"], f"table ids: {ids}"
    assert (observer.total("written"), observer.total("duplicate"), observer.total("late")) == (5, 1, 1), \
        observer.batches
    report = audit(root)
    assert report.ok, report.render()
    assert (report.ids_written, report.ids_waiting, report.ids_late) == (5, 0, 1), report.render()
    assert waiting == 1, "the repeat was held beside the held copy"


def test_a_repeat_of_a_dead_lettered_record_after_the_dedup_window_is_late_not_a_second_write(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A dead-lettered record moves its key's order mark past it, as a written one does: once Spark's dedup
    window has forgotten its id, the producer's repeat of its line is quarantined as late, even though the row
    function would now succeed on it. The id stays in ``dead-letter/`` only.

    The repeat comes with a repeat of a record written in the same batch, also quarantined as late, which shows
    Spark had truly forgotten both ids.
    """
    window_s = 1.0
    root = tmp_path / "data"
    flag = tmp_path / "dead-fails"
    flag.touch()
    q = Queue(root)
    lines = [record(1, "dead", 1, fail_while=str(flag)), record(2, "fine", 1)]
    settings = {"row_function": "tests.pipelines:flaky", "dedup_window": f"{window_s:g} second", "retry_attempts": 1}
    observer = Recorder()
    career = SparkCareer(make_config(root, **settings), observer, replica_id="r1")

    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        first = put_records(q, lines)
        run_until(career, lambda: consumed(root, first)() and observer.total("dead_lettered") == 1)
        flag.unlink()  # from now on the row function succeeds on id-1
        outlive_dedup_window(career, q, root, window_s)
        run_until(career, consumed(root, put_records(q, lines)))  # the repeats
        career.hand_over(Outcome.CLEAN)
    career.close()

    ids = sorted(ds.dataset(root / "table").to_table(columns=["id"]).column("id").to_pylist())
    assert ids == ["id-2", "id-3", "id-4"], f"table ids: {ids}"
    assert (observer.total("written"), observer.total("dead_lettered"), observer.total("late")) == (3, 1, 2), \
        observer.batches
    report = audit(root)
    assert report.ok, report.render()
    assert (report.ids_written, report.ids_dead_lettered, report.ids_late) == (3, 1, 2), report.render()


def test_a_committed_store_holding_an_id_twice_writes_it_once(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """Tenure before the held-repeat check could commit a retry store holding a repeat beside its held original.
    A leader that starts from such a store keeps the original, drops the copy as a duplicate, and writes the id
    once when the row function succeeds."""
    root = tmp_path / "data"
    flag = tmp_path / "held-fails"
    flag.touch()
    q = Queue(root)
    settings = {"row_function": "tests.pipelines:flaky", "retry_attempts": 100, "retry_backoff_s": 0.5,
                "retry_backoff_max_s": 0.5}
    career = SparkCareer(make_config(root, **settings), Recorder(), replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        first = put_records(q, [record(1, "held", 1, fail_while=str(flag)), record(2, "fine", 1)])
        run_until(career, lambda: first not in landing_names(root)
                  and commit_record(zk_client, zk_group)["retry_waiting"] == 1)
        career.hand_over(Outcome.CLEAN)
    career.close()
    store = root / commit_record(zk_client, zk_group)["retry"]
    held = pq.read_table(store)
    copy = held.to_pylist()[0] | {"attempts": 0, "first_failed_at": None, "last_failed_at": None, "due_at": None,
                                  "error": None}
    pq.write_table(pa.Table.from_pylist([copy, *held.to_pylist()], held.schema), store)
    flag.unlink()

    second = Recorder()
    career2 = SparkCareer(make_config(root, **settings), second, replica_id="r2")
    with leadership(zk_client, zk_group, "r2") as (_, ctx2):
        career2.inaugurate(ctx2)
        run_until(career2, lambda: commit_record(zk_client, zk_group)["retry_waiting"] == 0)
        career2.hand_over(Outcome.CLEAN)
    career2.close()
    ids = sorted(ds.dataset(root / "table").to_table(columns=["id"]).column("id").to_pylist())
    assert ids == ["id-1", "id-2"], f"table ids: {ids}"
    assert second.total("duplicate") == 1, second.batches
    report = audit(root)
    assert report.ok, report.render()
