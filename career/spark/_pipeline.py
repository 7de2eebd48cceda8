"""The consumer's pure DataFrame functions: queue lines → classified rows → without repeats → ordered output.

What a queue line must be, and why a bad one is bad, is the queue's contract (:mod:`tenure.career.queue`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)

# Re-exported (see __all__): tenure.career.spark._config, _query and _career import the first two from here.
from tenure.career.queue import ENTRY_LINE, QUEUE_COLUMN, TICK_SUFFIX, FileIdentity, classify_line
from tenure.career.spark._dedup import DedupStore, Judged
from tenure.career.spark._read import EntryChanged, EntryRefused, admitted_lines, path_of, split_stream

__all__ = [
    "BINARY_FILE",
    "BINARY_FILE_SCHEMA",
    "CHANGED",
    "CLASSIFIED_SCHEMA",
    "KIND_BAD",
    "KIND_FILE",
    "KIND_ROW",
    "QUARANTINE_COLUMNS",
    "SMALL_BATCH_RECORDS",
    "TABLE_COLUMNS",
    "batch_columns",
    "classified_batch",
    "classified_stream",
    "ordered",
    "ordered_records",
    "output_partitions",
    "quarantine_rows",
    "records",
    "split_lines",
    "stamped",
    "table_rows",
    "with_batch",
    "without_repeats",
]

BINARY_FILE = "binaryFile"
"""The default source format: whole files, so lines keep their file and 1-based line number."""

BINARY_FILE_SCHEMA = "path STRING, modificationTime TIMESTAMP, length BIGINT, content BINARY"
"""The ``binaryFile`` source's fixed schema (a streaming file source must be given one)."""

KIND_ROW = "row"  # a valid record
KIND_BAD = "bad"  # a bad line, bound for quarantine
KIND_FILE = "file"  # one marker per source file (or per chunk of a record source): the batch's file list

CLASSIFIED_SCHEMA = (
    "kind STRING, dedup_key STRING, source_file STRING, line BIGINT, value STRING, reason STRING, "
    "id STRING, key STRING, seq BIGINT, ts BIGINT, payload STRING, valid_lines BIGINT, admitted TIMESTAMP"
)
"""What :func:`split_lines` yields: one row per line plus one ``file`` marker per source file.

``dedup_key`` is ``i<id>`` for a record, ``b<file>:<stamp>:<line>`` for a bad line and ``f<file>:<stamp>``
for a marker (the stamp: the file's modification time, and its inode from the queue source): only records can
collide within a read, and bad lines and markers collide only when a file is read again, which the dedup store
(:func:`without_repeats`) catches as it catches a repeated record. A marker's ``reason`` says how its file
went (:func:`split_lines`). ``admitted`` is the source's own column of that name (the queue source's group
clock), or null.
"""

TABLE_COLUMNS: tuple[str, ...] = ("id", "key", "seq", "ts", "payload", "_epoch", "_batch")
QUARANTINE_COLUMNS: tuple[str, ...] = ("value", "reason", "source_file", "line", "_epoch", "_batch")
"""The columns of ``table/`` and ``quarantine/`` rows; in a topic of several queues each row adds ``_queue``
(:func:`batch_columns`)."""

_CHUNK_ROWS = 8192  # rows per Arrow batch handed back to Spark …
_CHUNK_BYTES = 16 << 20  # … or fewer, once their lines weigh this much: a worker's memory stays bounded

_ENTRY_COLUMNS = ("length", "inode", "mtime_ns", "refused", "detail")  # the queue source's, beyond binaryFile's

CHANGED = "changed"
"""A ``file`` marker's ``reason`` when its file was no longer the one its batch admitted (not a quarantine
reason: the file is read again as new)."""

# One encoder for the process: ``json.dumps`` with keyword arguments builds a new one on every call, which costs
# more than the encoding of a short payload.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _payload_text(payload: Any) -> str:
    # Compact, key order kept. A number that overflows a double (1e400) re-encodes as "Infinity": a known limit.
    return _ENCODER.encode(payload)


