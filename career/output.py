"""The output's contract: ``table/``, ``quarantine/`` and ``dead-letter/`` are Delta Lake tables of whole batches.

A batch's part files are linked into the output folder after its fenced ZooKeeper commit (the source of truth)
and then added to the folder's Delta table in **one** Delta commit (:func:`publish_batch`), so a Delta reader
sees whole batches only, in batch order, and each version names the batch, the epoch that committed it and the
replica. Every output is created append-only (``delta.appendOnly``): tenure never removes or rewrites a file. Users
may compact one (``OPTIMIZE``: versions of its own whose actions change no data) and ``VACUUM`` it; tenure and
``tenure verify`` read through the table's snapshot and log, and a batch whose named part file is gone before its
version is refused (:class:`MissingPartError`), never published in part.

Idempotent, so any replica can finish a batch's publish: a successor rolling a committed batch forward, or a
stale leader resuming in the middle of its own. The version carries Delta's application transaction
(``txn``: its queue's application id, version = the batch id); a batch the table's transaction version already
covers is skipped, and a commit that loses a race on the same application id (``ConcurrentTransaction``) re-reads the
table and stops when the winner covered the batch. delta-rs skips nothing by itself: the check comes first, as
in Spark's Delta sink.

Every queue of a topic writes into the same outputs (:class:`QueueOutput`): queue k of N > 1 names its part files
``queue-<k>-batch-<B>-…``, carries the application id ``tenure-queue-<k>`` and a ``_queue`` column on every row,
and its versions say the queue in their commit info; a topic of one queue keeps the names, the application id
``tenure`` and the schema of before topics had several. Leaders of different queues commit at once: a commit that
finds its log version taken by another queue's is tried again at the next version, by delta-rs itself for a blind
append (its commit retries, 15 by default, each checked for a conflict with the version that won: appends of other
application ids are none), here when the version that won changed the table's schema (delta-rs's
``MetadataChanged``) or delta-rs ran out of retries. A batch is still one version, never two in one.

A table is created at the first batch that adds files to it, with every published file already in the folder
(batches up to that one): a data root written before the outputs were Delta tables becomes one in place, in one
version, without rewriting a file.

Pure Python (``deltalake``, ``pyarrow``), no Spark, so ``tenure verify`` and ``tenure history`` read it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, Field, Schema
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    Transaction,
    create_table_with_add_actions,
)

from tenure.career._durable import fsync, sync_dirs
from tenure.career.queue import QUEUE_COLUMN, check_queue, is_hidden
from tenure.errors import TenureError

__all__ = [
    "APP_ID",
    "CHECKPOINT",
    "DEAD_LETTER",
    "DEDUP",
    "DELTA_LOG",
    "DELTA_OUTPUTS",
    "ORDER",
    "QUARANTINE",
    "QUEUE_COLUMN",
    "RETRY",
    "SET_ASIDE",
    "TABLE",
    "TABLE_CONFIGURATION",
    "BatchVersion",
    "MissingPartError",
    "OutputSchemaError",
    "QueueOutput",
    "adopt_table",
    "batch_of",
    "batch_versions",
    "check_batch_schema",
    "covered_batch",
    "covers",
    "has_version",
    "is_delta_table",
    "part_of",
    "publish_batch",
    "snapshot_files",
    "snapshot_rows",
]

TABLE, QUARANTINE, DEAD_LETTER = "table", "quarantine", "dead-letter"
"""The data root's output folders that are Delta tables (:data:`DELTA_OUTPUTS`)."""
RETRY, ORDER, SET_ASIDE, CHECKPOINT, DEDUP = "retry", "order", "set-aside", "checkpoint", "dedup"
"""The data root's other folders: the retry store's snapshots, the per-key high-water marks, poison batches set
aside, the terms' Spark checkpoints and the dedup store's files (``tenure.career.spark._layout.Layout`` builds the
paths)."""
DELTA_OUTPUTS: tuple[str, ...] = (TABLE, QUARANTINE, DEAD_LETTER)

APP_ID = "tenure"
"""The application id of the Delta transaction each version of a topic of one queue carries; its version is the
batch id. Queue k of a topic of more carries ``tenure-queue-<k>`` (:attr:`QueueOutput.app_id`)."""


DELTA_LOG = "_delta_log"

