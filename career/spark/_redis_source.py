"""The Redis source: a streaming source over one stream of a Redis topic (queue k), read by entry-id ranges that
replay the same rows.

- **Offsets.** An offset is a :class:`tenure.career.redis_queue.Position`, ``{"id": <last entry id read>, "n": <its
  number>}``: ``n`` is the stream's ``entries-added`` counter as it stood when that entry was added, so two offsets
  name the entries between them and their count. A batch's end offset may add ``base`` (the number before its
  first entry, when that is not its start's ``n``: a first read of a stream trimmed before it), ``cuts`` (the
  positions where its read tasks split it), ``clock`` (the group's clock when it was planned, every row's
  ``admitted``: deduplication's event time, as the queue source's) and ``wake`` (the queue's wake count it planned
  by: :mod:`tenure.career.wake`).
- **Waking.** With the ``wake`` option (the queue's wake counter folder), a wake count other than the start
  offset's is a batch of no entry when the stream has none new — ``{id, n}`` to ``{id, n}`` with the new count —
  so a retry that falls due or a replay asked for runs without touching the stream other groups read.
- **Planning** (``latestOffset``) asks ``XINFO STREAM`` first: a stream whose last id or counter is below the start
  offset lost its tail, one whose entries above it were removed lost those, and the planner raises
  :class:`tenure.career.redis_queue.StreamLost` and plans nothing (``StreamState.check``).
  Then it reads forward with ``XRANGE (<start id> <last id> COUNT …`` under the read limit — entries
  (``maxEntriesPerTrigger``) or bytes (``maxBytesPerTrigger``) per batch, as the queue source's files or bytes —
  so that the end offset names exactly the batch's entries.
- **Reading** (``read``) reads ``(start id, end id]`` again, page by page in bounded memory, and checks that it got
  ``end.n - start.n`` entries: a re-run of a batch reads the same rows, and a range missing entries (deleted under
  a planned batch) fails the batch with one line naming the stream and both counts, before anything is committed.
- **Rows** (:data:`REDIS_SOURCE_SCHEMA`): one per entry, its ``record`` field's bytes (cut to ``maxLineBytes`` + 1:
  longer is ``oversized`` anyway) or, for an entry that holds none, why (``refused``, ``detail``).
  :func:`classified_entries` turns them into the pipeline's classified rows: the stream and entry id,
  ``<stream>/<id>``, where the file queue puts the file, and the entry's number where it puts the line.

Nothing here trims or moves Redis's consumer groups: the career does, after the fenced commit
(:mod:`tenure.career.redis_streams`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import redis
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from tenure.career.queue import DEFAULT_MAX_LINE_BYTES
from tenure.career.redis_queue import EntryId, Position, RedisTopic, StreamLost, entry_line, entry_text
from tenure.career.redis_streams import DEFAULT_TIMEOUT_S, Entry, connect, entries, entry_bytes, stream_state
from tenure.career.spark._intake import PlannerClock
from tenure.career.spark._pipeline import CLASSIFIED_SCHEMA, KIND_BAD, KIND_FILE, _add_line, _Columns
from tenure.career.wake import read_wake

__all__ = [
    "DEFAULT_MAX_ENTRIES_PER_TRIGGER",
    "REDIS_SOURCE",
    "REDIS_SOURCE_SCHEMA",
    "RedisSource",
    "classified_entries",
    "split_entries",
]

REDIS_SOURCE = "tenure_redis"
"""The source's format name (``session.dataSource.register(RedisSource)`` first)."""

REDIS_SOURCE_SCHEMA = ("stream STRING, id STRING, n BIGINT, value BINARY, refused STRING, detail STRING, "
                       "admitted TIMESTAMP")
"""One row per entry: its stream, id and number; ``value``, its ``record`` field's bytes (null for a refused
entry); ``refused`` and ``detail``, why an entry holds no record (one of
:data:`tenure.career.redis_queue.ENTRY_REASONS`, and its fields as JSON), null otherwise; ``admitted``, the group's
clock when its batch was planned (null without one)."""

DEFAULT_MAX_ENTRIES_PER_TRIGGER = 10_000
"""The batch bound when the options set none: a batch's rows are bounded whatever the stream's backlog."""

_PAGE = 1000  # entries an XRANGE asks for at most (fewer once they weigh more than DEFAULT_PAGE_BYTES)

_ARROW_SCHEMA = pa.schema([("stream", pa.string()), ("id", pa.string()), ("n", pa.int64()), ("value", pa.binary()),
                           ("refused", pa.string()), ("detail", pa.string()),
                           ("admitted", pa.timestamp("us", tz="UTC"))])