_ARROW_SCHEMA = pa.schema([
    ("kind", pa.string()), ("dedup_key", pa.string()), ("source_file", pa.string()), ("line", pa.int64()),
    ("value", pa.string()), ("reason", pa.string()), ("id", pa.string()), ("key", pa.string()),
    ("seq", pa.int64()), ("ts", pa.int64()), ("payload", pa.string()), ("valid_lines", pa.int64()),
    ("admitted", pa.timestamp("us", tz="UTC")),
])


class _Columns:
    """Rows of :data:`CLASSIFIED_SCHEMA` gathered as tuples, turned into one Arrow batch at a time; every row of
    a batch has the same ``admitted`` (:meth:`admit` flushes the rows gathered under another)."""

    __slots__ = ("admitted", "rows", "weight")

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.admitted: int | None = None  # µs
        self.weight = 0  # bytes of the lines gathered: what the rows hold, about

    def admit(self, admitted: int | None) -> pa.RecordBatch | None:
        """Rows added from now on carry ``admitted``; returns the rows gathered under another value, if any."""
        flushed = self.flush() if self.rows and admitted != self.admitted else None
        self.admitted = admitted
        return flushed

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, *row: Any) -> None:
        self.rows.append(row)

    def flush(self) -> pa.RecordBatch:
        count = len(self.rows)
        columns = list(zip(*self.rows, strict=True))  # one transposition in C, not twelve appends per row
        self.rows = []
        self.weight = 0
        arrays = [pa.array(col, type=f.type) for col, f in zip(columns, _ARROW_SCHEMA, strict=False)]
        arrays.append(pa.array([self.admitted] * count, type=_ARROW_SCHEMA.field("admitted").type))
        return pa.RecordBatch.from_arrays(arrays, schema=_ARROW_SCHEMA)


def _add_line(out: _Columns, raw: bytes, source: str, stamp: str, number: int, max_line_bytes: int,
              route: tuple[int, int]) -> bool:
    out.weight += len(raw)
    record, reason = classify_line(raw, max_line_bytes, queue=route[0], queues=route[1])
    if record is None:
        out.add(KIND_BAD, f"b{source}:{stamp}:{number}", source, number,
                raw.decode("utf-8", errors="replace"), reason, None, None, None, None, None, None)
        return False
    out.add(KIND_ROW, "i" + record["id"], source, number, None, None, record["id"], record["key"],
            record["seq"], record["ts"], _payload_text(record["payload"]), None)
    return True


def _source_row(batch: pa.RecordBatch, name: str) -> list[Any]:
    """A column of the source's batch as a list (``None`` for each row when the source has no such column)."""
    return batch.column(name).to_pylist() if name in batch.schema.names else [None] * batch.num_rows


def _split_file(out: _Columns, path: str, stamp: int, given: bytes | None, size: int | None, inode: int | None,
                mtime_ns: int | None, refused: str | None, detail: str | None, *,
                max_line_bytes: int, route: tuple[int, int]) -> Iterator[pa.RecordBatch]:
    """Add one file's rows to ``out`` (see :func:`split_lines`), yielding each batch of rows as it fills."""
    # A reused name's new file is another file even within one tick of the clock: its inode tells.
    stamp_text = str(stamp) if mtime_ns is None else f"{mtime_ns}:{inode}"
    lines: Iterable[bytes] = ()
    if path.endswith(TICK_SUFFIX):
        pass  # a wake-up: no line to read
    elif given is not None:
        lines = split_stream(io.BytesIO(given).read, len(given), max_line_bytes)
    elif refused is None:
        admitted = None if mtime_ns is None else FileIdentity(inode, size if inode is not None else None, mtime_ns)
        lines = admitted_lines(path_of(path), admitted, max_line_bytes)
    outcome, note = refused, detail
    valid = number = 0
    try:
        for number, raw in enumerate(lines, start=1):
            valid += _add_line(out, raw, path, stamp_text, number, max_line_bytes, route)
            if len(out) >= _CHUNK_ROWS or out.weight >= _CHUNK_BYTES:
                yield out.flush()
    except EntryRefused as exc:  # the lines read before it stay read
        outcome, note = exc.reason, exc.detail + (f" (after line {number})" if number else "")
    except EntryChanged as exc:
        outcome, note = CHANGED, str(exc)
    if outcome is not None and outcome != CHANGED:
        out.add(KIND_BAD, f"b{path}:{stamp_text}:{ENTRY_LINE}", path, ENTRY_LINE, note, outcome,
                None, None, None, None, None, None)
    out.add(KIND_FILE, f"f{path}:{stamp_text}", path, None, None, outcome, None, None, None, None, None, valid)


