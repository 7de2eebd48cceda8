"""Per-key order is the consumer's to keep: whatever the files' mtimes, whatever the transform.

The guarantee's place among the others: ARCHITECTURE.md "Where each guarantee is enforced".

Each test reads the published output the way a reader does (part files in name order, rows in file order)
and fails on any per-key inversion; a record that arrives after a higher seq of its key was published must
be in quarantine with reason ``late``, never in the table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.spark import SparkCareer
from tests.test_spark_career import Queue, Recorder, landing_names, leadership, make_config, run_until


def published(root: Path, folder: str = "table") -> list[dict[str, Any]]:
    """Every published row, in the order a reader meets them (files by name, rows in file order)."""
    rows: list[dict[str, Any]] = []
    for part in sorted((root / folder).glob("batch-*.parquet")):
        rows.extend(pq.read_table(part).to_pylist())
    return rows


def inversions(rows: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    last: dict[str, int] = {}
    found = []
    for row in rows:
        if row["seq"] < last.get(row["key"], row["seq"]):
            found.append((row["key"], last[row["key"]], row["seq"]))
        last[row["key"]] = max(row["seq"], last.get(row["key"], row["seq"]))
    return found


def line(key: str, seq: int, tag: str = "") -> bytes:
    return json.dumps({"id": f"{tag}{key}-{seq}", "key": key, "seq": seq, "ts": seq, "payload": {"s": seq}}).encode()


def consumed(root: Path) -> bool:
    return not landing_names(root)


def test_a_record_behind_its_published_key_goes_to_quarantine_as_late(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """seq 11–20 of a key is published, then a file with seq 1–10 (and 21–25) lands: 1–10 are late. They are
    quarantined (reason ``late``, the record in ``value``, counted), 21–25 are written, nothing out of order."""
    root = tmp_path / "data"
    q = Queue(root)
    observer = Recorder()
    career = SparkCareer(make_config(root), observer, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        q.put([line("k", s) for s in range(11, 21)] + [line("other", 1)])
        run_until(career, lambda: consumed(root) and bool(observer.commits))
        q.put([line("k", s) for s in [*range(1, 11), *range(21, 26)]])
        run_until(career, lambda: consumed(root) and len(observer.commits) >= 2)
        career.hand_over(Outcome.CLEAN)
    career.close()
    table = published(root)
    assert not inversions(table), inversions(table)
    assert sorted(r["seq"] for r in table if r["key"] == "k") == [*range(11, 26)]
    late = [r for r in published(root, "quarantine") if r["reason"] == "late"]
    assert sorted(json.loads(r["value"])["seq"] for r in late) == list(range(1, 11))
    assert json.loads(late[0]["value"])["payload"] == {"s": json.loads(late[0]["value"])["seq"]}
    assert all(r["source_file"] and r["line"] for r in late)
    assert observer.total("late") == 10


def test_a_transform_that_reshuffles_keeps_each_key_in_order(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """The transform spreads each key over 4 partitions; the written batch still has each key in seq order."""
    root = tmp_path / "data"
    q = Queue(root)
    observer = Recorder()
    career = SparkCareer(make_config(root, transform="tests.pipelines:scatters"), observer, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        q.put([line(f"k{s % 2}", s) for s in range(1, 201)])
        run_until(career, lambda: consumed(root) and bool(observer.commits))
        career.hand_over(Outcome.CLEAN)
    career.close()
    table = published(root)
    assert len(table) == 200
    assert not inversions(table), inversions(table)[:5]


def test_marks_name_late_keys_and_advance_only_upwards(tmp_path: Path) -> None:
    """Pure logic: a key is late when its batch's lowest seq is at or below its mark; marks only rise, and a
    batch that moves none returns the same marks (nothing new to write); a snapshot reads back equal."""
    from tenure.career.spark._order import HighWaterMarks
    from tenure.career.spark._retry import write_parquet

    marks = HighWaterMarks({"a": 10, "b": 5})
    assert marks.late_keys({"a": (10, 12), "b": (6, 9), "c": (1, 1)}) == {"a": 10}
    assert marks.advanced({"a": 7, "b": 5}) is marks
    moved = marks.advanced({"a": 12, "c": 3})
    assert (moved.get("a"), moved.get("b"), moved.get("c"), marks.get("a")) == (12, 5, 3, 10)
    write_parquet(moved.to_arrow(), tmp_path)
    again = HighWaterMarks.read(tmp_path / "part-00000.parquet")
    assert {k: again.get(k) for k in "abc"} == {"a": 12, "b": 5, "c": 3} and len(again) == 3


def test_marks_of_a_table_written_before_marks_were_kept(tmp_path: Path) -> None:
    """An upgrade: the commit record names no marks, so the first batch computes them from the published table
    (every part file, highest seq per key); an empty or missing table gives no marks."""
    import pyarrow as pa

    from tenure.career.spark._order import HighWaterMarks

    table = tmp_path / "table"
    assert len(HighWaterMarks.of_table(table)) == 0
    table.mkdir()
    (table / "_staging").mkdir()  # never part of the table
    pq.write_table(pa.table({"key": ["a", "b", "a"], "seq": [3, 9, 7]}), table / "batch-000000000000-part-0.parquet")
    pq.write_table(pa.table({"key": ["a", "c"], "seq": [5, 1]}), table / "batch-000000000001-part-0.parquet")
    marks = HighWaterMarks.of_table(table)
    assert {k: marks.get(k) for k in "abc"} == {"a": 7, "b": 9, "c": 1} and len(marks) == 3
