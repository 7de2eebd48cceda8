"""The queue source: tenure's own streaming source over ``landing/``, in production order.

Spark's file source orders files by modification time in milliseconds and breaks ties by listing order, skips a
file more than ``maxFileAge`` older than the newest one, and treats a reused name as seen. A fast producer's
same-millisecond files then reach batches out of order, and the per-key order marks refuse the earlier records
as ``late``. This source (a PySpark ``DataSourceStreamReader``) owns the listing, the order, the bound and the
offsets instead:

- **Order.** Files are admitted in ``(modification time in ns, name)`` order: a producer that renames its files
  into ``landing/`` one after another, with names that sort in the order it wrote them, has them consumed in
  that order, whatever their timestamps share and whatever the batch bound.
- **Settled listing.** Each planning lists ``landing/`` twice and admits the longest prefix, in that order, of
  files the first listing already held. A file renamed before another one was therefore complete before the
  first listing ended, so the second listing holds it: a later file is never admitted ahead of an earlier one
  that a directory scan happened to miss. A file that appears between the listings waits for the next trigger.
- **Offsets.** An offset is the batch's entries (``[name, mtime_ns, size, ino]`` in order, plus ``reason,
  detail`` for a refused one) and ``pending``: the entries (``[name, mtime_ns, size, ino]``) admitted by earlier
  batches that this group has not marked consumed yet. Spark stores each end offset in the checkpoint's offset
  log, so a re-run of a batch reads exactly the same files — each is checked against the identity admitted, or
  is not read (:mod:`tenure.career.spark._read`) — and a file is admitted at most once per checkpoint: it is
  either in an offset or marked (:mod:`tenure.career.spark._marks`), and a mark holds the identity its batch
  admitted, never one found later.
- **Every entry is admitted, and only this group's marks hold one back.** Which entries this group has yet to
  consume is one rule, :func:`tenure.career.spark._landing.waiting`, which the backlog (what the progress
  watchdog waits on) counts too. An entry that cannot be read as a file is admitted refused, with its reason
  (:mod:`tenure.career.spark._landing`): its batch quarantines it alone and the queue goes on. An empty file is
  admitted like any other (it holds no line), so no clock decides when it leaves ``landing/``.
- **No file is skipped by age, and a changed file is a new file.** A file in ``landing/`` whose identity
  (inode, size, modification time) is not its mark's — a name used again, even within one tick of a coarse
  clock or with an older time (``cp -p``), or a file rewritten or appended in place after its admission — is
  admitted as new; a name used again is listed under ``reused`` in its batch's offset (the batch writer logs
  ``queue_name_reused``).
- **Event time on the group's clock.** Each offset also carries ``clock``: the group's clock
  (:class:`tenure.career.spark._term.TermClock`) when the batch was planned, in ms, never below the offset before it.
  Every row of the batch carries it as ``admitted``, deduplication's event time: no replica's wall clock moves
  the watermark, and a re-run of a batch sees the same time (it is in the offset log).

Checkpoints written by Spark's file source are resumed: their last batch's files come from its source log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from tenure.career.queue import FileIdentity, mark_covers
from tenure.career.spark._landing import MarkReader, QueueEntry, describe, listed_names, scan_landing, waiting
from tenure.career.spark._pipeline import BINARY_FILE_SCHEMA
from tenure.career.spark._read import path_of

__all__ = [
    "QUEUE_SOURCE",
    "QUEUE_SOURCE_SCHEMA",
    "RECORD_NAMES_BYTES",
    "PlannerClock",
    "QueueSource",
    "admit",
    "admitted_entries",
    "batch_files",
    "batch_offset",
    "clock_options",
    "file_name",
    "offset_files",
    "record_bytes",
]

QUEUE_SOURCE = "tenure_queue"
"""The source's format name (registered per session by :func:`tenure.career.spark._query.source_stream`)."""

QUEUE_SOURCE_SCHEMA = (f"{BINARY_FILE_SCHEMA}, admitted TIMESTAMP, inode BIGINT, mtime_ns BIGINT, refused STRING, "
                       "detail STRING")