class _Range(InputPartition):
    """One read task's entries: ``(after.id, through.id]``, which must hold ``through.n - after.n`` of them."""

    def __init__(self, after: Position, through: Position, admitted_ms: int | None) -> None:
        super().__init__((str(after), str(through)))
        self.after = after
        self.through = through
        self.admitted_ms = admitted_ms


def _cuts(pages: list[Position], base: int, count: int, tasks: int) -> list[Position]:
    """Where a batch of ``count`` entries after number ``base`` splits into about ``tasks`` equal read tasks: at the
    ends of the pages its planning read (``pages``, in order) nearest the equal shares; no cut at its end, none
    twice."""
    inner = [p for p in pages if p.n < base + count]
    cuts: list[Position] = []
    for task in range(1, tasks):
        wanted = base + count * task // tasks
        cut = min(inner, key=lambda p: abs(p.n - wanted), default=None)
        if cut is not None and (not cuts or cut.n > cuts[-1].n):
            cuts.append(cut)
    return cuts


class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self._topic = RedisTopic.parse(options["url"])
        self._stream = self._topic.stream(int(options.get("queue", "0")))
        self._tasks = max(1, int(options.get("partitions", "2")))
        self._max_entries = int(options.get("maxEntriesPerTrigger") or DEFAULT_MAX_ENTRIES_PER_TRIGGER)
        self._max_bytes = int(options["maxBytesPerTrigger"]) if options.get("maxBytesPerTrigger") else None
        self._keep = int(options.get("maxLineBytes") or DEFAULT_MAX_LINE_BYTES) + 1
        self._timeout_s = float(options.get("timeoutS") or DEFAULT_TIMEOUT_S)
        self._until: EntryId | None = None  # Trigger.AvailableNow: only what the stream held when the query began
        self._clock = PlannerClock.from_options(options)
        self._wake = Path(options["wake"]) if options.get("wake") else None
        self._redis: redis.Redis | None = None  # the planner's client, made on first use (never pickled)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_redis": None}  # Spark ships the reader to its read tasks

    def _client(self) -> redis.Redis:
        if self._redis is None:
            self._redis = connect(self._topic, timeout_s=self._timeout_s)
        return self._redis

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        return Position(EntryId(0, 0), 0).to_offset()

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark's name)
        return ReadMaxBytes(self._max_bytes) if self._max_bytes is not None else ReadMaxRows(self._max_entries)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark's name)
        self._until = stream_state(self._client(), self._stream).last_id

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        position = Position.from_offset(start)
        client = self._client()
        state = stream_state(client, self._stream)
        base = state.check(position)  # StreamLost: nothing is planned past a hole
        woken = read_wake(self._wake) if self._wake is not None else int(start.get("wake", 0))
        through = state.last_id if self._until is None else min(state.last_id, self._until)
        if through <= position.id:
            return start if woken == int(start.get("wake", 0)) else self._end(position.to_offset(), start, woken)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        count = size = 0
        last = position.id
        pages: list[Position] = []
        for page in entries(client, self._stream, position.id, through, count=max_rows, page=_PAGE):
            full = False
            for entry_id, fields in page:
                weight = entry_bytes(fields)
                if max_bytes is not None and count and size + weight > max_bytes:
                    full = True
                    break
                count, size, last = count + 1, size + weight, entry_id
            pages.append(Position(last, base + count))
            if full:
                break
        if not count:
            return start if woken == int(start.get("wake", 0)) else self._end(position.to_offset(), start, woken)
        end = Position(last, base + count)
        state.check_end(end)
        offset = end.to_offset()
        if base != position.n:
            offset["base"] = base
        if cuts := _cuts(pages, base, count, self._tasks):
            offset["cuts"] = [cut.to_offset() for cut in cuts]
        return self._end(offset, start, woken)

    def _end(self, offset: dict[str, Any], start: Mapping[str, Any], woken: int) -> dict[str, Any]:
        """A batch's end ``offset`` with its clock and the wake count it was planned by (none while nothing woke
        the queue: the offsets of before wake counters)."""
        if self._clock is not None:
            offset["clock"] = self._clock.stamp(start)
        if woken:
            offset["wake"] = woken
        return offset

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = Position.from_offset(start), Position.from_offset(end)
        if last.id <= first.id:
            return []
        bounds = [Position(first.id, int(end.get("base", first.n))),
                  *(Position.from_offset(cut) for cut in end.get("cuts", [])), last]
        admitted = end.get("clock")
        return [_Range(after, through, admitted) for after, through in itertools.pairwise(bounds)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's entries, a page at a time; after the last, a check that the range held as many entries as
        its batch planned (``StreamLost`` otherwise: entries were deleted under the planned batch)."""
        assert isinstance(partition, _Range)
        after, through = partition.after, partition.through
        admitted = partition.admitted_ms * 1000 if partition.admitted_ms is not None else None
        client = connect(self._topic, timeout_s=self._timeout_s)
        got = 0
        try:
            for page in entries(client, self._stream, after.id, through.id, page=_PAGE):
                yield self._rows(page, after.n + got, admitted)
                got += len(page)
        finally:
            client.close()
        if got != through.n - after.n:
            raise StreamLost(self._stream, f"Redis stream {self._stream} holds {got} entries in ({after.id}, "
                                           f"{through.id}] where its batch planned {through.n - after.n}: entries "
                                           "were deleted under a planned batch; nothing of it is committed")

    def _rows(self, page: list[Entry], before: int, admitted: int | None) -> pa.RecordBatch:
        values: list[bytes | None] = []
        refusals: list[tuple[str | None, str | None]] = []
        for _, fields in page:
            line, reason = entry_line(fields)
            values.append(None if line is None else line[:self._keep])
            refusals.append((reason, entry_text(fields, self._keep) if reason is not None else None))
        size = len(page)
        return pa.RecordBatch.from_arrays(
            [pa.array([self._stream] * size, pa.string()), pa.array([str(i) for i, _ in page], pa.string()),
             pa.array(range(before + 1, before + size + 1), pa.int64()), pa.array(values, pa.binary()),
             pa.array([r for r, _ in refusals], pa.string()), pa.array([d for _, d in refusals], pa.string()),
             pa.array([admitted] * size, pa.timestamp("us", tz="UTC"))], schema=_ARROW_SCHEMA)

    def stop(self) -> None:
        if self._redis is not None:
            self._redis.close()
            self._redis = None


class RedisSource(DataSource):
    """``spark.readStream.format("tenure_redis")``: one stream of a Redis topic, by entry-id ranges (module
    docstring).

    Options: ``url`` (the topic, :class:`tenure.career.redis_queue.RedisTopic`), ``queue`` (k: the stream
    ``<prefix>:<k>``), ``partitions`` (read tasks per batch), one of ``maxEntriesPerTrigger`` (default
    :data:`DEFAULT_MAX_ENTRIES_PER_TRIGGER`) / ``maxBytesPerTrigger``, ``maxLineBytes`` (the pipeline's line limit),
    ``timeoutS`` (each Redis call's deadline), ``wake`` (the queue's wake counter folder, ``Layout.wake``: without
    it, only a new entry runs a batch) and the term's group clock (:func:`tenure.career.spark._intake.clock_options`).
    The schema is :data:`REDIS_SOURCE_SCHEMA`.
    """

    @classmethod
    def name(cls) -> str:
        return REDIS_SOURCE

    def schema(self) -> str:
        return REDIS_SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        return _Reader(self.options)


def split_entries(max_line_bytes: int, route: tuple[int, int] = (0, 1)
                  ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function from the Redis source's rows to the pipeline's classified rows
    (:data:`tenure.career.spark._pipeline.CLASSIFIED_SCHEMA`): each entry's line classified by ``classify_line``,
    or a refused entry a bad row with its reason and fields; ``source_file`` is ``<stream>/<id>`` and ``line`` the
    entry's number. One ``file`` marker per Arrow batch (``source_file`` null: nothing to archive) counts its valid
    records."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = _Columns()
        for batch in batches:
            if batch.num_rows == 0:
                continue
            columns = [batch.column(name).to_pylist() for name in ("stream", "id", "n", "value", "refused", "detail")]
            admitted = batch.column("admitted").cast(pa.int64()).to_pylist()
            if (earlier := out.admit(admitted[0])) is not None:
                yield earlier
            valid = 0
            first = ""
            for stream, entry_id, n, value, refused, detail in zip(*columns, strict=True):
                source = f"{stream}/{entry_id}"
                first = first or source
                if refused is not None:
                    out.add(KIND_BAD, f"b{source}:0:{n}", source, n, detail, refused, None, None, None, None, None,
                            None)
                else:
                    valid += _add_line(out, value, source, "0", n, max_line_bytes, route)
            out.add(KIND_FILE, f"c{first}", None, None, None, None, None, None, None, None, None, valid)
            yield out.flush()

    return run


def classified_entries(raw: DataFrame, max_line_bytes: int, route: tuple[int, int] = (0, 1)) -> DataFrame:
    """The Redis source's rows (batch or streaming) as the pipeline's classified rows (:func:`split_entries`);
    ``route`` is the stream's queue and the topic's number of queues, so a record of another queue's key is
    ``wrong_queue``."""
    return raw.select("stream", "id", "n", "value", "refused", "detail", "admitted").mapInArrow(
        split_entries(max_line_bytes, route), CLASSIFIED_SCHEMA)
