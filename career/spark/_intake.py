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
- **Offsets.** An offset is the batch's files (``[name, mtime_ns, size]`` in order) plus ``pending``: the
  files (``[name, mtime_ns]``) admitted by earlier batches that this group has not marked consumed yet. Spark
  stores each end offset in the checkpoint's offset log, so a re-run of a batch reads exactly the same files,
  and a file is admitted at most once per checkpoint: it is either in an offset or marked
  (:mod:`tenure.career.spark._marks`).
- **No file is skipped by age, and a name used again is a new file.** A mark carries its file's modification
  time; a file in ``landing/`` whose time is newer than its mark's is a new file under a used name: it is
  admitted, and its batch's offset names it under ``reused`` (the batch writer logs ``queue_name_reused``).
  Empty files are left out (as Spark's file source does): they hold no record, and housekeeping archives them.
- **Event time on the group's clock.** Each offset also carries ``clock``: the group's clock
  (:class:`tenure.career.spark._term.TermClock`) when the batch was planned, in ms, never below the offset before it.
  Every row of the batch carries it as ``admitted``, deduplication's event time: no replica's wall clock moves
  the watermark, and a re-run of a batch sees the same time (it is in the offset log).

Checkpoints written by Spark's file source are resumed: their last batch's files come from its source log.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

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

from tenure.career.queue import TICK_SUFFIX, is_hidden, is_queue_file
from tenure.career.spark._pipeline import BINARY_FILE_SCHEMA, queue_file_gone

if TYPE_CHECKING:
    from tenure.career.spark._term import TermClock

__all__ = [
    "QUEUE_SOURCE",
    "QUEUE_SOURCE_SCHEMA",
    "RECORD_NAMES_BYTES",
    "QueueFile",
    "QueueSource",
    "admit",
    "batch_files",
    "batch_offset",
    "clock_options",
    "file_name",
    "offset_files",
    "record_bytes",
]

QUEUE_SOURCE = "tenure_queue"
"""The source's format name (registered per session by :func:`tenure.career.spark._query.source_stream`)."""

QUEUE_SOURCE_SCHEMA = f"{BINARY_FILE_SCHEMA}, admitted TIMESTAMP"
"""The ``binaryFile`` source's columns, plus ``admitted``: the group's clock when the file's batch was planned."""

_ARROW_SCHEMA = pa.schema([("path", pa.string()), ("modificationTime", pa.timestamp("us", tz="UTC")),
                           ("length", pa.int64()), ("content", pa.binary()),
                           ("admitted", pa.timestamp("us", tz="UTC"))])


RECORD_NAMES_BYTES = 256 << 10
"""At most this much of a batch's commit record names the files it read (its ``files``, as JSON): ZooKeeper takes
no request over 1 MiB (``jute.maxbuffer``), so a batch admits no more files once their names would pass it,
whatever its bound in files or bytes (about 10 000 files of 20-character names, 1 100 of 230)."""


def record_bytes(name: str) -> int:
    """What the file name ``name`` takes in a commit record's ``files``: its JSON string and a comma."""
    return len(json.dumps(name)) + 1


def clock_options(clock: TermClock) -> dict[str, str]:
    """The source options that hand the term's group clock to the source's planner, a Python process that Spark
    starts on this host (``time.monotonic()`` is the host's, so the planner carries the clock on from them)."""
    group, monotonic = clock.reading()
    return {"clock": repr(group), "clockMonotonic": repr(monotonic)}


class _PlannerClock:
    """The group's clock in the planner's process, from :func:`clock_options`."""

    def __init__(self, group: float, monotonic: float) -> None:
        self._offset = group - monotonic

    def now_ms(self) -> int:
        return int((self._offset + time.monotonic()) * 1000)


@dataclass(frozen=True, order=True)
class QueueFile:
    """A visible queue file in ``landing/``; instances sort in admission order (mtime in ns, then name)."""

    mtime_ns: int
    name: str
    size: int

    def entry(self) -> list[Any]:
        return [self.name, self.mtime_ns, self.size]


def _is_input(name: str) -> bool:
    return is_queue_file(name) or (name.endswith(TICK_SUFFIX) and not is_hidden(name))


def _names(folder: Path) -> set[str]:
    try:
        return {entry.name for entry in os.scandir(folder) if _is_input(entry.name)}
    except FileNotFoundError:
        return set()


def _stat_files(folder: Path) -> list[QueueFile]:
    found = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return []
    for entry in entries:
        if not _is_input(entry.name):
            continue
        try:
            stat = entry.stat()
        except FileNotFoundError:  # archived or removed since the scan
            continue
        found.append(QueueFile(stat.st_mtime_ns, entry.name, stat.st_size))
    return found


def _mark_times(folder: Path, names: set[str]) -> dict[str, int]:
    """The marks of ``names`` (files now in ``landing/``), name → mark time; other marks are not looked at."""
    found = {}
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return {}
    for entry in entries:
        if entry.name in names:
            try:
                found[entry.name] = entry.stat().st_mtime_ns
            except FileNotFoundError:  # unmarked meanwhile (archived)
                continue
    return found


def admit(listed: Sequence[QueueFile], settled: set[str], seen: set[str], marks: dict[str, int], *,
          max_files: int | None, max_bytes: int | None) -> tuple[list[QueueFile], list[str]]:
    """The next batch's files, in admission order, and the names among them used again (pure: no I/O).

    Args:
        listed: the second listing of ``landing/``.
        settled: names the first listing held.
        seen: names earlier batches of this checkpoint admitted that are not marked consumed yet.
        marks: this group's marks, name → the consumed file's modification time (ns).
        max_files: at most this many files (``None``: no bound).
        max_bytes: at most this many bytes, and always at least one file (``None``: no bound).

    Always at most :data:`RECORD_NAMES_BYTES` of names, and at least one file.
    """
    batch: list[QueueFile] = []
    reused: list[str] = []
    size = names = 0
    for file in sorted(listed):
        if file.name in seen:
            continue
        marked = marks.get(file.name)
        if marked is not None and file.mtime_ns <= marked:
            continue  # consumed: still here because another group has not consumed it yet
        if file.name not in settled:
            break  # appeared between the listings: it, and everything after it, waits for the next trigger
        if file.size == 0:
            continue
        if max_files is not None and len(batch) >= max_files:
            break
        if max_bytes is not None and batch and size + file.size > max_bytes:
            break
        if batch and names + record_bytes(file.name) > RECORD_NAMES_BYTES:
            break
        batch.append(file)
        size += file.size
        names += record_bytes(file.name)
        if marked is not None:
            reused.append(file.name)
    return batch, reused


def offset_files(offset: dict[str, Any], checkpoint: Path | None = None) -> list[str]:
    """The names of the files a batch's end ``offset`` admitted (one written by Spark's file source — a
    ``logOffset`` — is looked up in ``checkpoint``'s source log)."""
    if "files" in offset:
        return [entry[0] for entry in offset["files"]]
    if "logOffset" in offset and checkpoint is not None:
        return _file_source_batch(checkpoint, int(offset["logOffset"]))
    return []


def _admitted(offset: dict[str, Any], checkpoint: Path | None, written: dict[str, int]) -> dict[str, int]:
    """The files ``offset`` and the offsets before it admitted and carried on, name → modification time (a
    file-source offset names no times: the file now in ``landing/`` is taken as the one it read)."""
    found = {name: int(at) for name, at in offset.get("pending", [])}
    if "files" in offset:
        found.update((entry[0], int(entry[1])) for entry in offset["files"])
    else:
        found.update((name, written[name]) for name in offset_files(offset, checkpoint) if name in written)
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


def file_name(source_file: str) -> str:
    """``file:/…/landing/a%20b.jsonl`` → ``a b.jsonl`` (the name inside ``landing/``; a plain path works too)."""
    path = unquote(urlparse(source_file).path) if source_file.startswith("file:") else source_file
    return path.rstrip("/").rsplit("/", 1)[-1]


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
    def __init__(self, paths: list[str], admitted_ms: int | None) -> None:
        super().__init__(paths)
        self.paths = paths
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
        self._clock = (_PlannerClock(float(options["clock"]), float(options["clockMonotonic"]))
                       if options.get("clock") else None)  # none (the warm-up): rows are stamped at ingestion

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        return {"files": [], "pending": []}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark's name)
        if self._max_bytes is not None:
            return ReadMaxBytes(self._max_bytes)
        if self._max_files is not None:
            return ReadMaxFiles(self._max_files)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark's name)
        self._until = _names(self._landing)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        settled = _names(self._landing)
        listed = _stat_files(self._landing)
        if self._until is not None:
            listed = [f for f in listed if f.name in self._until]
        written = {f.name: f.mtime_ns for f in listed}
        marks = _mark_times(self._marks, set(written))
        earlier = _admitted(start, self._checkpoint, written)
        # Still in flight: the very file admitted (same name and time) and not marked consumed since.
        pending = {name: at for name, at in earlier.items() if written.get(name) == at and marks.get(name, -1) < at}
        seen = set(pending)
        max_files = limit.max_files if isinstance(limit, ReadMaxFiles) else None
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        batch, reused = admit(listed, settled, seen, marks, max_files=max_files, max_bytes=max_bytes)
        if not batch:
            return start
        offset = {"files": [f.entry() for f in batch], "pending": sorted([n, at] for n, at in pending.items()),
                  "reused": reused}
        if self._clock is not None:
            offset["clock"] = max(int(start.get("clock", 0)), self._clock.now_ms())
        return offset

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        names = offset_files(end, self._checkpoint) if end != start else []
        if not names:
            return []
        count = min(self._partitions, len(names))
        admitted = end.get("clock")
        return [_Files([str(self._landing / n) for n in names[i::count]], admitted) for i in range(count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's files as ``binaryFile`` rows without their ``content``: the line splitter reads each
        file itself (``_pipeline.split_lines``), so its bytes cross into Spark once, as classified rows. Each
        row's ``admitted`` is its batch's group clock (null without one)."""
        assert isinstance(partition, _Files)
        paths, stamps, sizes = [], [], []
        for path in partition.paths:
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                raise queue_file_gone(path) from None
            paths.append(Path(path).as_uri())
            stamps.append(datetime.fromtimestamp(stat.st_mtime_ns / 1e9, tz=UTC))
            sizes.append(stat.st_size)
        admitted = [partition.admitted_ms * 1000 if partition.admitted_ms is not None else None] * len(paths)
        yield pa.RecordBatch.from_arrays(
            [pa.array(paths, pa.string()), pa.array(stamps, pa.timestamp("us", tz="UTC")),
             pa.array(sizes, pa.int64()), pa.nulls(len(paths), pa.binary()),
             pa.array(admitted, pa.timestamp("us", tz="UTC"))], schema=_ARROW_SCHEMA)


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

