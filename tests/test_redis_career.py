"""The Spark career on a Redis topic, driven directly (no runner) with a real Election fence, real Redis and real
Spark: every entry committed once with its positions in the commit record, the stream trimmed after the fenced
commit below the slowest group, and a stream that lost entries stopping the queue's leader until it is restored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import redis
import structlog
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.redis_queue import EntryId, Position, RedisTopic, committed_positions
from tenure.career.redis_streams import connect, consumer_group, ensure_topic
from tenure.career.spark import SparkCareer
from tenure.career.spark._redis_topic import LOST_RETRY_S, STREAM_LOST, Trimmer
from tenure.election import FailedBatch, GroupPaths, QueueKey, register_group
from tenure.errors import ConfigError
from tenure.service.local import wait_for
from tenure.service.ops import verify
from tenure.service.replica import load_config
from tenure.service.replica._process import _group_positions
from tests._polling import stays_for
from tests._replicas import tenure
from tests.test_spark_career import MAX_LINE, Recorder, leadership, make_config, run_until

pytestmark = pytest.mark.timeout(900)


def _add(client: redis.Redis, stream: str, first: int, count: int, key: str = "k") -> list[str]:
    """Add records ``key``-``first`` … in one pipeline; their entry ids."""
    pipe = client.pipeline(transaction=False)
    for seq in range(first, first + count):
        record = {"id": f"{key}-{seq}", "key": key, "seq": seq, "ts": seq, "payload": {"n": seq}}
        pipe.xadd(stream, {"record": json.dumps(record, separators=(",", ":"))})
    return [raw.decode() for raw in pipe.execute()]


def _rows(folder: Path, columns: list[str]) -> list[dict[str, Any]]:
    """The published rows of an output (its part files; none yet: no rows)."""
    parts = sorted(str(p) for p in folder.glob("*.parquet"))
    return ds.dataset(parts, format="parquet").to_table(columns=columns).to_pylist() if parts else []


def _ids(root: Path) -> list[str]:
    return sorted(row["id"] for row in _rows(root / "table", ["id"]))


def _quarantine(root: Path) -> list[dict[str, Any]]:
    return _rows(root / "quarantine", ["reason", "source_file", "line"])


def _committed(ctx: Any) -> dict[str, Any]:
    record, _ = ctx.fence.read_commit()
    return record or {}


def test_a_career_on_a_redis_topic_commits_each_entry_once_and_trims_behind_the_slowest_group(
        spark: Any, zk_client: KazooClient, zk_hosts: str, zk_group: str, redis_topic: RedisTopic,
        tmp_path: Path) -> None:
    """Queue 0 of a Redis topic read by the Spark career: every record written once, a bad entry (no record field)
    quarantined with ``<stream>/<id>`` and its number; each commit record carries its stream's positions
    (``through``: the batch's last entry; ``checkpointed``: where it began) and the trim point kept with it, which
    never passes the slowest registered group's checkpointed position; the stream is trimmed below it after the
    commit (XTRIM MINID), and the group's Redis consumer group shows the committed place. ``verify`` counts the
    trimmed entries as consumed with the commit record's trim point, and as lost without it; ``tenure verify --zk
    --group`` reads that commit record from ZooKeeper itself; a quarantine row whose entry id is above the trim
    point is unexpected, though its number is below it."""
    root = tmp_path / "data"
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    ids = _add(client, stream, 1, 30)
    bad_id = client.xadd(stream, {"value": "x"}).decode()
    ids += [bad_id, *_add(client, stream, 31, 30)]
    slow = {"position": Position(EntryId.parse(ids[9]), 10)}  # another group, registered, 10 entries in

    def positions(queue: int) -> dict[str, Position | None]:
        assert queue == 0
        return {"slow": slow["position"]}

    career = SparkCareer(make_config(root, queue_url=str(redis_topic), max_entries_per_trigger=20), Recorder(),
                         replica_id="r1", group=zk_group, positions=positions)
    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx):
            career.inaugurate(ctx)
            run_until(career, lambda: len(_ids(root)) == 60)
            record = _committed(ctx)
            positions_now = committed_positions(record)
            assert positions_now.through == Position(EntryId.parse(ids[-1]), 61), record["redis"]
            assert positions_now.trim is not None and positions_now.trim.n == 10  # the slow group's place
            assert [r["source_file"] for r in _quarantine(root)] == [f"{stream}/{bad_id}"]
            assert _quarantine(root)[0]["line"] == 31 and _quarantine(root)[0]["reason"] == "no_record_field"
            wait_for(lambda: int(client.xinfo_stream(stream)["length"]) == 51, 30, "the trim below the slow group")

            def shown() -> int:
                return next(int(g["entries-read"]) for g in client.xinfo_groups(stream)
                            if g["name"].decode() == consumer_group(zk_group))

            wait_for(lambda: shown() == 61, 30, "the consumer group moved to the committed place")
            # The slow group catches up: the next batch trims below this group's own checkpointed place.
            slow["position"] = Position(EntryId.parse(ids[-1]), 61)
            more = _add(client, stream, 61, 5)
            run_until(career, lambda: len(_ids(root)) == 65)
            trimmed_to = committed_positions(_committed(ctx)).trim
            assert trimmed_to is not None and trimmed_to.n == 61 and trimmed_to.below == EntryId.parse(ids[-1]).next()
            wait_for(lambda: client.xrange(stream)[0][0].decode() == more[0], 30, "the trim below this group")
            career.hand_over(Outcome.CLEAN)
            record = _committed(ctx)
    finally:
        career.close()
    assert _ids(root) == sorted([f"k-{seq}" for seq in range(1, 66)])
    # verify: the 61 entries trimmed below the recorded trim point were consumed; without it, they are lost.
    report = verify(root, max_line_bytes=MAX_LINE, queue_url=str(redis_topic), commit_records={0: record})
    assert report.ok, report.render()
    assert report.examples["streams"] == [{"stream": stream, "present": 5, "trimmed": 61, "lost": 0}]
    blind = verify(root, max_line_bytes=MAX_LINE, queue_url=str(redis_topic))
    assert not blind.ok and blind.lost == 61, blind.render()
    done = tenure("verify", "--data-root", str(root), "--queue-url", str(redis_topic), "--max-line-bytes",
                  str(MAX_LINE), "--zk", zk_hosts, "--group", zk_group, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["examples"]["streams"] == report.examples["streams"]
    # A quarantine row naming an entry above the trim point is no trimmed entry's, whatever its number says.
    (part,) = (root / "quarantine").glob("*.parquet")
    table = pq.read_table(part)
    column = table.schema.get_field_index("source_file")
    named = pa.array([f"{stream}/{more[0]}"], table.column(column).type)
    pq.write_table(table.set_column(column, "source_file", named), part)
    forged = verify(root, max_line_bytes=MAX_LINE, queue_url=str(redis_topic), commit_records={0: record})
    assert forged.examples["unexpected_quarantined"] == [{"file": more[0], "line": 31}], forged.render()
    assert not forged.ok


def test_a_stream_that_lost_entries_stops_the_leader_until_it_is_restored(
        spark: Any, zk_client: KazooClient, zk_group: str, redis_topic: RedisTopic, tmp_path: Path) -> None:
    """A stream that lost the entries the group committed (deleted whole, then 3 new ones: a lost tail) stops the
    queue's leader without a failure: ``execute`` raises nothing, one ``stream_lost`` line names the stream and both
    positions, the lost gauge is set, and nothing is committed past the hole while it lasts. Restored (its entries
    added back under their ids, then new ones), the term goes on without a restart: the new records are committed
    and the gauge is cleared."""
    root = tmp_path / "data"
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    ids = _add(client, stream, 1, 10)
    fields = [entry for _, entry in client.xrange(stream)]
    observer = Recorder()
    career = SparkCareer(make_config(root, queue_url=str(redis_topic)), observer, replica_id="r1", group=zk_group)
    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx), structlog.testing.capture_logs() as logs:
            career.inaugurate(ctx)
            run_until(career, lambda: len(_ids(root)) == 10)
            committed = _committed(ctx)["batch_id"]
            client.delete(stream)
            _add(client, stream, 100, 3, key="lost")
            run_until(career, lambda: observer.lost[-1:] == [True], timeout_s=120)
            lines = [e for e in logs if e["event"] == STREAM_LOST]
            assert len(lines) == 1 and lines[0]["stream"] == stream, lines
            assert f"the group has read to id {ids[-1]} (entry 10)" in lines[0]["error"]
            assert "entries-added 3" in lines[0]["error"]
            stays_for(lambda: (career.execute(), _committed(ctx)["batch_id"] == committed)[1],
                      2 * LOST_RETRY_S + 1, "nothing committed past the hole")
            assert len([e for e in logs if e["event"] == STREAM_LOST]) == 1  # one line, not one per attempt
            client.delete(stream)
            for entry_id, entry in zip(ids, fields, strict=True):
                client.xadd(stream, entry, id=entry_id)  # restored from a copy that holds them
            _add(client, stream, 11, 5)
            run_until(career, lambda: len(_ids(root)) == 15 and observer.lost[-1:] == [False])
            career.hand_over(Outcome.CLEAN)
    finally:
        career.close()
    assert _ids(root) == sorted([f"k-{seq}" for seq in range(1, 16)])


def test_a_queue_url_is_refused_beside_a_queue_dir_or_another_source_in_one_line(tmp_path: Path) -> None:
    """``--queue-url`` and ``--queue-dir`` name two topics: refused in one line naming both; so is a Redis topic
    with a source format of another kind, and a URL that is not a Redis topic's."""
    with pytest.raises(ConfigError, match=r"^queue_dir='/q' and queue_url=redis://h:1\?prefix=o: a group reads one "
                                          r"topic, a queue folder or a Redis topic: drop one$"):
        make_config(tmp_path, queue_url="redis://h:1?prefix=o", queue_dir=Path("/q"))
    with pytest.raises(ConfigError, match="source_format='kafka' and queue_url="):
        make_config(tmp_path, queue_url="redis://h:1", source_format="kafka")
    with pytest.raises(ConfigError, match="is not a Redis URL"):
        make_config(tmp_path, queue_url="/srv/queue")
    assert not make_config(tmp_path, queue_url="redis://h:1").file_source


def test_a_group_far_behind_keeps_its_entries_from_being_trimmed(zk_client: KazooClient, zk_group: str,
                                                                  redis_topic: RedisTopic, tmp_path: Path) -> None:
    """Trimming reads every group registered on the topic from ZooKeeper (its commit record's checkpointed
    position), never Redis's cursors: while a registered group has committed nothing, nothing is trimmed; once it
    has committed 5 entries, the stream is trimmed below its 5th entry only, whatever the fast group committed."""
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    queue = QueueKey(ensure_topic(client, redis_topic, 1).topic_id, str(redis_topic))
    fast, slow = f"{zk_group}-fast", f"{zk_group}-slow"
    for group in (fast, slow):
        register_group(zk_client, queue, group, tmp_path / group, f"id-{group}")
    ids = [EntryId.parse(i) for i in _add(client, stream, 1, 30)]

    def commit(group: str, through: int, checkpointed: int) -> None:
        record = {"batch_id": 3, "epoch": 1, "redis": {
            "stream": stream, "through": Position(ids[through - 1], through).to_offset(),
            "checkpointed": Position(ids[checkpointed - 1], checkpointed).to_offset()}}
        zk_client.create(GroupPaths(group).commit, json.dumps(record).encode(), makepath=True)

    commit(fast, 30, 20)
    positions = _group_positions(load_config({"zk": "127.0.0.1:2181", "career": "counter"}), zk_client, queue, 1)
    assert positions(0) == {fast: Position(ids[19], 20), slow: None}
    trimmer = Trimmer(redis_topic, 0, fast, positions)
    log = structlog.get_logger("test")
    try:
        assert trimmer.plan(Position(ids[19], 20), None, log) is None
        commit(slow, 8, 5)
        point = trimmer.plan(Position(ids[19], 20), None, log)
        assert point is not None and point.n == 5 and point.below == ids[4].next()
        trimmer.apply(point, Position(ids[29], 30), log)
    finally:
        trimmer.close()
    assert [EntryId.parse(i) for i, _ in client.xrange(stream)] == ids[5:]


def test_a_batch_of_a_redis_topic_set_aside_whole_keeps_its_records_for_a_replay(
        spark: Any, zk_client: KazooClient, zk_group: str, redis_topic: RedisTopic, tmp_path: Path) -> None:
    """A poison batch of a Redis topic whose split failed before is set aside whole without running: a stream has
    no file to keep, so its records are kept themselves (one file for the stream, each at its entry's number) and
    nothing is skipped — verify counts them set aside, not lost; replayed, the next batch writes them, on a quiet
    stream too: ``tenure replay`` wakes the leader through the queue's wake counter, without a new entry."""
    root = tmp_path / "data"
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    _add(client, stream, 1, 10)
    career = SparkCareer(make_config(root, queue_url=str(redis_topic)), Recorder(), replica_id="r1", group=zk_group)
    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx):
            ctx.set_aside = FailedBatch(0, 3, "ValueError: poison", split_failed=True)
            career.inaugurate(ctx)
            kept_file = root / "set-aside" / f"batch-000000000000-{stream}"
            # The commit record comes first; the kept records are published (linked out of staging) after it.
            run_until(career, lambda: (_committed(ctx).get("set_aside") or {}).get("records") == 10
                      and kept_file.exists())
            record = _committed(ctx)
            assert committed_positions(record).through == Position(EntryId.parse(client.xrange(stream)[-1][0]
                                                                                 .decode()), 10)
            kept = kept_file.read_bytes().splitlines()
            assert sorted(json.loads(line)["id"] for line in kept) == sorted(f"k-{seq}" for seq in range(1, 11))
            before = verify(root, max_line_bytes=MAX_LINE, queue_url=str(redis_topic), commit_records={0: record})
            assert before.ids_set_aside == 10 and before.lost == 0 and before.ids_written == 0, before.render()
            done = tenure("replay", "--data-root", str(root), "--batch", "0")
            assert done.returncode == 0, done.stderr
            run_until(career, lambda: len(_ids(root)) == 10)
            career.hand_over(Outcome.CLEAN)
            record = _committed(ctx)
    finally:
        career.close()
    assert int(client.xinfo_stream(stream)["entries-added"]) == 10  # nothing added to wake the leader
    # Every entry is consumed and trimmed now: no id is left in the stream to audit, hence allow_empty.
    report = verify(root, max_line_bytes=MAX_LINE, queue_url=str(redis_topic), commit_records={0: record},
                    allow_empty=True)
    assert report.ok and report.ids_written == 10 and report.ids_replayed == 10, report.render()


