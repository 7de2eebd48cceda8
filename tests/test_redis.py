"""A Redis topic's pieces on a real Redis (Debian's redis-server, append-only file on, ``appendfsync always``): the
URL and the entry, the counting rules that tell loss from lag, trimming behind the slowest group, the operators'
consumer groups, the producer, verify's reader and the embedded server; no Spark."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import redis

from tenure.career.queue import classify_line, queue_of
from tenure.career.redis_queue import (
    START,
    EntryId,
    Position,
    RedisTopic,
    StreamLost,
    StreamState,
    TrimPoint,
    account_stream,
    entry_line,
    trim_point,
)
from tenure.career.redis_streams import (
    connect,
    consumer_group,
    ensure_group,
    ensure_topic,
    entries,
    show_progress,
    stream_state,
    trim,
)
from tenure.career.set_aside import MANIFEST, REPLAY_REQUEST, published, write_json
from tenure.career.spark._layout import Layout
from tenure.career.wake import read_wake
from tenure.errors import ConfigError
from tenure.service.local import RedisServer, free_port
from tenure.service.ops import ProducerError, ReplayError, produce, request_replay
from tenure.service.ops._produce import WriteRetry
from tenure.service.ops._produce._redis import RedisProducer
from tenure.service.ops._verify import account_topic, stream_lines
from tests._replicas import TENURE, descendants, tenure

# -- the contract -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "server", "prefix", "shown"), [
    ("redis://127.0.0.1:6379?prefix=orders", "redis://127.0.0.1:6379", "orders",
     "redis://127.0.0.1:6379?prefix=orders"),
    ("redis://10.0.0.5:6380/2", "redis://10.0.0.5:6380/2", "tenure", "redis://10.0.0.5:6380/2?prefix=tenure"),
    ("rediss://app:s3cret@cache:6379/0?prefix=o&ssl_cert_reqs=none", "rediss://app:s3cret@cache:6379/0?ssl_cert_reqs=none",
     "o", "rediss://app:***@cache:6379/0?ssl_cert_reqs=none&prefix=o"),
    ("unix:///run/redis.sock?prefix=q", "unix:///run/redis.sock", "q", "unix:///run/redis.sock?prefix=q"),
], ids=["prefix", "database-default-prefix", "tls-credentials-options", "socket"])
def test_a_topic_url_names_the_server_as_redis_py_takes_it_and_the_prefix(url: str, server: str, prefix: str,
                                                                         shown: str) -> None:
    """The prefix is taken out of the URL (redis-py gets the rest: credentials, database, TLS and its options), queue
    k is the stream ``<prefix>:<k>`` (``<prefix>:0`` for a topic of one queue), and a password never shows."""
    topic = RedisTopic.parse(url)
    assert (topic.url, topic.prefix, str(topic)) == (server, prefix, shown)
    assert topic.streams(3) == [f"{prefix}:0", f"{prefix}:1", f"{prefix}:2"]
    assert topic.topic_key == f"{prefix}:topic"


@pytest.mark.parametrize(("url", "message"), [
    ("/srv/queue", "is not a Redis URL"),
    ("redis://h:1?prefix=", "is not a stream prefix"),
    ("redis://:pw@h:1?prefix=a%20b", r"prefix='a b' in redis://:\*\*\*@h:1\?prefix=a%20b is not a stream prefix"),
])
def test_a_url_that_names_no_topic_is_refused_in_one_line(url: str, message: str) -> None:
    """Not a Redis URL, an empty prefix or one with a space is a ConfigError naming it (the password hidden)."""
    with pytest.raises(ConfigError, match=message):
        RedisTopic.parse(url)


def test_entry_ids_are_ordered_as_redis_orders_them() -> None:
    """Ids compare by (ms, seq), the next id after the highest seq of a millisecond is the next millisecond's 0, and
    anything but two unsigned 64-bit numbers is refused."""
    assert EntryId.parse(b"10-2") < EntryId.parse("10-10") < EntryId.parse("11-0")
    assert EntryId(7, (1 << 64) - 1).next() == EntryId(8, 0)
    for bad in ("10", "10-", "-1-2", "1-18446744073709551616", "a-b"):
        with pytest.raises(ValueError, match="is not a stream entry id"):
            EntryId.parse(bad)


@pytest.mark.parametrize(("fields", "line", "reason"), [
    ({b"record": b'{"id":"a"}'}, b'{"id":"a"}', None),
    ({b"record": b""}, b"", None),
    ({b"payload": b"{}"}, None, "no_record_field"),
    ({b"record": b"{}", b"source": b"crm"}, None, "other_fields"),
], ids=["record", "empty-record", "no-record", "other-fields"])
def test_an_entry_holds_a_line_only_in_its_one_record_field(fields: dict[bytes, bytes], line: bytes | None,
                                                             reason: str | None) -> None:
    """An entry is a record's line only when ``record`` is its one field; the line is then classify_line's to judge
    (an empty one is ``empty_line`` there), and an entry without it or with other fields is refused with its reason."""
    assert entry_line(fields) == (line, reason)
    if line is not None and not line:
        assert classify_line(line) == (None, "empty_line")


# -- loss told from lag -------------------------------------------------------------------------------------------


def _state(last: int, added: int, length: int, first: int | None, deleted: int = 0) -> StreamState:
    """A stream whose ids are ``<k>-0`` for entry number k (so ids and numbers read alike in the cases)."""
    return StreamState("s:0", EntryId(last, 0), added, length, EntryId(first, 0) if first is not None else None,
                       EntryId(deleted, 0))


@pytest.mark.parametrize(("state", "position", "base"), [
    (_state(100, 100, 100, 1), Position(EntryId(40, 0), 40), 40),
    (_state(100, 100, 60, 41), Position(EntryId(40, 0), 40), 40),
    (_state(100, 100, 100, 1), Position(EntryId(100, 0), 100), 100),
    (_state(100, 100, 70, 31), START, 30),
    (_state(0, 0, 0, None), START, 0),
    (_state(100, 100, 99, 1, deleted=20), Position(EntryId(40, 0), 40), 40),
    (_state(100, 100, 59, 42, deleted=41), Position(EntryId(41, 0), 41), 41),
], ids=["lag", "trimmed-below", "caught-up", "first-read-of-a-trimmed-stream", "empty", "xdel-below",
        "xdel-trimmed-away"])
def test_a_stream_that_only_lags_is_read_on_from_the_groups_position(state: StreamState, position: Position,
                                                                      base: int) -> None:
    """Entries not read yet, trimmed below the position, or deleted below it are lag: the next entry read is
    numbered ``base + 1`` (a group's first read of a trimmed stream starts at its first entry)."""
    assert state.check(position) == base


@pytest.mark.parametrize(("state", "position", "what"), [
    (_state(30, 30, 30, 1), Position(EntryId(40, 0), 40), "lost its tail"),
    (_state(0, 0, 0, None), Position(EntryId(40, 0), 40), "lost its tail"),
    (_state(100, 30, 30, 71), Position(EntryId(40, 0), 40), "lost its tail"),
    (_state(100, 100, 40, 61), Position(EntryId(40, 0), 40), "had entries 41 to 60 removed"),
    (_state(100, 100, 99, 1, deleted=50), Position(EntryId(40, 0), 40), r"deleted \(XDEL"),
    (_state(200, 60, 60, 141), Position(EntryId(40, 0), 40), "holds other entries than the group read"),
], ids=["last-id-and-counter-below", "stream-gone", "counter-below", "trimmed-above", "xdel-above", "refilled"])
def test_a_stream_that_lost_entries_the_group_has_not_read_raises_naming_both_positions(
        state: StreamState, position: Position, what: str) -> None:
    """A lost tail (last id or counter below the position: a restart without the append-only file, a lagging replica
    promoted), entries removed above the position, or other entries where the group's were, raise StreamLost: one
    line naming the stream, the group's position and Redis's, and that nothing past it is read."""
    with pytest.raises(StreamLost, match=what) as raised:
        state.check(position)
    message = str(raised.value)
    assert raised.value.stream == "s:0" and "\n" not in message and message.startswith("Redis stream s:0 ")
    assert f"the group has read to {position}" in message
    assert f"last-generated-id {state.last_id} and entries-added {state.entries_added}" in message


def test_a_batch_to_the_last_entry_must_number_it_as_redis_does() -> None:
    """Planned to the stream's last entry, a batch's end must be numbered ``entries-added``: a refilled stream
    whose first id happens to sit below the group's is caught there."""
    state = _state(90, 60, 60, 31)
    state.check_end(Position(EntryId(90, 0), 60))
    state.check_end(Position(EntryId(80, 0), 55))  # not its last entry: nothing to compare with
    with pytest.raises(StreamLost, match="numbers its last entry 60 where the group counts 70"):
        state.check_end(Position(EntryId(90, 0), 70))


def test_the_loss_error_is_recognised_in_a_spark_querys_exception_text() -> None:
    """The planner's error reaches the career as text (a Python traceback in the query's exception): found_in gives
    it back with its stream and line, and finds nothing in another error's text."""
    error = StreamLost("orders:2", "Redis stream orders:2 lost its tail: the group has read to id 5-0 (entry 5)")
    text = (f"[STREAMING_PYTHON_RUNNER_INITIALIZATION_FAILURE] …\nTraceback (most recent call last):\n  File …\n"
            f"tenure.career.redis_queue.StreamLost: {error}\n SQLSTATE: 38000")
    found = StreamLost.found_in(text)
    assert found is not None and (found.stream, str(found)) == ("orders:2", str(error))
    assert StreamLost.found_in("RedisUnavailable: Redis at 127.0.0.1:1 did not answer") is None


# -- a real stream: its state, pages, trimming, consumer groups ---------------------------------------------------


def _add(client: redis.Redis, stream: str, count: int, size: int = 10) -> list[EntryId]:
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(stream, {b"record": b"x" * size + str(i).encode()})
    return [EntryId.parse(i) for i in pipe.execute()]


def test_a_streams_state_follows_adds_trims_and_deletes(redis_topic: RedisTopic) -> None:
    """XINFO's ids and counters as StreamState: a missing stream has added nothing; a trim leaves the counter and
    keeps the stream contiguous; an XDEL in the middle makes it not contiguous."""
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    assert stream_state(client, stream) == StreamState.missing(stream)
    ids = _add(client, stream, 10)
    assert trim(client, stream, ids[3]) == 3
    state = stream_state(client, stream)
    assert (state.last_id, state.entries_added, state.length, state.first_id) == (ids[-1], 10, 7, ids[3])
    assert state.contiguous and state.removed == 3 and state.check(START) == 3
    client.xdel(stream, str(ids[6]))
    state = stream_state(client, stream)
    assert not state.contiguous and state.max_deleted_id == ids[6]
    assert state.check(Position(ids[7], 8)) == 8
    with pytest.raises(StreamLost, match="deleted"):
        state.check(Position(ids[5], 6))


def test_a_range_is_read_a_page_at_a_time_and_pages_shrink_for_large_entries(redis_topic: RedisTopic) -> None:
    """``entries`` reads ``(after, through]`` in order, at most ``count``, and asks fewer entries a page once
    they weigh more than ``page_bytes``: what a reader holds stays bounded."""
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    ids = _add(client, stream, 30, size=100_000)
    pages = list(entries(client, stream, ids[4], ids[-1], page=10, page_bytes=250_000))
    assert [i for page in pages for i, _ in page] == ids[5:]
    assert len(pages[0]) == 10 and max(len(page) for page in pages[1:]) <= 3
    counted = list(entries(client, stream, EntryId(0, 0), ids[-1], count=7, page=5))
    assert [len(page) for page in counted] == [5, 2]


@pytest.mark.parametrize(("groups", "point"), [
    ({"fast": Position(EntryId(90, 0), 90), "slow": Position(EntryId(20, 3), 20)}, TrimPoint(EntryId(20, 4), 20)),
    ({"only": Position(EntryId(5, 0), 5)}, TrimPoint(EntryId(5, 1), 5)),
    ({"fast": Position(EntryId(90, 0), 90), "new": None}, None),
    ({}, None),
], ids=["slowest-holds-back", "one-group", "a-group-without-a-position", "no-group"])
def test_the_trim_point_is_below_the_slowest_groups_position(groups: dict[str, Position | None],
                                                             point: TrimPoint | None) -> None:
    """A stream may be trimmed only below what every registered group has committed and checkpointed; a group
    with nothing committed, or no group at all, trims nothing."""
    assert trim_point(groups) == point


def test_trimming_never_passes_the_slowest_group_and_verify_counts_it_as_consumed(redis_topic: RedisTopic) -> None:
    """With one group at entry 80 and one far behind at 20, the trim removes entries 1 to 20 only: the slow
    group reads on from entry 21 with nothing lost, and verify's account counts 20 trimmed and none lost. An entry
    removed above the trim point by someone else is counted as lost."""
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    ids = _add(client, stream, 100)
    fast, slow = Position(ids[79], 80), Position(ids[19], 20)
    point = trim_point({"fast": fast, "slow": slow})
    assert point is not None and trim(client, stream, point.below) == 20
    state = stream_state(client, stream)
    assert state.first_id == ids[20] and state.check(slow) == 20 and state.check(fast) == 80
    assert [i for page in entries(client, stream, slow.id, state.last_id) for i, _ in page] == ids[20:]
    account = account_stream(state, point, fast)
    assert (account.present, account.trimmed, account.lost, account.problems) == (80, 20, 0, ())
    trim(client, stream, ids[25])  # past the trim point: not tenure's doing
    account = account_stream(stream_state(client, stream), point, fast)
    assert (account.trimmed, account.lost) == (20, 5)
    assert account.problems == (f"Redis stream {stream} is missing entries 21 to 25, above tenure's trim point "
                                "(entry 20): removed before every group consumed them",)


def test_the_operators_consumer_group_shows_the_groups_lag(redis_topic: RedisTopic) -> None:
    """``tenure.<group>`` is created at the stream's start and moved to each committed position with ENTRIESREAD:
    XINFO GROUPS then shows the lag (entries added past it); a group that vanished is created again at the position."""
    client = connect(redis_topic)
    stream = redis_topic.stream(0)
    ensure_group(client, stream, "orders")
    ensure_group(client, stream, "orders")  # exists: nothing happens
    ids = _add(client, stream, 50)

    def shown() -> tuple[int, int]:
        [group] = [g for g in client.xinfo_groups(stream) if g["name"] == consumer_group("orders").encode()]
        return group["entries-read"], group["lag"]

    show_progress(client, stream, "orders", Position(ids[9], 10))
    assert shown() == (10, 40)
    show_progress(client, stream, "orders", Position(ids[44], 45))
    assert shown() == (45, 5)
    client.xgroup_destroy(stream, consumer_group("orders"))
    show_progress(client, stream, "orders", Position(ids[49], 50))
    assert shown() == (50, 0)


def test_a_topics_number_of_queues_is_recorded_once(redis_topic: RedisTopic) -> None:
    """The first to find no identity records it with its number of queues (one by default); a later producer
    given another number is refused naming both, one given none takes the recorded one."""
    client = connect(redis_topic)
    first = ensure_topic(client, redis_topic, 4)
    assert first.queues == 4 and ensure_topic(client, redis_topic, None) == first
    with pytest.raises(ConfigError, match=re.escape(f"--queues 2 does not match the topic {redis_topic}, which has 4 "
                                                    "queues")):
        ensure_topic(client, redis_topic, 2)
    other = RedisTopic(redis_topic.url, redis_topic.prefix + "-b")
    assert ensure_topic(client, other, None).queues == 1


# -- the producer ---------------------------------------------------------------------------------------------------


def test_the_producer_routes_each_record_to_its_keys_stream_in_pipelines(redis_topic: RedisTopic) -> None:
    """``tenure produce`` into a topic of four queues: every record (and each repeat) is in the stream of its key's
    queue, each key's records in seq order there; bad input is there too (an empty file's analog an entry without a
    record field); the entries went in pipelines of ``batch_records``, not one round trip each."""
    client = connect(redis_topic)
    ensure_topic(client, redis_topic, 4)
    summary = produce(redis_topic, records=500, keys=25, duplicates=0.1, bad=0.1, seed=7, batch_records=100,
                      flush_interval_s=600, progress=False)
    entries_written = summary.lines + summary.empty_files
    assert summary.files == -(-entries_written // 100)  # pipelines
    assert summary.landing == str(redis_topic)
    total = 0
    seen: Counter[str] = Counter()
    for k, stream in enumerate(redis_topic.streams(4)):
        last: dict[str, int] = {}
        for page in entries(client, stream, EntryId(0, 0), stream_state(client, stream).last_id):
            for _, fields in page:
                total += 1
                line, _reason = entry_line(fields)
                record, _ = classify_line(line) if line is not None else (None, None)
                if record is None or record["key"] == "k-bad":
                    continue
                assert queue_of(record["key"], 4) == k, (record, stream)
                seen[record["id"]] += 1
                if seen[record["id"]] == 1:  # a repeat is an earlier line again: its first copy kept the order
                    assert record["seq"] > last.get(record["key"], 0)
                    last[record["key"]] = record["seq"]
    assert total == entries_written
    assert len(seen) == 500 and sum(seen.values()) == 500 + summary.duplicates


def test_the_producer_sends_a_pipeline_again_when_redis_comes_back(private_redis: RedisServer) -> None:
    """A pipeline that meets a stopped Redis is retried with back-off and, after the last attempt, raises with its
    entries still buffered; once Redis is back, a flush adds them, each once. With the append-only file, what was
    acknowledged before the crash (SIGKILL) is still there."""
    topic = RedisTopic.parse(f"{private_redis.url}?prefix=p")
    producer = RedisProducer(topic, batch_records=1000, retry=WriteRetry(max_attempts=2, initial_backoff_s=0.01))
    for i in range(5):
        producer.send({"id": f"a{i}", "key": "k", "seq": i, "ts": 1, "payload": None})
    producer.flush()
    private_redis.kill(signal.SIGKILL)
    for i in range(5, 8):
        producer.send({"id": f"a{i}", "key": "k", "seq": i, "ts": 1, "payload": None})
    with pytest.raises(ProducerError, match="stay buffered"):
        producer.flush()
    assert (producer.acked, producer.pending, producer.write_failures) == (5, 3, 2)
    private_redis.start()
    producer.close()
    client = connect(topic)
    ids = [json.loads(f[b"record"])["id"] for page in entries(client, "p:0", EntryId(0, 0), EntryId(1 << 62, 0))
           for _, f in page]
    assert ids == [f"a{i}" for i in range(8)]


def test_tenure_produce_writes_a_redis_topic_from_the_command_line(redis_topic: RedisTopic) -> None:
    """``tenure produce --queue-url redis://…`` writes the records (its summary names the topic and its pipelines), and
    giving both or neither of --data-root and --queue is one error line."""
    done = tenure("produce", "--queue-url", str(redis_topic), "--records", "30", "--keys", "3", "--seed", "1")
    assert done.returncode == 0, done.stderr
    assert f"into {redis_topic}: {redis_topic.prefix}:0/" in done.stdout and "in 1 pipelines" in done.stdout
    assert stream_state(connect(redis_topic), redis_topic.stream(0)).entries_added == 30
    neither = tenure("produce", "--records", "1")
    assert neither.returncode != 0 and "--data-root D (a queue folder) or --queue-url redis://" in neither.stderr


# -- verify's reader ------------------------------------------------------------------------------------------------


def test_verify_reads_each_entry_left_and_accounts_for_the_trimmed_ones(redis_topic: RedisTopic) -> None:
    """Verify's reader gives every entry still in each stream as (stream, id, number, raw line or refusal), numbered
    as the quarantine numbers them, and each stream's account: entries below the recorded trim point consumed,
    a lost tail (Redis lost entries the group had committed) lost."""
    client = connect(redis_topic)
    streams = redis_topic.streams(2)
    ids = _add(client, streams[0], 6)
    client.xadd(streams[0], {b"payload": b"{}"})
    _add(client, streams[1], 3)
    trim(client, streams[0], ids[2])
    state0 = stream_state(client, streams[0])
    lines = list(stream_lines(client, state0))
    assert [(line.id, line.n, line.refused) for line in lines] == [
        *((ids[k], k + 1, None) for k in range(2, 6)), (state0.last_id, 7, "no_record_field")]
    assert lines[0].source == f"{streams[0]}/{ids[2]}" and lines[0].raw == b"x" * 10 + b"2"
    accounts = account_topic(client, redis_topic, 2, trims={streams[0]: TrimPoint(ids[2], 2)},
                             committed={streams[0]: Position(ids[5], 6), streams[1]: Position(EntryId(1 << 62, 0), 9)})
    (_, first), (_, second) = accounts
    assert (first.present, first.trimmed, first.lost, first.problems) == (5, 2, 0, ())
    assert second.lost == 6 and "lost its tail" in second.problems[0]


# -- the embedded server ------------------------------------------------------------------------------------------


def test_tenure_redis_serves_with_an_fsynced_append_only_file_and_stops_on_sigterm(tmp_path: Path) -> None:
    """``tenure redis`` prints its URL once serving, runs with ``appendonly yes`` and ``appendfsync always``, keeps
    what it acknowledged through SIGTERM and a restart, and leaves no redis-server behind."""
    port = free_port()

    def run() -> subprocess.Popen[str]:
        return subprocess.Popen([*TENURE, "redis", "--port", str(port), "--dir", str(tmp_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    for round_ in range(2):
        proc = run()
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == f"redis://127.0.0.1:{port}"
            client = redis.Redis(port=port, decode_responses=True)
            config = client.config_get("append*")
            assert (config["appendonly"], config["appendfsync"]) == ("yes", "always")
            if round_ == 0:
                client.xadd("kept:0", {"record": "{}"})
            assert client.xlen("kept:0") == 1
            client.close()
            ours = descendants(proc.pid)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            assert ours and not any(Path(f"/proc/{pid}").exists() for pid in ours)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# -- replay on a Redis topic ----------------------------------------------------------------------------------------


def test_a_replay_on_a_redis_topic_of_two_queues_reads_its_queues_from_the_topic(redis_topic: RedisTopic,
                                                                                 tmp_path: Path) -> None:
    """A data root reading a Redis topic of two queues has no ``_topic.json``: ``tenure replay --queue 1`` without
    ``--queue-url`` is refused in one line saying to pass it (not taken for a topic of one queue); with it, the
    request is written beside queue 1's set-aside batch and queue 1's wake counter is woken (there is no
    ``landing/`` to drop a tick into); without ``--queue``, refused naming the queues."""
    ensure_topic(connect(redis_topic), redis_topic, 2)
    layout = Layout(tmp_path, None, 1, 2)
    layout.set_aside.mkdir(parents=True)
    write_json(layout.set_aside / published(4, MANIFEST), {"batch_id": 4, "records": 2, "files": ["orders:1"]})
    blind = tenure("replay", "--data-root", str(tmp_path), "--batch", "4", "--queue", "1")
    assert blind.returncode == 2, blind.stderr
    assert "the group reads a Redis topic; pass --queue-url" in blind.stderr and len(blind.stderr.splitlines()) == 1
    with pytest.raises(ReplayError, match=r"the topic has 2 queues.*pass --queue K \(0 to 1\)"):
        request_replay(tmp_path, [4], queue_url=str(redis_topic))
    done = tenure("replay", "--data-root", str(tmp_path), "--batch", "4", "--queue", "1", "--queue-url",
                  str(redis_topic))
    assert done.returncode == 0, done.stderr
    assert (layout.set_aside / published(4, REPLAY_REQUEST)).is_file()
    assert read_wake(layout.wake) == 1 and read_wake(Layout(tmp_path, None, 0, 2).wake) == 0
    assert not layout.landing.exists()