"""The ``binaryFile`` source's columns (``modificationTime`` and ``length`` as admitted), plus ``admitted``: the
group's clock when the file's batch was planned; ``inode`` and ``mtime_ns``: the rest of the identity the batch
admitted; ``refused`` and ``detail``: why an entry is refused (null for a file to read)."""

_ARROW_SCHEMA = pa.schema([("path", pa.string()), ("modificationTime", pa.timestamp("us", tz="UTC")),
                           ("length", pa.int64()), ("content", pa.binary()),
                           ("admitted", pa.timestamp("us", tz="UTC")), ("inode", pa.int64()),
                           ("mtime_ns", pa.int64()), ("refused", pa.string()), ("detail", pa.string())])


RECORD_NAMES_BYTES = 256 << 10
"""At most this much of a batch's commit record names the files it read (its ``files``, as JSON): ZooKeeper takes
no request over 1 MiB (``jute.maxbuffer``), so a batch admits no more files once their names would pass it,
whatever its bound in files or bytes (about 10 000 files of 20-character names, 1 100 of 230)."""


def record_bytes(name: str) -> int:
    """What the file name ``name`` takes in a commit record's ``files``: its JSON string and a comma."""
    return len(json.dumps(name)) + 1


class _GroupClock(Protocol):
    """The group's clock as the source needs it: :class:`tenure.career.spark._term.TermClock` (not imported:
    ``_term`` imports this module, to mark the entries a batch admitted)."""

    def reading(self) -> tuple[float, float]: ...


def clock_options(clock: _GroupClock) -> dict[str, str]:
    """The source options that hand the term's group clock to the source's planner, a Python process that Spark
    starts on this host (``time.monotonic()`` is the host's, so the planner carries the clock on from them)."""
    group, monotonic = clock.reading()
    return {"clock": repr(group), "clockMonotonic": repr(monotonic)}


class PlannerClock:
    """The group's clock in a source planner's process, from :func:`clock_options` (the queue source's and the Redis
    source's)."""

    def __init__(self, group: float, monotonic: float) -> None:
        self._offset = group - monotonic

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> PlannerClock | None:
        """The clock the options hand over; None without one (the warm-up: rows are stamped at ingestion)."""
        return cls(float(options["clock"]), float(options["clockMonotonic"])) if options.get("clock") else None

    def now_ms(self) -> int:
        return int((self._offset + time.monotonic()) * 1000)

    def stamp(self, start: Mapping[str, Any]) -> int:
        """A batch's ``clock``: now on the group's clock, never below the ``clock`` of its start offset."""
        return max(int(start.get("clock", 0)), self.now_ms())


def admit(candidates: Sequence[QueueEntry], settled: set[str], marked: set[str], *,
          max_files: int | None, max_bytes: int | None) -> tuple[list[QueueEntry], list[str]]:
    """The next batch's entries, in admission order, and the names among them used again (pure: no I/O).

    Args:
        candidates: the entries of the second listing of ``landing/`` that this group has yet to consume
            (:func:`tenure.career.spark._landing.waiting`) and that no earlier batch admitted.
        settled: names the first listing held.
        marked: names this group holds a mark of (an entry under one is a new file under a used name).
        max_files: at most this many entries (``None``: no bound).
        max_bytes: at most this many bytes, and always at least one entry (``None``: no bound).

    Always at most :data:`RECORD_NAMES_BYTES` of names, and at least one entry.
    """
    batch: list[QueueEntry] = []
    size = names = 0
    for entry in sorted(candidates):
        if entry.name not in settled:
            break  # appeared between the listings: it, and everything after it, waits for the next trigger
        if max_files is not None and len(batch) >= max_files:
            break
        if max_bytes is not None and batch and size + entry.bytes > max_bytes:
            break
        if batch and names + record_bytes(entry.name) > RECORD_NAMES_BYTES:
            break
        batch.append(entry)
        size += entry.bytes
        names += record_bytes(entry.name)
    return batch, [entry.name for entry in batch if entry.name in marked]


def _file_source_names(offset: dict[str, Any], checkpoint: Path | None) -> list[str]:
    """The names an offset of Spark's file source (a ``logOffset``) planned, from ``checkpoint``'s source log."""
    if "logOffset" in offset and checkpoint is not None:
        return _file_source_batch(checkpoint, int(offset["logOffset"]))
    return []