def split_lines(max_line_bytes: int, route: tuple[int, int] = (0, 1)
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function over ``binaryFile`` rows (``path``, ``modificationTime``, ``content``), or the
    queue source's (``content`` null: each file is read here, as its batch admitted it, from ``inode``,
    ``length`` and ``mtime_ns``; ``refused``/``detail``: an entry refused at admission; ``admitted`` carried on).

    Lines are split on ``\\n`` only (a ``\\r`` stays in the line); a final ``\\n`` makes no extra empty
    line; an empty file yields no line. Each file also yields one ``file`` marker with its count of valid
    lines, so the batch knows every file it read — empty and all-duplicate files included. The marker's
    ``reason`` is null for a file read; a refused entry's reason (one of ``ENTRY_REASONS``, with one bad row at
    line 0 naming it, its ``value`` the detail); or ``changed`` for a file that is no longer the one admitted (read
    again as new by a later batch: :mod:`tenure.career.spark._read`). A file is read in bounded memory, and the
    rows go back to Spark every ``_CHUNK_ROWS`` rows or ``_CHUNK_BYTES`` bytes of lines. ``route`` is the queue the
    files are in and the topic's number of queues: a record of another queue's key is bad (``wrong_queue``).
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = _Columns()
        for batch in batches:
            paths = batch.column("path").to_pylist()
            stamps = batch.column("modificationTime").cast(pa.int64()).to_pylist()
            contents = batch.column("content").to_pylist()
            admitted = (batch.column("admitted").cast(pa.int64()).to_pylist() if "admitted" in batch.schema.names
                        else [None] * len(paths))
            rows = zip(paths, stamps, contents, admitted, *(_source_row(batch, name) for name in _ENTRY_COLUMNS),
                       strict=True)
            for path, stamp, given, at, *entry in rows:
                if (earlier := out.admit(at)) is not None:
                    yield earlier
                yield from _split_file(out, path, stamp, given, *entry, max_line_bytes=max_line_bytes, route=route)
        if len(out):
            yield out.flush()

    return run