TABLE_CONFIGURATION: dict[str, str | None] = {
    "delta.appendOnly": "true",
    # A checkpoint every 100 versions keeps a reader's log replay short; log entries older than 7 days (the
    # archive's default retention of queue files) are removed when a checkpoint is written: a batch every 1.5 s
    # leaves 400 000 entries in 7 days, which every reader's listing of the log pays for. Time travel reaches
    # back as far (the data files stay).
    "delta.checkpointInterval": "100",
    "delta.logRetentionDuration": "interval 7 days",
    "delta.enableExpiredLogCleanup": "true",
}
"""The properties every output table is created with (README, "Reading the output")."""

#: Commit-info keys of a version (``custom_metadata``), read back by ``verify`` and ``history``.
_BATCH, _EPOCH, _REPLICA, _ADOPTED = "tenure.batch", "tenure.epoch", "tenure.replica", "tenure.adopted_batches"
_QUEUE = "tenure.queue"  # a topic of several queues only
_PART = re.compile(r"(?:queue-(\d+)-)?batch-(\d{12})-.+\.parquet")
_COMMIT_ATTEMPTS = 5  # each of delta-rs's own retries; a lost race here is another queue's schema change


@dataclass(frozen=True)
class QueueOutput:
    """Queue ``queue`` of a topic of ``queues``, as the outputs every queue writes into know it: the Delta
    transaction's application id its versions carry, its part files' names and the ``_queue`` value of its rows.

    A topic of one queue keeps what the outputs were before topics had several queues: the application id ``tenure``,
    ``batch-<B>-…`` files and no ``_queue`` column.

    Example:
        >>> QueueOutput().app_id, QueueOutput().part_name(3, "part-00000.parquet")
        ('tenure', 'batch-000000000003-part-00000.parquet')
        >>> QueueOutput(2, 4).app_id, QueueOutput(2, 4).part_name(3, "part-00000.parquet")
        ('tenure-queue-2', 'queue-2-batch-000000000003-part-00000.parquet')
    """

    queue: int = 0
    queues: int = 1

    def __post_init__(self) -> None:
        check_queue(self.queue, self.queues)

    @property
    def app_id(self) -> str:
        """The application id of the Delta transaction each of the queue's versions carries (version = batch)."""
        return APP_ID if self.queues == 1 else f"{APP_ID}-queue-{self.queue}"

    @property
    def column(self) -> int | None:
        """The :data:`QUEUE_COLUMN` value of the queue's rows; None: the rows have no such column (one queue)."""
        return None if self.queues == 1 else self.queue

    def part_name(self, batch_id: int, part: str) -> str:
        """The published name of a part file ``part`` of batch ``batch_id`` in a Delta output."""
        prefix = "" if self.queues == 1 else f"queue-{self.queue}-"
        return f"{prefix}batch-{batch_id:012d}-{part}"

    def batch_of(self, name: str) -> int | None:
        """The batch of one of the queue's published part files (:meth:`part_name`); None for any other name."""
        found = part_of(name)
        return found[1] if found is not None and found[0] == self.column else None


SOLE = QueueOutput()
"""The one queue of a topic of one."""


class MissingPartError(TenureError):
    """A committed batch's part file is gone from its output before the batch's Delta version named it: the version
    is refused, never made of part of the batch."""


class OutputSchemaError(DeltaError):
    """A batch's files cannot join the table: a column changed type (raised before the batch commits)."""


@dataclass(frozen=True)
class BatchVersion:
    """One version of an output table: the batch it added (and, for a table adopted in place, the batches
    ``first..batch`` it took in at once), the epoch that committed it, that epoch's replica and the batch's queue."""

    version: int
    batch: int | None
    epoch: int | None
    replica: str | None
    first: int | None = None
    queue: int | None = None
    """The queue whose batch it is (0 for a topic of one queue's); None with ``batch``."""

    @property
    def adopted(self) -> bool:
        return self.first is not None


def batch_of(name: str) -> int | None:
    """The batch id in the name of a part file a topic of one queue published (``batch-<B, 12 digits>-….parquet``),
    else None."""
    return SOLE.batch_of(name)


def part_of(name: str) -> tuple[int | None, int] | None:
    """The queue (None: a topic of one queue's file) and batch in a published part file's name, else None."""
    match = _PART.fullmatch(name)
    if match is None:
        return None
    return (None if match.group(1) is None else int(match.group(1))), int(match.group(2))