def offset_files(offset: dict[str, Any], checkpoint: Path | None = None) -> list[str]:
    """The names of the entries a batch's end ``offset`` admitted (one written by Spark's file source — a
    ``logOffset`` — is looked up in ``checkpoint``'s source log)."""
    if "files" in offset:
        return [entry[0] for entry in offset["files"]]
    return _file_source_names(offset, checkpoint)


def _admitted(offset: dict[str, Any], checkpoint: Path | None,
              current: dict[str, QueueEntry]) -> dict[str, FileIdentity]:
    """The entries ``offset`` and the offsets before it admitted and carried on, name → identity (a file-source
    offset names no identity: the file now in ``landing/`` is taken as the one it read)."""
    found = {e.name: e.identity for e in map(QueueEntry.from_offset, offset.get("pending", []))}
    if "files" in offset:
        found.update((e.name, e.identity) for e in map(QueueEntry.from_offset, offset["files"]))
    else:
        found.update((name, current[name].identity) for name in _file_source_names(offset, checkpoint)
                     if name in current)
    return found


def batch_offset(checkpoint: Path, batch_id: int) -> dict[str, Any]:
    """The end offset planned for ``batch_id`` in a query's ``checkpoint`` (``{}`` if none), from its offset log
    (each entry: a version line, the batch's metadata, then one line per source: this source's end offset)."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    except FileNotFoundError:
        return {}
    return dict(json.loads(lines[2])) if len(lines) >= 3 else {}


def batch_files(checkpoint: Path, batch_id: int) -> list[str]:
    """The queue files planned for ``batch_id`` in a query's ``checkpoint``."""
    return sorted(offset_files(batch_offset(checkpoint, batch_id), checkpoint))


def admitted_entries(checkpoint: Path, batch_id: int) -> list[tuple[str, FileIdentity | None]]:
    """Each entry batch ``batch_id`` admitted, with the identity it admitted (``None``: a batch of Spark's file
    source, which recorded none), from the offset log of the query's ``checkpoint``: what its consumption marks
    hold."""
    offset = batch_offset(checkpoint, batch_id)
    if "files" in offset:
        return [(e.name, e.identity) for e in map(QueueEntry.from_offset, offset["files"])]
    return [(name, None) for name in _file_source_names(offset, checkpoint)]


def file_name(source_file: str) -> str:
    """``file:/…/landing/a%20b.jsonl`` → ``a b.jsonl`` (the name inside ``landing/``; a plain path works too)."""
    return path_of(source_file).rstrip("/").rsplit("/", 1)[-1]


def _file_source_batch(checkpoint: Path, batch_id: int) -> list[str]:
    """The files Spark's file source planned for ``batch_id``: ``sources/0/<B>`` holds a version line, then one
    JSON entry per file; every few batches they are folded into ``<N>.compact``. Each entry carries its
    ``batchId``."""
    log = checkpoint / "sources" / "0"
    compacts = sorted((p for p in log.glob("*.compact") if p.stem.isdigit() and int(p.stem) >= batch_id),
                      key=lambda p: int(p.stem))
    for candidate in (log / str(batch_id), *compacts):
        try:
            lines = candidate.read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        found = [json.loads(line) for line in lines if line.strip()]
        names = sorted({file_name(e["path"]) for e in found if int(e.get("batchId", -1)) == batch_id})
        if names:
            return names
    return []


class _Files(InputPartition):
    def __init__(self, entries: list[QueueEntry], admitted_ms: int | None) -> None:
        super().__init__(entries)
        self.entries = entries
        self.admitted_ms = admitted_ms