def test_a_retry_due_on_a_quiet_stream_is_taken_without_a_new_entry(
        spark: Any, zk_client: KazooClient, zk_group: str, redis_topic: RedisTopic, tmp_path: Path) -> None:
    """A record whose row function fails is held for retry; the stream then stays quiet. When the retry falls due
    the leader's housekeeping wakes the source through the queue's wake counter, a batch of no entry runs, and
    the record is written — without an entry added to the stream (which every group reads) — once, as verify
    finds."""
    root = tmp_path / "data"
    flag = tmp_path / "fails"
    flag.touch()
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    held = {"id": "held-1", "key": "held", "seq": 1, "ts": 1, "payload": {"fail_while": str(flag)}}
    client.xadd(stream, {"record": json.dumps(held, separators=(",", ":"))})
    _add(client, stream, 1, 4)
    settings = {"row_function": "tests.pipelines:flaky", "retry_attempts": 100, "retry_backoff_s": 2.0,
                "retry_backoff_max_s": 2.0}
    career = SparkCareer(make_config(root, queue_url=str(redis_topic), **settings), Recorder(), replica_id="r1",
                         group=zk_group)
    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx):
            career.inaugurate(ctx)
            run_until(career, lambda: len(_ids(root)) == 4 and _committed(ctx).get("retry_waiting") == 1)
            flag.unlink()
            run_until(career, lambda: "held-1" in _ids(root), timeout_s=120)
            assert _committed(ctx).get("retry_waiting") == 0
            career.hand_over(Outcome.CLEAN)
            record = _committed(ctx)
    finally:
        career.close()
    assert int(client.xinfo_stream(stream)["entries-added"]) == 5
    assert _ids(root) == sorted(["held-1", *(f"k-{seq}" for seq in range(1, 5))])
    # Every entry is consumed and trimmed now: no id is left in the stream to audit, hence allow_empty.
    report = verify(root, max_line_bytes=MAX_LINE, queue_url=str(redis_topic), commit_records={0: record},
                    allow_empty=True)
    assert report.ok and report.ids_written == 5, report.render()