def is_delta_table(folder: Path) -> bool:
    return (folder / DELTA_LOG).is_dir()


def covered_batch(folder: Path, queue: QueueOutput = SOLE) -> int | None:
    """The highest batch of ``queue`` the table at ``folder`` has a version for (its transaction version), or None."""
    if not is_delta_table(folder):
        return None
    try:
        return DeltaTable(str(folder)).transaction_version(queue.app_id)
    except TableNotFoundError:  # the log folder exists, its first commit does not yet
        return None


def covers(transaction_version: int | None, batch_id: int) -> bool:
    """Whether a table whose transaction version is ``transaction_version`` has batch ``batch_id``."""
    return transaction_version is not None and transaction_version >= batch_id


def publish_batch(folder: Path, batch_id: int, *, epoch: int, replica_id: str, parts: Iterable[str] | None = None,
                  before_commit: Callable[[], None] = lambda: None, queue: QueueOutput = SOLE) -> int | None:
    """Add batch ``batch_id`` of ``queue``'s published part files in ``folder`` to its Delta table as one version.

    Call after the batch's fenced commit and its publish links. Returns the version made, or None when there
    was nothing to do: the table already covers the batch (another replica finished it) or the batch put no
    file here. The new log entry is fsynced before returning. ``before_commit`` is called once the table has
    been read and its transaction version checked, just before the version is written (a fault hook).

    Batches published in the folder after the table's transaction version and before ``batch_id`` but in no
    version (renamed by an earlier release's leader during a rolling upgrade) are added first, one version each,
    in batch order, with the epoch their rows carry.

    ``parts`` names the batch's published files in ``folder`` (its commit record's ``parts``). With them, the
    folder, which keeps every file ever published, is listed only when the table may have missed a batch (its
    transaction version is below ``batch_id - 1``); without them (a record of an earlier release) it is listed
    to find the batch's files.

    Raises:
        MissingPartError: a file ``parts`` names is gone and the table does not cover the batch yet.
        OutputSchemaError: a column of the batch's files has another type than the table's.
        DeltaError: the table could not be read or written (the batch's publish is retried by its re-run).
    """
    listing = _names(folder) if parts is None else None
    files = (_files_of(folder, listing, batch_id, queue) if listing is not None
             else _named_files(folder, parts or (), batch_id, queue))
    if not files:
        return None
    if not has_version(folder):
        before_commit()
        if (made := _create(folder, batch_id, epoch=epoch, replica_id=replica_id, queue=queue)) is not None:
            return made
    with _open(folder) as table:
        return _publish(table, folder, listing, batch_id, files, epoch=epoch, replica_id=replica_id,
                        before_commit=before_commit, queue=queue)


_OPEN: OrderedDict[Path, tuple[threading.Lock, int, DeltaTable]] = OrderedDict()
_OPEN_LOCK = threading.Lock()
_OPEN_MAX = 8  # a replica's three outputs, and the warm-up's scratch ones


@contextlib.contextmanager
def _open(folder: Path) -> Iterator[DeltaTable]:
    """The table at ``folder``, kept open by this process and brought up to date: loading it anew replays the
    log from its last checkpoint (up to 100 entries, ~20 ms), bringing it up to date reads only new entries.
    One caller at a time per table (the career's batch and control threads both publish). A table whose log
    folder is another one than when it was opened (the output moved aside and a new table begun), or whose newest
    known entry is gone (a torn one removed after a power loss), is loaded anew.
    """
    key = folder.absolute()
    log = (key / DELTA_LOG).stat().st_ino
    with _OPEN_LOCK:
        if key not in _OPEN or _OPEN[key][1] != log or not _entry(key, _OPEN[key][2].version()).exists():
            _OPEN[key] = (threading.Lock(), log, DeltaTable(str(key)))
            while len(_OPEN) > _OPEN_MAX:
                _OPEN.popitem(last=False)
        _OPEN.move_to_end(key)
        lock, _log_folder, table = _OPEN[key]
    with lock:
        table.update_incremental()
        yield table


