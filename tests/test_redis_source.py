"""The Redis source on a real Redis and real Spark (``local[2]``): a stream read in order by entry-id ranges, bounded
per batch, the same rows on a re-run, bad entries quarantined where they stand, a restart with the append-only file
losing nothing, and one without it stopping the stream with the loss named."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.errors import StreamingQueryException

from tenure.career.redis_queue import EntryId, RedisTopic, StreamLost
from tenure.career.redis_streams import connect
from tenure.career.spark._intake import batch_offset
from tenure.career.spark._pipeline import KIND_BAD, KIND_ROW
from tenure.career.spark._redis_source import RedisSource, classified_entries
from tenure.career.spark._session import use_driver_python
from tenure.career.wake import wake
from tenure.service.local import RedisServer

MAX = 1 << 16  # the line limit the classification is given


@pytest.fixture()
def session(spark: Any) -> Iterator[Any]:
    """A child session of the shared one with the Redis source registered."""
    child = spark.newSession()
    use_driver_python(child, "local[2]")
    child.dataSource.register(RedisSource)
    yield child


def _record(key: str, seq: int) -> bytes:
    return json.dumps({"id": f"{key}-{seq}", "key": key, "seq": seq, "ts": seq, "payload": {"n": seq}},
                      separators=(",", ":")).encode()


def _add(client: redis.Redis, stream: str, entries: list[dict[bytes, bytes]]) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for fields in entries:
        pipe.xadd(stream, fields)  # type: ignore[arg-type]
    return [raw.decode() for raw in pipe.execute()]


def _records(key: str, first: int, count: int) -> list[dict[bytes, bytes]]:
    return [{b"record": _record(key, seq)} for seq in range(first, first + count)]


def _run(session: Any, topic: RedisTopic, checkpoint: Path, **options: str) -> list[tuple[int, list[Any]]]:
    """Read queue 0 of ``topic`` through the source and its classification (Trigger.AvailableNow) on ``checkpoint``;
    each batch's id and its rows (kind, source_file, line, id, reason, value) in entry order.

    Raises:
        AssertionError: the query failed (its exception's text in the message).
    """
    batches: list[tuple[int, list[Any]]] = []

    def collect(df: Any, batch_id: int) -> None:
        rows = df.where("kind != 'file'").select("kind", "source_file", "line", "id", "reason", "value").collect()
        batches.append((batch_id, sorted(rows, key=lambda r: r["line"])))

    raw = session.readStream.format("tenure_redis").option("url", str(topic)).options(**options).load()
    query = (classified_entries(raw, MAX).writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(180), "the query did not end"
    error = query.exception()
    assert error is None, str(error)
    return batches


def _failure(session: Any, topic: RedisTopic, checkpoint: Path) -> str:
    """Run as :func:`_run` does, expecting the query to fail; its exception's text."""
    raw = session.readStream.format("tenure_redis").option("url", str(topic)).load()
    query = (classified_entries(raw, MAX).writeStream.foreachBatch(lambda df, _b: df.count())
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as failed:
        query.awaitTermination(180)
    return str(failed.value)


def _ids(batches: list[tuple[int, list[Any]]]) -> list[str]:
    return [row["id"] for _, rows in batches for row in rows if row["kind"] == KIND_ROW]


def _newest_batch(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())


def test_a_stream_is_read_in_order_bounded_per_batch_and_a_rerun_of_a_batch_reads_the_same_rows(
        session: Any, redis_topic: RedisTopic, tmp_path: Path) -> None:
    """250 entries at 100 a batch are three batches of entries 1–100, 101–200, 201–250 in id order, each row numbered
    as Redis counts its entry; each end offset names the batch's last id and number. Spark's re-run of the last
    batch (its commit removed, as after a crash before it) reads the very same rows, not the 30 entries added since,
    which the next batch reads."""
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    ids = _add(client, stream, _records("k", 1, 250))
    checkpoint = tmp_path / "checkpoint"
    first = _run(session, redis_topic, checkpoint, maxEntriesPerTrigger="100", partitions="2")
    assert [len(rows) for _, rows in first] == [100, 100, 50]
    assert _ids(first) == [f"k-{seq}" for seq in range(1, 251)]
    assert [row["line"] for _, rows in first for row in rows] == list(range(1, 251))
    assert [(row["source_file"]) for row in first[1][1][:1]] == [f"{stream}/{ids[100]}"]
    assert batch_offset(checkpoint, 0)["id"] == ids[99] and batch_offset(checkpoint, 0)["n"] == 100
    assert {"id": ids[249], "n": 250}.items() <= batch_offset(checkpoint, 2).items()

    for name in ("2", ".2.crc"):  # Spark's commit of batch 2 and its checksum
        (checkpoint / "commits" / name).unlink()
    newer = _add(client, stream, _records("k", 251, 30))
    again = _run(session, redis_topic, checkpoint, maxEntriesPerTrigger="100", partitions="2")
    assert again[0] == first[2]  # batch 2, re-run from its offsets
    assert again[1][0] == 3 and _ids(again[1:]) == [f"k-{seq}" for seq in range(251, 281)]
    assert again[1][1][-1]["source_file"] == f"{stream}/{newer[-1]}"


def test_a_planned_batch_whose_entries_were_deleted_under_it_fails_naming_both_counts(
        session: Any, redis_topic: RedisTopic, tmp_path: Path) -> None:
    """A re-run of a planned batch whose range lost an entry since (an XDEL) reads one entry fewer than its offsets
    count: the batch fails with one line naming the stream, the range and both counts, and nothing of it is
    committed."""
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    ids = _add(client, stream, _records("k", 1, 20))
    checkpoint = tmp_path / "checkpoint"
    _run(session, redis_topic, checkpoint, maxEntriesPerTrigger="10")
    for name in ("1", ".1.crc"):  # batch 1 planned, not committed: Spark re-runs it from its offsets
        (checkpoint / "commits" / name).unlink()
    client.xdel(stream, ids[14])
    lost = StreamLost.found_in(_failure(session, redis_topic, checkpoint))
    assert lost is not None and str(lost) == (
        f"Redis stream {stream} holds 9 entries in ({ids[9]}, {ids[19]}] where its batch planned 10: entries were "
        "deleted under a planned batch; nothing of it is committed")
    assert not (checkpoint / "commits" / "1").exists()


def test_a_bytes_bound_takes_at_least_one_entry_and_splits_a_batch_into_read_tasks(
        session: Any, redis_topic: RedisTopic, tmp_path: Path) -> None:
    """Entries of about 1 KB under a 3.5 KB bound are read three a batch, an entry larger than the bound alone;
    a batch of several pages is read by two tasks, cut at a page end, and still numbers its rows 1 by 1."""
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    padded = [{b"record": _record("k", seq)[:-1] + b',"pad":"' + b"x" * 1000 + b'"}'} for seq in range(1, 8)]
    big = {b"record": _record("k", 8)[:-1] + b',"pad":"' + b"x" * 10_000 + b'"}'}
    _add(client, stream, [*padded, big, *padded[:1]])
    batches = _run(session, redis_topic, tmp_path / "checkpoint", maxBytesPerTrigger="3500")
    assert [len(rows) for _, rows in batches] == [3, 3, 1, 1, 1]
    _add(client, redis_topic.stream(1), _records("k", 1, 2500))
    many = _run(session, RedisTopic(redis_topic.url, redis_topic.prefix), tmp_path / "other", queue="1",
                maxEntriesPerTrigger="2500")
    cuts = batch_offset(tmp_path / "other", 0)["cuts"]
    assert [cut["n"] for cut in cuts] == [1000]
    assert [row["line"] for _, rows in many for row in rows] == list(range(1, 2501))


def test_a_bad_entry_in_the_middle_of_a_stream_is_one_bad_row_with_its_stream_and_id(
        session: Any, redis_topic: RedisTopic, tmp_path: Path) -> None:
    """An entry without a record field, one with other fields and one whose record is not JSON are each one bad row
    with its reason, ``<stream>/<id>`` as its source and its number as its line (the refused entries' fields as
    its value); the records around them are read, in order."""
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    ids = _add(client, stream, [*_records("k", 1, 3), {b"payload": b"x"}, *_records("k", 4, 1),
                                {b"record": _record("k", 5), b"source": b"crm"}, {b"record": b'{"id":'},
                                *_records("k", 5, 1)])
    rows = [row for _, batch in _run(session, redis_topic, tmp_path / "checkpoint") for row in batch]
    assert [row["id"] for row in rows if row["kind"] == KIND_ROW] == ["k-1", "k-2", "k-3", "k-4", "k-5"]
    bad = [(row["source_file"], row["line"], row["reason"], row["value"]) for row in rows if row["kind"] == KIND_BAD]
    assert bad == [
        (f"{stream}/{ids[3]}", 4, "no_record_field", '{"payload":"x"}'),
        (f"{stream}/{ids[5]}", 6, "other_fields", json.dumps({"record": _record("k", 5).decode(), "source": "crm"},
                                                             separators=(",", ":"))),
        (f"{stream}/{ids[6]}", 7, "bad_json", '{"id":'),
    ]


def test_redis_restarted_with_its_append_only_file_loses_and_repeats_nothing(
        session: Any, private_redis: RedisServer, tmp_path: Path) -> None:
    """Redis SIGKILLed right after acknowledging 60 entries (``appendfsync always``) and started again on its
    append-only file: the group resumes after the 60 it read, and the 40 added since are read once each, in order."""
    topic = RedisTopic.parse(f"{private_redis.url}?prefix=orders")
    checkpoint = tmp_path / "checkpoint"
    _add(connect(topic), topic.stream(0), _records("k", 1, 60))
    first = _run(session, topic, checkpoint, maxEntriesPerTrigger="25")
    private_redis.kill(signal.SIGKILL)
    private_redis.start()
    _add(connect(topic), topic.stream(0), _records("k", 61, 40))
    second = _run(session, topic, checkpoint, maxEntriesPerTrigger="25")
    assert _ids(first) == [f"k-{seq}" for seq in range(1, 61)]
    assert _ids(second) == [f"k-{seq}" for seq in range(61, 101)]


def test_redis_restarted_without_its_append_only_file_stops_the_stream_naming_both_positions(
        session: Any, private_redis: RedisServer, tmp_path: Path) -> None:
    """Redis that lost its data (SIGKILLed, started again without its append-only file) and took 10 new entries:
    the planner raises StreamLost, recognisable in the query's exception, naming the stream, the group's position
    (the 60th entry's id) and Redis's (entries-added 10); no batch is planned past the hole. Refilled past the
    group's count (110 entries), the stream is still refused: its entries are not the ones the group counted."""
    topic = RedisTopic.parse(f"{private_redis.url}?prefix=orders")
    stream = topic.stream(0)
    checkpoint = tmp_path / "checkpoint"
    ids = _add(connect(topic), stream, _records("k", 1, 60))
    assert len(_ids(_run(session, topic, checkpoint))) == 60
    newest = _newest_batch(checkpoint)
    private_redis.kill(signal.SIGKILL)
    private_redis.appendonly = False
    private_redis.start()
    _add(connect(topic), stream, _records("k", 61, 10))
    lost = StreamLost.found_in(_failure(session, topic, checkpoint))
    assert lost is not None and lost.stream == stream
    assert str(lost).startswith(f"Redis stream {stream} lost its tail: the group has read to id {ids[-1]} (entry 60), "
                                "Redis has last-generated-id ")
    assert "and entries-added 10; nothing past it is read" in str(lost)
    assert _newest_batch(checkpoint) == newest
    _add(connect(topic), stream, _records("k", 71, 100))
    refilled = StreamLost.found_in(_failure(session, topic, checkpoint))
    assert refilled is not None and "holds other entries than the group read" in str(refilled)
    assert _newest_batch(checkpoint) == newest
    assert EntryId.parse(ids[-1]) < EntryId.parse(connect(topic).xinfo_stream(stream)["first-entry"][0])


def test_a_wake_count_runs_a_batch_of_no_entry_that_keeps_the_streams_position(session: Any, redis_topic: RedisTopic,
                                                                               tmp_path: Path) -> None:
    """With its queue's wake counter, a stream with nothing new runs one batch of no entry when the count moves —
    its end offset the start's ``{id, n}`` with the new ``wake``, so it names no entry and replays as it ran — and
    none when the count stays; the stream itself is untouched (no entry added for the wake-up)."""
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    ids = _add(client, stream, _records("k", 1, 5))
    checkpoint, counter = tmp_path / "checkpoint", tmp_path / "wake"
    first = _run(session, redis_topic, checkpoint, wake=str(counter))
    assert [len(rows) for _, rows in first] == [5]
    assert _run(session, redis_topic, checkpoint, wake=str(counter)) == []
    assert wake(counter) == 1
    woken = _run(session, redis_topic, checkpoint, wake=str(counter))
    assert woken == [(1, [])]
    assert batch_offset(checkpoint, 1) == {"id": ids[-1], "n": 5, "wake": 1}
    assert _run(session, redis_topic, checkpoint, wake=str(counter)) == []
    assert int(client.xinfo_stream(stream)["entries-added"]) == 5
