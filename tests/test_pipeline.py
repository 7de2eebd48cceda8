"""The consumer's pure DataFrame functions: classification, quarantine, dedup and per-key order (real Spark)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tenure.career.queue import REASONS, classify_line
from tenure.career.spark._dedup import DedupStore, load_store, published_batches, write_judged
from tenure.career.spark._pipeline import (
    QUARANTINE_COLUMNS,
    SMALL_BATCH_RECORDS,
    TABLE_COLUMNS,
    classified_batch,
    classified_stream,
    output_partitions,
    quarantine_rows,
    stamped,
    table_rows,
    without_repeats,
)
from tenure.career.spark._session import use_driver_python


def rec(i: int | str, key: str = "k", seq: int = 1, **extra: Any) -> bytes:
    """One valid JSON line (without its newline)."""
    body: dict[str, Any] = {"id": f"m{i}", "key": key, "seq": seq, "ts": 1_700_000_000_000, "payload": {"n": i}}
    body.update(extra)
    return json.dumps(body).encode()


def put(landing: Path, name: str, lines: list[bytes], *, trailing_newline: bool = True) -> Path:
    """Write a queue file atomically: under a hidden name, then renamed into place (as producers must)."""
    landing.mkdir(parents=True, exist_ok=True)
    hidden = landing / f".{name}.tmp"
    body = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    hidden.write_bytes(body)
    os.replace(hidden, landing / name)
    return landing / name


# Spark's start-up (and, here, the warm-up) counts toward the first test: under a loaded CI machine it can
# take minutes, more than the suite-wide 300 s default.
pytestmark = pytest.mark.timeout(900)

MAX = 200  # max_line_bytes in these tests, so an oversized line stays small

# name → (line bytes, expected reason or None for a valid line)
CASES: dict[str, tuple[bytes, str | None]] = {
    "valid": (rec(1), None),
    "valid_null_payload": (b'{"id":"a","key":"k","seq":1,"ts":2,"payload":null}', None),
    "valid_extra_field": (rec(2, extra="x"), None),
    "valid_crlf_body": (b'{"id":"c","key":"k","seq":1,"ts":2,"payload":1}\r', None),
    "oversized": (b'{"id":"' + b"x" * MAX + b'"}', "oversized"),
    "empty_line": (b"", "empty_line"),
    "blank_line": (b"   \t\r", "empty_line"),
    "not_utf8": (b'{"id":"\xff\xfe","key":"k","seq":1,"ts":2,"payload":1}', "not_utf8"),
    "bad_json": (b'{"id": "a", ', "bad_json"),
    "bad_json_nan": (b'{"id":"a","key":"k","seq":1,"ts":2,"payload":NaN}', "bad_json"),
    "bad_json_bom": ('\ufeff{"id":"a","key":"k","seq":1,"ts":2,"payload":1}'.encode(), "bad_json"),
    "not_object": (b"[1, 2, 3]", "not_object"),
    "not_object_string": (b'"hello"', "not_object"),
    "missing_field:id": (b'{"key":"k","seq":1,"ts":2,"payload":1}', "missing_field:id"),
    "missing_field:key": (b'{"id":"a","seq":1,"ts":2,"payload":1}', "missing_field:key"),
    "missing_field:seq": (b'{"id":"a","key":"k","ts":2,"payload":1}', "missing_field:seq"),
    "missing_field:ts": (b'{"id":"a","key":"k","seq":1,"payload":1}', "missing_field:ts"),
    "missing_field:payload": (b'{"id":"a","key":"k","seq":1,"ts":2}', "missing_field:payload"),
    "bad_type:id": (b'{"id":7,"key":"k","seq":1,"ts":2,"payload":1}', "bad_type:id"),
    "bad_type:key": (b'{"id":"a","key":null,"seq":1,"ts":2,"payload":1}', "bad_type:key"),
    "bad_type:seq_bool": (b'{"id":"a","key":"k","seq":true,"ts":2,"payload":1}', "bad_type:seq"),
    "bad_type:seq_float": (b'{"id":"a","key":"k","seq":5.0,"ts":2,"payload":1}', "bad_type:seq"),
    "bad_type:seq_string": (b'{"id":"a","key":"k","seq":"5","ts":2,"payload":1}', "bad_type:seq"),
    "bad_type:ts_big": (b'{"id":"a","key":"k","seq":1,"ts":99999999999999999999,"payload":1}', "bad_type:ts"),
}


def test_every_reason_has_a_case() -> None:
    """The case table covers every reason of the quarantine vocabulary but wrong_queue, which a line has only in a
    topic of several queues (its own test below)."""
    assert {reason for _, reason in CASES.values() if reason} == set(REASONS) - {"wrong_queue"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_classify_line(name: str) -> None:
    """The queue's one classifier (used by the pipeline and by verify) gives each case its reason, or a record."""
    raw, expected = CASES[name]
    record, reason = classify_line(raw, MAX)
    assert reason == expected
    assert (record is None) == (expected is not None)