def _publish(table: DeltaTable, folder: Path, listing: list[str] | None, batch_id: int, files: list[Path], *,
             epoch: int, replica_id: str, before_commit: Callable[[], None], queue: QueueOutput) -> int | None:
    covered = table.transaction_version(queue.app_id)
    if covers(covered, batch_id):
        return None
    # Each term rolls the last committed batch forward before its first batch, so an earlier batch without its
    # version was renamed by an earlier release: there is room for one only when the table is behind batch_id-1.
    if listing is None:
        listing = [] if covers(covered, batch_id - 1) else _names(folder)
    missed = sorted({b for n in listing
                     if (b := queue.batch_of(n)) is not None and not covers(covered, b) and b < batch_id})
    for gap in missed:
        gap_files = _files_of(folder, listing, gap, queue)
        _add_version(table, folder, gap, gap_files, epoch=_epoch_in(gap_files[0], epoch), replica_id="", queue=queue)
    return _add_version(table, folder, batch_id, files, epoch=epoch, replica_id=replica_id,
                        before_commit=before_commit, queue=queue)


def _add_version(table: DeltaTable, folder: Path, batch_id: int, files: list[Path], *, epoch: int,
                 replica_id: str, queue: QueueOutput, before_commit: Callable[[], None] = lambda: None) -> int | None:
    """Commit ``files`` as batch ``batch_id``'s version on ``table`` (up to date), unless the table covers the
    batch already; a race lost on the same batch (Delta's transaction conflict) is that, too.

    A race lost to another queue's version that delta-rs does not retry past itself (a schema change, or its
    retries spent while leaders of many queues commit) is tried again here on the table as it is then, its
    columns checked again, up to ``_COMMIT_ATTEMPTS`` times: the batch is still the one version it makes."""
    properties = CommitProperties(custom_metadata=_metadata(batch_id, epoch, replica_id, queue),
                                  app_transactions=[Transaction(queue.app_id, batch_id)])
    lost: CommitFailedError | None = None
    for attempt in range(_COMMIT_ATTEMPTS):
        if covers(table.transaction_version(queue.app_id), batch_id):
            return None
        if _evolve(table, files):
            table.update_incremental()
        if attempt == 0:
            before_commit()
        read = table.version()
        try:
            table.create_write_transaction([_add(p) for p in files], mode="append", schema=table.schema(),
                                           commit_properties=properties, post_commithook_properties=_HOOKS)
        except CommitFailedError as exc:  # lost to a replica finishing the batch (covered), or to another queue
            lost = exc
            table.update_incremental()
            continue
        version = _version_of(table, folder, read, batch_id, queue)
        _sync_log(folder, version)
        table.update_incremental()
        return version
    if covers(table.transaction_version(queue.app_id), batch_id):
        return None
    assert lost is not None
    raise lost


def _version_of(table: DeltaTable, folder: Path, read: int, batch_id: int, queue: QueueOutput) -> int:
    """The version the commit made: the first after ``read`` (the version it was read at) whose transaction is this
    batch's of this queue (a table object's own version does not move on its commit, and delta-rs commits at a
    later version when other writers' entries, another queue's leader's, came in between without conflict)."""
    version = read + 1
    while True:
        try:
            entry = _entry(folder, version).read_text()
        except FileNotFoundError:
            break
        if _carries(entry, queue.app_id, batch_id):
            return version
        version += 1
    table.update_incremental()
    return table.version()


def _carries(entry: str, app_id: str, batch_id: int) -> bool:
    """Whether a log entry's actions hold the transaction ``app_id`` at version ``batch_id``."""
    for line in entry.splitlines():
        if '"txn"' in line:
            txn = json.loads(line).get("txn") or {}
            if txn.get("appId") == app_id and txn.get("version") == batch_id:
                return True
    return False


def _epoch_in(path: Path, default: int) -> int:
    """The ``_epoch`` a part file's rows carry (every output row does), else ``default``."""
    column = pq.read_table(path, columns=["_epoch"]).column("_epoch") if "_epoch" in pq.read_schema(path).names \
        else None
    return int(column[0].as_py()) if column is not None and len(column) else default


def adopt_table(folder: Path, batch_id: int, *, epoch: int, replica_id: str, queue: QueueOutput = SOLE) -> int | None:
    """Make ``folder``'s published files of ``queue`` (batches up to ``batch_id``) a Delta table in one version, when
    it holds some and has no table yet: a data root written before the outputs were Delta tables, adopted in place
    at the first term of this release without rewriting a file. Returns the version made (0), or None."""
    if has_version(folder) or not folder.is_dir() or not _published_files(folder, batch_id, queue):
        return None
    return _create(folder, batch_id, epoch=epoch, replica_id=replica_id, queue=queue)


