"""No replica's wall clock decides when data is retried or deleted: the group's clock (``_term.TermClock``).

A leader whose wall clock ran ahead stamps retry due times and archive times in its own time; a successor on the
true clock used to hold those retries back by the difference, and a wall clock that jumps forward used to delete
the archive (the audit trail) early. The group's clock is carried by every commit record and advanced by each
term's monotonic time, so every replica reads the same time.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.spark import SparkCareer
from tenure.career.spark._archive import archive_files, sweep_archive
from tenure.career.spark._dedup import published_batches, read_published
from tenure.career.spark._intake import batch_offset
from tenure.career.spark._layout import Layout
from tenure.career.spark._term import TermClock
from tests.test_spark_career import (
    Queue,
    Recorder,
    drain_one_term,
    landing_names,
    leadership,
    make_config,
    run_until,
)
from tests.test_user_pipelines import commit_record, put_records, record

AHEAD_S = 600.0  # the first leader's wall clock runs 10 minutes ahead


def test_the_group_clock_carries_on_from_the_record_and_ignores_the_wall() -> None:
    """A term's group clock starts at the commit record's ``clock`` and advances by monotonic time, whatever the wall
    clock says; only a group without a record seeds it from the wall."""
    ticks = iter([100.0, 103.5])
    clock = TermClock({"clock": 5_000.0}, monotonic=lambda: next(ticks), wall=lambda: 1e12)
    assert clock.now() == 5_003.5
    seeded = TermClock(None, monotonic=lambda: 0.0, wall=lambda: 42.0)
    assert seeded.now() == 42.0


def test_a_wall_clock_jump_deletes_no_archived_file_early(tmp_path: Path) -> None:
    """Files archived on the group's clock are swept on it: a wall clock a year ahead changes nothing."""
    layout = Layout(tmp_path / "data")
    layout.landing.mkdir(parents=True)
    (layout.landing / "a.jsonl").write_bytes(b"x\n")
    clock = TermClock({"clock": 1_000_000.0}, wall=lambda: 1_000_000.0 + 365 * 86400)
    assert archive_files(layout.queue, ["a.jsonl"], clock.now()) == 1
    assert sweep_archive(layout.queue, 7 * 86400, clock.now()) == 0
    assert (layout.archive / "a.jsonl").exists()
    assert sweep_archive(layout.queue, 7 * 86400, clock.now() + 7 * 86400 + 1) == 1


def _as_if_ahead(client: KazooClient, group: str, root: Path) -> None:
    """Rewrite the last commit and its retry snapshot as a leader whose wall clock ran ``AHEAD_S`` ahead writes
    them: its due times, failure times and clock all that far in the future."""
    path = f"/tenure/{group}/commit"
    data, stat = client.get(path)
    committed: dict[str, Any] = json.loads(data)
    committed["retry_next_due"] += AHEAD_S
    committed["committed_at"] += AHEAD_S
    committed["clock"] = committed.get("clock", committed["committed_at"]) + AHEAD_S
    snapshot = root / committed["retry"]
    table = pq.read_table(snapshot)
    for name in ("first_failed_at", "last_failed_at", "due_at"):
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, pc.add(table.column(name), AHEAD_S))
    pq.write_table(table, snapshot)
    os.sync()
    client.set(path, json.dumps(committed).encode(), version=stat.version)


def test_a_successor_whose_clock_is_behind_retries_on_time(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A record fails under a leader whose clock ran 10 minutes ahead (its retry is due 2 s later, in that
    leader's time). The successor, on the true clock, retries it within seconds, not 10 minutes later."""
    root = tmp_path / "data"
    flag = tmp_path / "fails"
    flag.touch()
    q = Queue(root)
    put_records(q, [record(1, "k", 1, fail_while=str(flag)), record(2, "other", 1)])
    settings = {"row_function": "tests.pipelines:flaky", "retry_attempts": 5, "retry_backoff_s": 2.0,
                "retry_backoff_max_s": 2.0}
    first = Recorder()
    career = SparkCareer(make_config(root, **settings), first, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, lambda: not landing_names(root) and bool(first.waiting) and first.waiting[-1] == 1)
        career.hand_over(Outcome.CLEAN)
    career.close()
    _as_if_ahead(zk_client, zk_group, root)
    flag.unlink()

    second = Recorder()
    career2 = SparkCareer(make_config(root, **settings), second, replica_id="r2")
    with leadership(zk_client, zk_group, "r2") as (_, ctx2):
        career2.inaugurate(ctx2)
        run_until(career2, lambda: commit_record(zk_client, zk_group)["retry_waiting"] == 0, timeout_s=90)
        career2.hand_over(Outcome.CLEAN)
    career2.close()
    assert second.total("written") == 1


def test_deduplication_runs_on_the_group_clock_not_the_leaders_wall_clock(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group's clock was seeded by a first leader whose wall clock was an hour behind; this leader's (and its
    JVM's) is true. Each batch's offset carries the group's clock, and deduplication's event time, so the dedup
    store's, follow it: a leader's wall clock moves no event time (ingestion time, Spark's ``current_timestamp()``,
    would have put it an hour further on, and every remembered id would be forgotten at once)."""
    behind_s = 3600.0
    monkeypatch.setattr("tenure.career.spark._career.TermClock",
                        lambda record: TermClock(record, wall=lambda: time.time() - behind_s))
    root = tmp_path / "data"
    Queue(root).standard(files=4, per_file=5)
    checkpoint = drain_one_term(zk_client, zk_group, root)
    group_now_ms = commit_record(zk_client, zk_group)["clock"] * 1000
    batches = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    clocks = [batch_offset(checkpoint, b)["clock"] for b in batches]
    assert clocks == sorted(clocks) and clocks[-1] <= group_now_ms, (clocks, group_now_ms)
    newest = max(read_published(path)[0] for _batch, path in published_batches(Layout(root).dedup))
    assert 0 < newest <= group_now_ms, "the dedup store's event time is the group's"
    assert newest < (time.time() - behind_s + 600) * 1000, "the dedup store's event time followed a wall clock"