class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self._landing = Path(options["path"])
        self._marks = Path(options["marks"])
        self._checkpoint = Path(options["checkpoint"]) if options.get("checkpoint") else None
        self._partitions = max(1, int(options.get("partitions", "2")))
        self._max_files = int(options["maxFilesPerTrigger"]) if options.get("maxFilesPerTrigger") else None
        self._max_bytes = int(options["maxBytesPerTrigger"]) if options.get("maxBytesPerTrigger") else None
        self._until: set[str] | None = None  # Trigger.AvailableNow: only what was there when the query began
        self._mark_reader = MarkReader()
        self._clock = PlannerClock.from_options(options)

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        return {"files": [], "pending": []}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark's name)
        if self._max_bytes is not None:
            return ReadMaxBytes(self._max_bytes)
        if self._max_files is not None:
            return ReadMaxFiles(self._max_files)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark's name)
        self._until = listed_names(self._landing)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        settled = listed_names(self._landing)
        listed = scan_landing(self._landing)
        if self._until is not None:
            listed = [e for e in listed if e.name in self._until]
        current = {e.name: e for e in listed}
        marks = self._mark_reader.read(self._marks, current)
        earlier = _admitted(start, self._checkpoint, current)
        # Still in flight: the very entry admitted (same identity) and not marked consumed since.
        pending = {name: current[name] for name, identity in earlier.items()
                   if name in current and current[name].identity.same(identity)
                   and not (name in marks and mark_covers(marks[name], identity))}
        candidates = [e for e in waiting(listed, marks) if e.name not in pending]
        max_files = limit.max_files if isinstance(limit, ReadMaxFiles) else None
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        batch, reused = admit(candidates, settled, set(marks), max_files=max_files, max_bytes=max_bytes)
        if not batch:
            return start
        offset = {"files": [e.to_offset() for e in batch],
                  "pending": sorted(e.to_offset()[:4] for e in pending.values()), "reused": reused}
        if self._clock is not None:
            offset["clock"] = self._clock.stamp(start)
        return offset

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if end == start:
            return []
        if "files" in end:
            entries = [QueueEntry.from_offset(entry) for entry in end["files"]]
        else:  # a batch Spark's file source planned, which recorded no identity: the entries now under its names
            entries = [describe(self._landing, name) or QueueEntry(0, name, 0)
                       for name in _file_source_names(end, self._checkpoint)]
        if not entries:
            return []
        count = min(self._partitions, len(entries))
        admitted = end.get("clock")
        return [_Files(entries[i::count], admitted) for i in range(count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's entries as ``binaryFile`` rows without their ``content``, each with the identity its
        batch admitted: the line splitter (``_pipeline.split_lines``) opens each file itself, checks that it is
        still that file, and reads it (:mod:`tenure.career.spark._read`), so its bytes cross into Spark once, as
        classified rows. Each row's ``admitted`` is its batch's group clock (null without one)."""
        assert isinstance(partition, _Files)
        entries = partition.entries
        admitted = [partition.admitted_ms * 1000 if partition.admitted_ms is not None else None] * len(entries)
        yield pa.RecordBatch.from_arrays(
            [pa.array([(self._landing / e.name).as_uri() for e in entries], pa.string()),
             pa.array([e.mtime_ns // 1000 for e in entries], pa.timestamp("us", tz="UTC")),
             pa.array([e.size for e in entries], pa.int64()), pa.nulls(len(entries), pa.binary()),
             pa.array(admitted, pa.timestamp("us", tz="UTC")),
             pa.array([e.ino for e in entries], pa.int64()),
             pa.array([e.mtime_ns for e in entries], pa.int64()),
             pa.array([e.refused for e in entries], pa.string()),
             pa.array([e.detail for e in entries], pa.string())], schema=_ARROW_SCHEMA)


class QueueSource(DataSource):
    """``spark.readStream.format("tenure_queue")``: the queue's files in production order (module docstring).

    Options: ``path`` (the landing folder), ``marks`` (this group's marks folder), ``checkpoint`` (the query's,
    to resume one Spark's file source wrote), ``partitions`` (read tasks per batch), one of
    ``maxFilesPerTrigger`` / ``maxBytesPerTrigger``, and the term's group clock (:func:`clock_options`). The
    schema is :data:`QUEUE_SOURCE_SCHEMA`.
    """

    @classmethod
    def name(cls) -> str:
        return QUEUE_SOURCE

    def schema(self) -> str:
        return QUEUE_SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        return _Reader(self.options)  # case-insensitive keys: Spark lower-cases option names