def snapshot_files(folder: Path) -> set[str]:
    """The names of the data files in the table's newest version (the files a Delta reader sees)."""
    actions = DeltaTable(str(folder)).get_add_actions(flatten=True)
    return {posixpath_name(p) for p in pa.table(actions).column("path").to_pylist()}


def snapshot_rows(folder: Path) -> int:
    """The rows a Delta reader of ``folder`` sees now (the newest version's ``numRecords``; 0 before the first)."""
    if not has_version(folder):
        return 0
    actions = pa.table(DeltaTable(str(folder)).get_add_actions(flatten=True))
    return int(pc.sum(actions.column("num_records")).as_py() or 0) if actions.num_rows else 0


def batch_versions(folder: Path) -> list[BatchVersion]:
    """Every version in the table's log still kept (oldest first), with the batch, epoch, replica and queue its
    commit info names (None for a version tenure did not write, e.g. a column added to the schema)."""
    found = []
    for entry in DeltaTable(str(folder)).history():
        batch = _int(entry.get(_BATCH))
        found.append(BatchVersion(
            version=int(entry["version"]),
            batch=batch,
            epoch=_int(entry.get(_EPOCH)),
            replica=entry.get(_REPLICA),
            first=_int(entry.get(_ADOPTED, "").split("..")[0]) if entry.get(_ADOPTED) else None,
            queue=_int(entry.get(_QUEUE, "0")) if batch is not None else None,
        ))
    return sorted(found, key=lambda v: v.version)


def posixpath_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


_HOOKS = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=True)


def _int(value: Any) -> int | None:
    return int(value) if value not in (None, "") else None


def _metadata(batch_id: int, epoch: int, replica_id: str, queue: QueueOutput) -> dict[str, Any]:
    queued = {} if queue.column is None else {_QUEUE: str(queue.column)}
    return {_BATCH: str(batch_id), _EPOCH: str(epoch), _REPLICA: replica_id, **queued}


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def _files_of(folder: Path, names: Iterable[str], batch_id: int, queue: QueueOutput) -> list[Path]:
    """The published part files of ``queue``'s batch ``batch_id`` among ``names`` (the folder's listing)."""
    return sorted(folder / n for n in names if queue.batch_of(n) == batch_id)


def _named_files(folder: Path, names: Iterable[str], batch_id: int, queue: QueueOutput) -> list[Path]:
    """The files of ``names`` in ``folder``: all there once the publish has linked them.

    One missing is refused, never published without it (a version of part of a batch), unless the batch needs no
    version here: the table covers it already (its files may since have been compacted and vacuumed away), or the
    folder holds none of the batch's files and no table (the output was moved aside to begin a new table: the
    batch adds nothing to it, as when the folder is listed).

    Raises:
        MissingPartError: naming the file and the fix.
    """
    wanted = sorted(set(names))
    present = [folder / name for name in wanted if (folder / name).is_file()]
    if len(present) == len(wanted) or (not present and not has_version(folder)):
        return present
    if covers(covered_batch(folder, queue), batch_id):
        return []
    missing = sorted(set(wanted) - {path.name for path in present})
    raise MissingPartError(
        f"{folder / missing[0]}, a part file of committed batch {batch_id} ({len(missing)} of its {len(wanted)} "
        "missing), is gone before its Delta version named it, and its staged copy too: something deleted it (a "
        "VACUUM with full=True, or a person). Restore it from a backup of the data root and the publish goes on "
        "(docs/operating/reading-the-output.md#table-maintenance)")


def _published_files(folder: Path, up_to: int, queue: QueueOutput) -> list[Path]:
    return sorted(folder / n for n in os.listdir(folder)
                  if not is_hidden(n) and (b := queue.batch_of(n)) is not None and b <= up_to)


def has_version(folder: Path) -> bool:
    """Whether the table has a version: its first log entry, or a checkpoint once the clean-up removed that
    (without listing the log, which holds an entry per batch for the retention period)."""
    log = folder / DELTA_LOG
    return (log / f"{0:020d}.json").exists() or (log / "_last_checkpoint").exists()