@pytest.fixture(scope="module")
def session(spark: Any) -> Any:
    """The shared SparkSession, its Python workers on this interpreter (the pipeline needs pyarrow)."""
    use_driver_python(spark, "local[2]")
    return spark


@pytest.fixture(scope="module")
def per_case(session: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """Each case in a file of its own, classified by Spark in one job: file name → its rows."""
    landing = tmp_path_factory.mktemp("cases") / "landing"
    for name, (raw, _) in CASES.items():
        put(landing, f"{name.replace(':', '_')}.jsonl", [raw])
    rows = classified_batch(session.read.format("binaryFile").load(str(landing)), MAX).collect()
    by_file: dict[str, list[Any]] = {}
    for row in rows:
        by_file.setdefault(row.source_file.rsplit("/", 1)[-1], []).append(row)
    return by_file


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_input_class_through_spark(per_case: dict[str, list[Any]], name: str) -> None:
    """Through Spark, each input class lands on the right side: a record, or a bad line with its reason."""
    _, expected = CASES[name]
    rows = per_case[f"{name.replace(':', '_')}.jsonl"]
    lines = [r for r in rows if r.kind != "file"]
    markers = [r for r in rows if r.kind == "file"]
    assert len(lines) == 1 and lines[0].line == 1
    assert len(markers) == 1 and markers[0].valid_lines == (1 if expected is None else 0)
    if expected is None:
        assert lines[0].kind == "row" and lines[0].reason is None
    else:
        assert (lines[0].kind, lines[0].reason) == ("bad", expected)


def test_mixed_file_lines_numbered_and_split(session: Any, tmp_path: Path) -> None:
    """A file of valid and bad lines: records out, bad lines quarantined with their 1-based line numbers."""
    landing = tmp_path / "landing"
    put(landing, "mixed.jsonl", [rec(1), b"{oops", rec(2, seq=2), b"", b"[]", rec(3, seq=3)])
    df = classified_batch(session.read.format("binaryFile").load(str(landing)), MAX)
    rows = df.collect()
    good = sorted((r.line, r.id, r.seq) for r in rows if r.kind == "row")
    bad = sorted((r.line, r.reason, r.value) for r in rows if r.kind == "bad")
    assert good == [(1, "m1", 1), (3, "m2", 2), (6, "m3", 3)]
    assert bad == [(2, "bad_json", "{oops"), (4, "empty_line", ""), (5, "not_object", "[]")]
    quarantine = quarantine_rows(df, epoch=7, batch_id=3)
    assert tuple(quarantine.columns) == QUARANTINE_COLUMNS
    assert {(r._epoch, r._batch) for r in quarantine.collect()} == {(7, 3)}


def test_a_record_of_another_queue_is_quarantined_as_wrong_queue(session: Any, tmp_path: Path) -> None:
    """Classified as found in queue 0 of a topic of four, a record whose key routes to queue 1 is a bad line
    (wrong_queue, its value the line) and one of queue 0's key a record; in a topic of one queue both are records;
    the quarantine rows of queue 2 of four carry _queue 2."""
    landing = tmp_path / "landing"
    put(landing, "a.jsonl", [rec(1, key="acct-7"), rec(2, key="k1")])  # acct-7: queue 1 of 4, k1: queue 0
    raw = session.read.format("binaryFile").load(str(landing))
    rows = classified_batch(raw, MAX, route=(0, 4)).collect()
    assert [(r.line, r.reason, r.value) for r in rows if r.kind == "bad"] == [
        (1, "wrong_queue", rec(1, key="acct-7").decode())]
    assert [r.id for r in rows if r.kind == "row"] == ["m2"]
    assert sorted(r.id for r in classified_batch(raw, MAX).collect() if r.kind == "row") == ["m1", "m2"]
    quarantine = quarantine_rows(classified_batch(raw, MAX, route=(2, 4)), epoch=7, batch_id=3, queue=2)
    assert tuple(quarantine.columns) == (*QUARANTINE_COLUMNS, "_queue")
    assert {(r.reason, r._queue) for r in quarantine.collect()} == {("wrong_queue", 2)}


def test_trailing_newline_and_empty_file(session: Any, tmp_path: Path) -> None:
    """A final newline adds no empty line, a missing one loses no line, and an empty file yields nothing."""
    landing = tmp_path / "landing"
    put(landing, "with.jsonl", [rec(1), rec(2)])
    put(landing, "without.jsonl", [rec(3), rec(4)], trailing_newline=False)
    put(landing, "empty.jsonl", [])
    rows = classified_batch(session.read.format("binaryFile").load(str(landing)), MAX).collect()
    lines = sorted((r.source_file.rsplit("/", 1)[-1], r.line, r.kind) for r in rows if r.kind != "file")
    assert lines == [("with.jsonl", 1, "row"), ("with.jsonl", 2, "row"),
                     ("without.jsonl", 1, "row"), ("without.jsonl", 2, "row")]
    assert not [r for r in rows if "empty.jsonl" in r.source_file]


def test_oversized_and_non_utf8_lines_are_kept_for_quarantine(session: Any, tmp_path: Path) -> None:
    """An oversized line is quarantined unparsed; a non-UTF-8 line keeps its text with replacement marks."""
    landing = tmp_path / "landing"
    put(landing, "odd.jsonl", [b"z" * (MAX + 1), b'{"id":"\xc3\x28"}', rec(1)])
    rows = classified_batch(session.read.format("binaryFile").load(str(landing)), MAX).collect()
    bad = {r.line: r for r in rows if r.kind == "bad"}
    assert bad[1].reason == "oversized" and len(bad[1].value) == MAX + 1
    assert bad[2].reason == "not_utf8" and "\ufffd" in bad[2].value
    assert [r.id for r in rows if r.kind == "row"] == ["m1"]


@pytest.mark.parametrize("partitions", [2, 1], ids=["by-key", "small-batch-coalesced"])
def test_order_per_key_one_part_file_each(session: Any, tmp_path: Path, partitions: int) -> None:
    """Output rows: each key's rows of a batch sit in one part file, in (key, seq) order, in output shape — also
    when a small batch is written as one part file without a shuffle (read from two input files, so the rows
    start in two partitions)."""
    landing = tmp_path / "landing"
    lines = [rec(f"{key}{seq}", key=key, seq=seq) for seq in (5, 3, 9, 1, 7) for key in ("a", "b", "c", "d")]
    put(landing, "shuffled-1.jsonl", lines[10:])
    put(landing, "shuffled-2.jsonl", lines[:10])
    df = classified_batch(session.read.format("binaryFile").load(str(landing)), MAX).repartition(2)
    assert output_partitions(len(lines), 2) == 1 and output_partitions(SMALL_BATCH_RECORDS + 1, 2) == 2
    out = table_rows(df, epoch=1, batch_id=0, partitions=partitions)
    assert tuple(out.columns) == TABLE_COLUMNS
    target = tmp_path / "out"
    out.write.parquet(str(target))
    seen: dict[str, list[int]] = {}
    owner: dict[str, str] = {}
    for part in sorted(target.glob("part-*.parquet")):
        table = pq.read_table(part).to_pylist()
        for row in table:
            assert owner.setdefault(row["key"], part.name) == part.name, "a key spans two part files"
            seen.setdefault(row["key"], []).append(row["seq"])
        keys = [(row["key"], row["seq"]) for row in table]
        assert keys == sorted(keys)
    assert seen == {key: [1, 3, 5, 7, 9] for key in ("a", "b", "c", "d")}
    assert len(list(target.glob("part-*.parquet"))) <= partitions
    assert json.loads(table[0]["payload"])["n"].startswith(table[0]["key"])


_DAY_MS = 24 * 3600 * 1000


def _stream_once(session: Any, landing: Path, checkpoint: Path, dedup: Path) -> list[Any]:
    """Run the streaming side over everything in ``landing`` (availableNow), each batch without its repeats as the
    batch writer drops them: the store loaded from the files in ``dedup`` that earlier batches published, each
    batch publishing its own. Returns the rows kept."""
    rows: list[Any] = []
    published = published_batches(dedup)
    store = load_store(dedup, published[-1][0] if published else None, _DAY_MS)

    def collect(df: Any, batch_id: int) -> None:
        df.persist()
        try:
            kept, judged = without_repeats(df, store, batch_id)
            rows.extend(kept.collect())
        finally:
            df.unpersist()
        write_judged(judged, dedup / "_staging")
        (dedup / f"batch-{batch_id:012d}-part-00000.parquet").hardlink_to(dedup / "_staging" / "part-00000.parquet")
        store.apply(judged)

    query = (
        classified_stream(session, source_format="binaryFile", path=str(landing),
                          options={"pathGlobFilter": "*.jsonl", "maxFilesPerTrigger": "1"}, schema=None,
                          max_line_bytes=MAX, source_file_expr="", line_expr="")
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    return rows


def test_dedup_within_and_across_batches(session: Any, tmp_path: Path) -> None:
    """A repeated id is emitted once: repeats in the same file, in later files and in a later run (a restarted
    query on the same checkpoint, as after a failover, its store loaded from the files the batches published) are
    all dropped; bad lines are never deduplicated away, and every file read shows up as a marker."""
    landing, checkpoint, dedup = tmp_path / "landing", tmp_path / "checkpoint", tmp_path / "dedup"
    dedup.mkdir()
    put(landing, "a.jsonl", [rec(1), rec(2, seq=2), rec(1), b"bad", b"bad"])
    put(landing, "b.jsonl", [rec(2, seq=2), rec(3, seq=3)])
    first = _stream_once(session, landing, checkpoint, dedup)
    put(landing, "c.jsonl", [rec(3, seq=3), rec(1), rec(4, seq=4), b"bad"])
    second = _stream_once(session, landing, checkpoint, dedup)
    assert sorted(r.id for r in first if r.kind == "row") == ["m1", "m2", "m3"]
    assert sorted(r.id for r in second if r.kind == "row") == ["m4"]
    assert len([r for r in first if r.kind == "bad"]) == 2
    assert len([r for r in second if r.kind == "bad"]) == 1
    markers = {r.source_file.rsplit("/", 1)[-1]: r.valid_lines for r in first + second if r.kind == "file"}
    assert markers == {"a.jsonl": 3, "b.jsonl": 2, "c.jsonl": 3}


def test_a_batch_without_repeats_keeps_the_first_copy_by_source_and_line_and_drops_what_the_store_remembers(
    session: Any, tmp_path: Path
) -> None:
    """Batch by batch (a folder of queue files each, in two partitions whose order is shuffled): an id repeated in
    its batch is kept once, from the lowest file and line; an id a committed batch saw is dropped wherever it
    comes; bad lines and file markers stay (their keys are their positions); the store moves only when applied."""
    store = DedupStore(window_ms=24 * 3600 * 1000)
    batches = [
        {"b.jsonl": [rec(1, seq=9), rec(2, seq=2)], "a.jsonl": [rec(3, seq=3), rec(1), b"bad", b"bad"]},
        {"c.jsonl": [rec(3, seq=3), rec(4, seq=4), b"bad"], "d.jsonl": [rec(4, seq=4), rec(2, seq=2)]},
    ]
    kept_ids = []
    for batch_id, files in enumerate(batches):
        landing = tmp_path / f"batch-{batch_id}"
        for name, lines in files.items():
            put(landing, name, lines)
        raw = session.read.format("binaryFile").load(str(landing))
        batch = stamped(classified_batch(raw, MAX)).repartition(2).persist()
        try:
            kept, judged = without_repeats(batch, store, batch_id)
            rows = kept.collect()
        finally:
            batch.unpersist()
        store.apply(judged)
        kept_ids.append(sorted((r.id, r.seq, r.source_file.rsplit("/", 1)[-1], r.line) for r in rows
                               if r.kind == "row"))
        assert len([r for r in rows if r.kind == "bad"]) == sum(line == b"bad" for f in files.values() for line in f)
        assert sorted(r.source_file.rsplit("/", 1)[-1] for r in rows if r.kind == "file") == sorted(files)
        assert judged.repeat_count == sum(1 for f in files.values() for line in f if line != b"bad") - \
            len(kept_ids[-1])
    assert kept_ids == [[("m1", 1, "a.jsonl", 2), ("m2", 2, "b.jsonl", 2), ("m3", 3, "a.jsonl", 1)],
                        [("m4", 4, "c.jsonl", 2)]]