def split_records(max_line_bytes: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function over a record source (``value`` binary, ``source_file``, ``line``).

    Each row is one line. One ``file`` marker per Arrow batch (``source_file`` null: nothing to archive)
    carries the count of valid lines, keyed by the chunk's first (source, line) so it never collides.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            out = _Columns()
            values = batch.column("value").to_pylist()
            sources = batch.column("source_file").to_pylist()
            numbers = batch.column("line").to_pylist()
            valid = 0
            for raw, source, number in zip(values, sources, numbers, strict=True):
                data = raw if isinstance(raw, bytes) else (raw or "").encode("utf-8")
                valid += _add_line(out, data, str(source), "0", int(number), max_line_bytes, (0, 1))
            out.add(KIND_FILE, f"c{sources[0]}:{numbers[0]}", None, None, None, None, None, None, None, None,
                    None, valid)
            yield out.flush()

    return run


def classified_batch(raw: DataFrame, max_line_bytes: int, *, file_source: bool = True,
                     route: tuple[int, int] = (0, 1)) -> DataFrame:
    """Classify a source DataFrame (batch or streaming) into :data:`CLASSIFIED_SCHEMA` rows.

    Args:
        raw: ``binaryFile`` rows when ``file_source``, else rows with ``value``, ``source_file``, ``line``.
        max_line_bytes: the ``oversized`` limit.
        file_source: whether ``raw`` holds whole files (split into lines) or one line per row.
        route: the queue a file source's files are in, and the topic's number of queues (:func:`split_lines`).
    """
    if file_source:
        columns = ["path", "modificationTime", "content",
                   *(c for c in ("admitted", *_ENTRY_COLUMNS) if c in raw.columns)]
        return raw.select(*columns).mapInArrow(split_lines(max_line_bytes, route), CLASSIFIED_SCHEMA)
    return raw.select(F.col("value").cast("binary").alias("value"), "source_file", "line").mapInArrow(
        split_records(max_line_bytes), CLASSIFIED_SCHEMA)


def stamped(classified: DataFrame) -> DataFrame:
    """The classified stream with each row's event time, ``_ingested``: its ``admitted`` (the group clock the queue
    source planned the batch by, :mod:`tenure.career.spark._intake`), or for a source without it the micro-batch's
    timestamp (``current_timestamp()``). Both are in the offset log, so a re-run of a batch sees the same value.
    No state: the dedup store judges the batch on the driver (:func:`without_repeats`)."""
    return classified.withColumn("_ingested", F.coalesce(F.col("admitted"), F.current_timestamp()))


_IDENTITY = ("dedup_key", "source_file", "line")


def without_repeats(batch: DataFrame, store: DedupStore, batch_id: int) -> tuple[DataFrame, Judged]:
    """Batch ``batch_id`` (a cached, :func:`stamped` batch) without the rows that repeat a dedup key, judged by
    ``store`` as of the batch before: the batch's keys come to the driver (one narrow action), the store judges
    them, and the repeats leave with a broadcast anti-join, no shuffle. Of several copies of a key in the batch the
    one from the lowest source and line is kept, whatever the partitions' order, so a re-run keeps the same one.

    A row is known by its key, source and line (null-safe: a marker has no line); the same source line read twice
    in one batch is one row read twice, and one copy of it is kept (a shuffle, only then).

    Returns the rows kept and the judgement to stage and, after the batch's commit, to apply to the store.
    """
    table = batch.select(*_IDENTITY, F.unix_millis("_ingested").alias("_ms")).toArrow()
    table = table.sort_by([("source_file", "ascending"), ("line", "ascending"), ("dedup_key", "ascending")])
    event_ms = pa.compute.max(table.column("_ms")).as_py()
    judged = store.judge(batch_id, table.column("dedup_key"), int(event_ms) if event_ms is not None else 0)
    if not judged.repeat_count:
        return batch, judged
    rows = list(zip(*(table.column(name).to_pylist() for name in _IDENTITY), strict=True))
    flags = judged.repeats.to_pylist()
    kept_rows = {row for row, repeat in zip(rows, flags, strict=True) if not repeat}
    gone_rows = {row for row, repeat in zip(rows, flags, strict=True) if repeat} - kept_rows
    kept = batch.dropDuplicates(list(_IDENTITY)) if len(set(rows)) < len(rows) else batch
    if not gone_rows:
        return kept, judged
    gone = F.broadcast(batch.sparkSession.createDataFrame(
        sorted(gone_rows, key=repr), "dedup_key STRING, source_file STRING, line BIGINT"))
    on = [kept[name].eqNullSafe(gone[name]) for name in _IDENTITY]
    return kept.join(gone, on=on, how="left_anti"), judged


def classified_stream(
    spark: SparkSession,
    *,
    source_format: str,
    path: str | None,
    options: Mapping[str, str],
    schema: str | None,
    max_line_bytes: int,
    source_file_expr: str,
    line_expr: str,
    whole_files: bool = False,
    route: tuple[int, int] = (0, 1),
) -> DataFrame:
    """The streaming side of the pipeline: source → classified lines, each with its event time (:func:`stamped`; the
    batch writer drops the repeats, :func:`without_repeats`); ``route`` the queue of a topic the files are in
    (:func:`split_lines`).

    With ``binaryFile``, or a source of the same schema (``whole_files``: the queue source), each file is split
    into lines;
    with any other format each row is one line: its ``value`` column, ``source_file_expr`` and ``line_expr``
    (SQL expressions, e.g. ``concat(topic, '-', partition)`` and ``offset`` for Kafka) name where it came from.
    """
    reader = spark.readStream.format(source_format).options(**dict(options))
    if schema is None and source_format == BINARY_FILE:
        schema = BINARY_FILE_SCHEMA
    if schema:
        reader = reader.schema(schema)
    raw = reader.load(path) if path is not None else reader.load()
    file_source = whole_files or source_format == BINARY_FILE
    if not file_source:
        raw = raw.select(F.col("value"), F.expr(source_file_expr).cast("string").alias("source_file"),
                         F.expr(line_expr).cast("long").alias("line"))
    return stamped(classified_batch(raw, max_line_bytes, file_source=file_source, route=route))


def records(classified: DataFrame) -> DataFrame:
    """The batch's records: ``id``, ``key``, ``seq``, ``ts``, ``payload`` (in no particular order)."""
    return classified.where(F.col("kind") == KIND_ROW).select("id", "key", "seq", "ts", "payload")


SMALL_BATCH_RECORDS = 20_000
"""Up to this many records a batch is written as one part file (see :func:`output_partitions`)."""


def output_partitions(records: int, configured: int) -> int:
    """How many part files a batch of ``records`` is written as: one for a small batch, else ``configured``.

    Why: one partition needs no shuffle (a narrow coalesce, then a sort), which saves a Spark stage — about 70 ms
    of a light load's 0.5 s batch on 2 cores — while a large batch keeps its parallel write.
    """
    return 1 if records <= SMALL_BATCH_RECORDS else configured


def ordered(rows: DataFrame, *, partitions: int) -> DataFrame:
    """``rows`` with each key in one partition (so in one part file), by ``seq``: the output's per-key order."""
    if partitions == 1:  # every key in the one partition: no exchange needed
        return rows.coalesce(1).sortWithinPartitions("key", "seq")
    return rows.repartition(partitions, "key").sortWithinPartitions("key", "seq")


def ordered_records(classified: DataFrame, *, partitions: int) -> DataFrame:
    """The batch's records, each key in one partition by ``seq``."""
    return ordered(records(classified), partitions=partitions)


def batch_columns(*, epoch: int, batch_id: int, queue: int | None = None) -> list[Column]:
    """The columns every output row carries: ``_epoch``, ``_batch`` and, in a topic of several queues (``queue``
    not None), ``_queue`` (:data:`tenure.career.queue.QUEUE_COLUMN`)."""
    columns = [F.lit(epoch).cast("long").alias("_epoch"), F.lit(batch_id).cast("long").alias("_batch")]
    return columns if queue is None else [*columns, F.lit(queue).cast("long").alias(QUEUE_COLUMN)]


def with_batch(rows: DataFrame, *, epoch: int, batch_id: int, queue: int | None = None) -> DataFrame:
    """``rows`` with the columns every output row carries (:func:`batch_columns`; a narrow step: order kept)."""
    return rows.select("*", *batch_columns(epoch=epoch, batch_id=batch_id, queue=queue))


def table_rows(classified: DataFrame, *, epoch: int, batch_id: int, partitions: int,
               queue: int | None = None) -> DataFrame:
    """The batch's records in output shape, each key's rows in one partition in (key, seq) order."""
    return with_batch(ordered_records(classified, partitions=partitions), epoch=epoch, batch_id=batch_id, queue=queue)


def quarantine_rows(classified: DataFrame, *, epoch: int, batch_id: int, queue: int | None = None) -> DataFrame:
    """The batch's bad lines in quarantine shape (one partition: bad lines are few)."""
    return (
        classified.where(F.col("kind") == KIND_BAD)
        .select("value", "reason", "source_file", "line", *batch_columns(epoch=epoch, batch_id=batch_id, queue=queue))
        .coalesce(1)
    )