def _add(path: Path) -> AddAction:
    stat = path.stat()
    stats = {"numRecords": pq.read_metadata(path).num_rows}
    return AddAction(path.name, stat.st_size, {}, stat.st_mtime_ns // 1_000_000, True, json.dumps(stats))


def _create(folder: Path, batch_id: int, *, epoch: int, replica_id: str, queue: QueueOutput) -> int | None:
    """Create the table with every published file of ``queue``'s batches up to ``batch_id`` (the first batch's
    files, or a data root adopted in place); None when another replica (another queue's leader) created it first."""
    files = _published_files(folder, batch_id, queue)
    schema = pa.unify_schemas([pq.read_schema(p) for p in files], promote_options="permissive")
    metadata = _metadata(batch_id, epoch, replica_id, queue)
    first = min(b for p in files if (b := queue.batch_of(p.name)) is not None)
    if first != batch_id:
        metadata[_ADOPTED] = f"{first}..{batch_id}"
    try:
        create_table_with_add_actions(
            str(folder), Schema.from_arrow(_plain(schema)), [_add(p) for p in files], mode="error",
            configuration=TABLE_CONFIGURATION,
            commit_properties=CommitProperties(custom_metadata=metadata,
                                               app_transactions=[Transaction(queue.app_id, batch_id)]))
    except DeltaError:
        if has_version(folder):  # created meanwhile by another replica: the caller goes on as for any table
            return None
        raise
    _sync_log(folder, 0)
    sync_dirs(folder)
    return 0


def _plain(schema: pa.Schema) -> pa.Schema:
    """The schema without Spark's per-file metadata (which differs between files and means nothing to Delta)."""
    return pa.schema([f.remove_metadata() for f in schema])


def check_batch_schema(folder: Path, files: Iterable[Path]) -> None:
    """Refuse a staged batch whose files change a column's type in the table at ``folder`` (called before the
    batch's commit, so a changed transform fails its batch instead of leaving a committed batch unpublishable).

    Raises:
        OutputSchemaError: the column, both types and the fix.
    """
    if has_version(folder):
        with _open(folder) as table:
            _new_columns(table, files)


def _new_columns(table: DeltaTable, files: Iterable[Path]) -> list[pa.Field]:
    """The columns the files bring that the table lacks; raises on a column whose type changed."""
    current = {f.name: f for f in pa.schema(table.schema().to_arrow())}
    new: dict[str, pa.Field] = {}
    for path in files:
        for field in _plain(pq.read_schema(path)):
            known = current.get(field.name)
            if known is None:
                new.setdefault(field.name, field.with_nullable(True))
            elif known.type != field.type:
                raise OutputSchemaError(
                    f"{path.name}: column {field.name!r} is {field.type} but the Delta table at {table.table_uri} "
                    f"has {known.type}: keep the column's type in your transform (a new column is fine), or move "
                    "the output folder aside to start a new table")
    return list(new.values())


def _evolve(table: DeltaTable, files: Iterable[Path]) -> bool:
    """Add to the table's schema the columns the batch's files bring (a changed transform: one version of its
    own, before the batch's). Returns whether the schema changed."""
    new = _new_columns(table, files)
    if new:
        table.alter.add_columns([Field.from_arrow(f) for f in new])
    return bool(new)


_SYNCED: dict[Path, int] = {}  # per table, the newest version this process has fsynced
_SYNC_BACK = 100  # a process's first commit fsyncs this many entries before its own (the checkpoint interval)


def _sync_log(folder: Path, version: int) -> None:
    """fsync the version's log entry and the log folder (and a checkpoint the commit wrote): a reader after a
    power loss finds every version the publish reported, or the batch is published again from ZooKeeper.

    The entries other writers made since this process's last commit are fsynced first (a compaction's: delta-rs
    syncs none), so that after a power loss only entries newer than tenure's last can be torn, which the next
    inauguration removes (``tenure.career.spark._recovery``)."""
    log = folder / DELTA_LOG
    key = folder.absolute()
    for earlier in range(max(0, _SYNCED.get(key, version - _SYNC_BACK - 1) + 1), version):
        with contextlib.suppress(FileNotFoundError):  # cleaned up, or never there (a checkpoint's gap)
            fsync(_entry(folder, earlier))
    fsync(_entry(folder, version))
    for extra in ("_last_checkpoint", f"{version:020d}.checkpoint.parquet"):
        with contextlib.suppress(FileNotFoundError):
            fsync(log / extra)
    fsync(log, directory=True)
    _SYNCED[key] = version


def _entry(folder: Path, version: int) -> Path:
    return folder / DELTA_LOG / f"{version:020d}.json"
