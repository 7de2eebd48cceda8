"""The Spark career: a single-writer Structured Streaming consumer whose output appears only by fenced commit."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import structlog
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)

from career._protocol import CareerContext, CareerObserver, Outcome
from career.spark._config import SparkCareerConfig
from career.spark._hooks import HookError, Transform, check_transform, load_hook
from career.spark._marks import ConsumptionMarks
from career.spark._order import HighWaterMarks, maxima, split_late
from career.spark._pipeline import (
    BINARY_FILE,
    KIND_BAD,
    KIND_FILE,
    KIND_ROW,
    TICK_SUFFIX,
    classified_stream,
    ordered,
    quarantine_rows,
    records,
    with_batch,
)
from career.spark._retry import (
    WRITTEN,
    RetryPolicy,
    RowFunction,
    dead_letter_table,
    identity_row,
    next_due,
    process_records,
    read_snapshot,
    snapshot_table,
    write_parquet,
)
from career.spark._session import build_session, use_driver_python
from career.spark._storage import (
    Layout,
    StaleTermError,
    adopt_checkpoint,
    archive_files,
    empty_landing_files,
    finish_publish,
    is_published,
    landing_files,
    newer_term_started,
    published_name,
    remove_dead_staging,
    spark_committed,
    sweep_archive,
    sync_tree,
)
from election._errors import ElectionError, Fenced, NotLeader, TenureError

__all__ = ["HandingOverError", "HookError", "InjectedFaultError", "SparkCareer", "SparkCareerError"]

_BACKLOG_EVERY_S = 1.0
_SWEEP_EVERY_S = 60.0
_EMPTY_FILE_MIN_AGE_S = 2.0
_WARMUP_FILES = 10  # two batches at the default 5 files per trigger
_WARMUP_RECORDS_PER_FILE = 1000
_POLL_S = 0.02


class SparkCareerError(TenureError):
    """The Spark career cannot go on (the streaming query died, or it was driven out of order)."""


class InjectedFaultError(SparkCareerError):
    """Raised at a ``fail_after`` point: a deliberate crash inside a batch, for tests and drills."""


class HandingOverError(SparkCareerError):
    """A batch refused to start because the term is ending; Spark re-runs it from the checkpoint later."""


@dataclass
class _Term:
    """One leadership term's shared state: the control thread and Spark's batch thread both touch it."""

    ctx: CareerContext
    log: Any
    marks: ConsumptionMarks  # this group's consumption marks on the queue, and the archive they gate
    checkpoint: Path  # this term's own Spark checkpoint (storage.adopt_checkpoint)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    query: Any = None
    in_flight: int | None = None
    last_seen: int | None = None  # the last batch id whose foreachBatch returned (committed or skipped)
    completed: int = 0
    reported: int = 0
    last_committed: int | None = None
    last_record: dict[str, Any] | None = None
    error: BaseException | None = None
    restarts: int = 0
    order: tuple[str | None, HighWaterMarks] | None = None  # the per-key marks as of a commit record's "order"
    marked: int | None = None  # the last batch whose queue files this term marked consumed

    @property
    def epoch(self) -> int:
        return self.ctx.epoch


@dataclass(frozen=True)
class _Hooks:
    """The user's code in the batch path, loaded once; ``row_function`` None means no retry store unless one
    is left over from a term that had one (then it drains through :func:`identity_row`)."""

    transform: Transform | None = None
    row_function: RowFunction | None = None
    policy: RetryPolicy = field(default_factory=RetryPolicy)


class _NullObserver:
    def batch_finished(self, outcome: str, duration_s: float, records: dict[str, int]) -> None:
        pass

    def retry_waiting(self, records: int) -> None:
        pass

    def commit_finished(self, duration_s: float, committed_at: float) -> None:
        pass

    def backlog(self, files: int) -> None:
        pass


class _ScratchFence:
    """An in-memory fence for the warm-up run (no ZooKeeper: nothing it writes is ever visible)."""

    def __init__(self) -> None:
        self._record: dict[str, Any] | None = None
        self._version = 0

    @property
    def epoch(self) -> int:
        return 0

    def read_commit(self) -> tuple[dict[str, Any] | None, int]:
        return self._record, self._version

    def commit(self, record: dict[str, Any], expected_version: int) -> int:
        if expected_version != self._version:
            raise Fenced(f"scratch fence: version {self._version}, expected {expected_version}")
        self._record = dict(record)
        self._version += 1
        return self._version


def _no_fault(_point: str) -> None:
    pass


def _committed_batch(record: dict[str, Any] | None) -> int | None:
    """The batch id a commit record names (``None``: no record, or one another career wrote)."""
    if record is None or record.get("batch_id") is None:
        return None
    return int(record["batch_id"])


def _source_name(source_file: str) -> str:
    """``file:/…/landing/a%20b.jsonl`` → ``a b.jsonl`` (the name inside ``landing/``)."""
    path = unquote(urlparse(source_file).path) if source_file.startswith("file:") else source_file
    return path.rstrip("/").rsplit("/", 1)[-1]


def _mark_consumed(layout: Layout, term: _Term, record: dict[str, Any], faults: Callable[[str], None]) -> None:
    """Mark the files of the committed batch ``record`` consumed; the caller knows this term's checkpoint has
    committed it. Safe for a stale term: marks are written only if no later term has begun copying a checkpoint,
    so every later term's copy is taken after this one had the batch, and never re-runs it."""
    faults("after_checkpoint")
    if newer_term_started(layout, term.epoch):
        term.log.info("marks_skipped", reason="a newer term has started", batch=record.get("batch_id"))
        return
    archived = term.marks.consumed(record.get("files") or [])
    term.marked = _committed_batch(record)
    if archived:
        term.log.debug("archived", batch=term.marked, files=archived)


class _BatchWriter:
    """The ``foreachBatch`` function of one term (runs on Spark's stream thread, one batch at a time).

    For batch ``B`` (the numbered steps are the order of side effects, DESIGN.md "Data flow"):

    1. Refuse to start when the term is handing over or not leading: raise, never return — a returning
       ``foreachBatch`` lets Spark mark the batch done (data loss); a raise makes Spark re-run it later.
    2. Read the commit record. If ``B`` is already committed (a re-run after a failover), finish its publish
       if unfinished, run the batch through the ``noop`` sink (Spark requires the batch's state stores to
       commit), and return: ``skipped``. Otherwise the last committed batch is in this term's checkpoint
       (Spark only starts ``B`` after committing ``B-1``), so its queue files are marked consumed by this group
       now (and archived once every group on the queue has consumed them).
    3. Classify, deduplicate, set late records aside (``_order``), order (through the row function and retry
       store, when there is one; then the transform); write staged Parquet under ``_staging/epoch=<e>/batch=<B>/``
       of each output, with the advanced per-key marks; fsync it all.
    4. Fenced commit of a record naming the staged folders, the files read and the marks, at the version read
       in 2.
    5. Publish: move the staged part files into ``table/``, ``quarantine/``, ``retry/``, ``dead-letter/`` and
       ``order/`` (idempotent renames), and fsync the folders.
    6. Return: Spark then commits the batch to this term's checkpoint.

    Why each step is safe when the term is already stale (a pause of the whole process at any point, then a
    successor elected; ``tests/test_stale_leader.py`` places the pauses):

    - Inauguration: the checkpoint is a copy of the term's own (``adopt_checkpoint``; refused once a newer term
      has one); roll-forward publishes a batch ZooKeeper says is committed, which is right whoever does it;
      staging is removed only for lower epochs, which can never commit again (``remove_dead_staging``).
    - Staging (3) writes under the term's own ``epoch=<e>`` folder: invisible until a commit names it.
    - The commit (4) is the fence: one ZooKeeper transaction that fails once the term's election node is gone.
    - Publishing (5, or 2's roll-forward) moves only what a committed record names; renames are idempotent, so
      a stale term and its successor racing on the same batch produce the same files.
    - Spark's checkpoint commit (6), and any batch the stale query plans, land in the term's own checkpoint
      folder, which no later term reads.
    - Consumption marks (2, and housekeeping) are written only after this term's checkpoint has the batch and
      then only if no newer term has begun copying a checkpoint (``newer_term_started``): every later copy then
      has the batch too, so no later term re-runs it and needs its archived files.
    """

    def __init__(self, term: _Term, layout: Layout, config: SparkCareerConfig, observer: CareerObserver,
                 replica_id: str, hooks: _Hooks, faults: Callable[[str], None] = _no_fault) -> None:
        self._term = term
        self._faults = faults
        self._layout = layout
        self._config = config
        self._observer = observer
        self._replica_id = replica_id
        self._hooks = hooks

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        term = self._term
        started = time.monotonic()
        with term.lock:
            term.in_flight = batch_id
        outcome = "failed"
        counts: dict[str, int] = {}
        try:
            outcome, counts = self._run(df, batch_id)
        except Fenced as exc:
            outcome = "fenced"
            term.error = exc
            term.log.warning("batch_fenced", batch=batch_id, epoch=term.epoch, error=str(exc))
            raise
        except (HandingOverError, NotLeader) as exc:
            outcome = "deferred"
            term.error = exc
            term.log.info("batch_deferred", batch=batch_id, epoch=term.epoch, reason=str(exc))
            raise
        except BaseException as exc:
            term.error = exc
            term.log.error("batch_failed", batch=batch_id, epoch=term.epoch, error=repr(exc)[:2000])
            raise
        finally:
            duration = time.monotonic() - started
            if outcome != "deferred":  # a deferred batch did nothing: Spark re-runs it
                self._observer.batch_finished(outcome, duration, counts)
            with term.lock:
                term.in_flight = None
                if outcome in ("committed", "skipped"):
                    term.last_seen = batch_id
                    term.completed += 1

    def _fault(self, point: str, batch_id: int) -> None:
        if self._config.fail_after == point:
            raise InjectedFaultError(f"injected fault after {point} (batch {batch_id}, epoch {self._term.epoch})")

    def _run(self, df: DataFrame, batch_id: int) -> tuple[str, dict[str, int]]:
        term, layout, config = self._term, self._layout, self._config
        ctx = term.ctx
        # 1. Cooperative stop and leadership, before anything runs (not even Spark's state store).
        if term.stop.is_set():
            raise HandingOverError(f"batch {batch_id} not started: epoch {term.epoch} is handing over")
        if not ctx.still_leading():
            raise NotLeader(f"batch {batch_id} not started: epoch {term.epoch} is not leading now "
                            "(suspended or past safe-until)")
        # 2. Already committed? Otherwise mark what the last committed batch read as consumed by this group,
        #    and archive what every group on the queue has consumed.
        record, version = ctx.fence.read_commit()
        committed = _committed_batch(record)
        if record is not None and int(record.get("epoch") or 0) > term.epoch:
            raise Fenced(f"batch {batch_id}: the commit record has epoch {record.get('epoch')}, above ours "
                         f"({term.epoch}); a newer leader has committed")
        if committed is not None and batch_id <= committed:
            if batch_id == committed and not is_published(layout, record or {}):
                moved = finish_publish(layout, record or {})
                term.log.info("publish_rolled_forward", batch=batch_id, files=moved, by_epoch=term.epoch)
            df.write.format("noop").mode("overwrite").save()  # Spark requires the batch's state stores to commit
            term.log.info("batch_skipped", batch=batch_id, committed=committed, epoch=term.epoch)
            return "skipped", {}
        if committed is not None and record is not None and config.file_source and committed != term.marked:
            _mark_consumed(layout, term, record, self._faults)
        # 3. Classify, deduplicate, hold back late records, order, run the user's code; stage every output.
        phase = time.monotonic()
        df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts, files, spans = self._stats(df)
            read_s = time.monotonic() - phase
            marks = self._marks_at(record)
            staged: dict[str, str] = {}
            fresh, late = records(df), None
            late_keys = marks.late_keys(spans)
            if late_keys:
                fresh, late = split_late(df, late_keys, df.sparkSession, epoch=term.epoch, batch_id=batch_id)
                counts["late"] = late.count()
                counts["written"] -= counts["late"]
            retry: dict[str, Any] = {}
            processed: DataFrame | None = None
            held = read_snapshot(layout.resolve(record["retry"])) if record and record.get("retry") else None
            row_function = self._hooks.row_function or (identity_row if held is not None and held.num_rows else None)
            if row_function is not None:
                processed, rows, retry = self._retry(fresh, held, row_function, counts, staged, batch_id)
                written_max = maxima(rows) if counts["written"] else {}
            else:
                rows = ordered(fresh, partitions=config.shuffle_partitions)
                written_max = {key: high for key, (_low, high) in spans.items()}
            try:
                if counts["written"]:
                    self._stage_table(rows, staged, batch_id)
            finally:
                if processed is not None:
                    processed.unpersist()
            if counts["quarantined"] or late is not None:
                path = layout.staging(layout.quarantine, term.epoch, batch_id)
                bad = quarantine_rows(df, epoch=term.epoch, batch_id=batch_id)
                (bad if late is None else bad.unionByName(late)).coalesce(1) \
                    .write.mode("overwrite").parquet(str(path))
                staged["quarantine"] = layout.relative(path)
        finally:
            df.unpersist()
        new_marks = marks.advanced(written_max)
        order = self._stage_marks(new_marks, marks, record, staged, batch_id)
        for stored in staged.values():
            sync_tree(layout.resolve(stored))  # durable before the commit says the batch exists
        stage_s = time.monotonic() - phase - read_s
        self._fault("staged", batch_id)
        # 4. The fenced commit: the only step that makes the batch count.
        committed_at = time.time()
        new_record: dict[str, Any] = {
            "batch_id": batch_id,
            "epoch": term.epoch,
            "replica_id": self._replica_id,
            "committed_at": committed_at,
            "published_path": f"{layout.relative(layout.table)}/batch-{batch_id:012d}-*.parquet",
            "staged": staged,
            "counts": counts,
            "files": files,
            **order,
            **retry,
        }
        commit_started = time.monotonic()
        ctx.fence.commit(new_record, version)
        commit_s = time.monotonic() - commit_started
        self._observer.commit_finished(commit_s, committed_at)
        with term.lock:
            term.last_committed = batch_id
            term.last_record = new_record
            term.order = (order["order"], new_marks)
        self._faults("after_commit")
        self._fault("committed", batch_id)
        # 5. Publish (a new leader's inaugurate, or a re-run of this batch, finishes it after a crash).
        finish_publish(layout, new_record)
        if retry:
            self._observer.retry_waiting(int(retry["retry_waiting"]))
        term.log.info("batch_committed", batch=batch_id, epoch=term.epoch, written=counts["written"],
                      read_s=round(read_s, 3), stage_s=round(stage_s, 3), commit_s=round(commit_s, 3),
                      duplicate=counts["duplicate"], quarantined=counts["quarantined"], files=len(files),
                      **({"late": counts["late"]} if counts.get("late") else {}),
                      **({"retried": counts["retried"], "dead_lettered": counts["dead_lettered"],
                          "waiting": retry["retry_waiting"]} if retry else {}))
        self._faults("after_publish")
        self._fault("published", batch_id)
        return "committed", counts

    def _marks_at(self, record: dict[str, Any] | None) -> HighWaterMarks:
        """The per-key high-water marks as of the committed ``record`` (cached per term)."""
        term = self._term
        path = (record or {}).get("order")
        if term.order is not None and term.order[0] == path:
            return term.order[1]
        if path is not None:
            marks = HighWaterMarks.read(self._layout.resolve(path))
        elif _committed_batch(record) is not None:
            marks = HighWaterMarks.of_table(self._layout.table)  # committed before marks were kept
        else:
            marks = HighWaterMarks()
        term.order = (path, marks)
        return marks

    def _stage_marks(self, new: HighWaterMarks, old: HighWaterMarks, record: dict[str, Any] | None,
                     staged: dict[str, str], batch_id: int) -> dict[str, str]:
        """Stage the advanced marks when they moved; returns the commit record's ``order`` field."""
        layout = self._layout
        path = (record or {}).get("order")
        if new is not old or path is None:
            folder = layout.staging(layout.order, self._term.epoch, batch_id)
            write_parquet(new.to_arrow(), folder)
            staged["order"] = layout.relative(folder)
            path = layout.relative(layout.order / published_name(batch_id, "part-00000.parquet"))
        return {"order": path}

    def _retry(self, fresh: DataFrame, held: Any, row_function: RowFunction, counts: dict[str, int],
               staged: dict[str, str], batch_id: int) -> tuple[DataFrame, DataFrame, dict[str, Any]]:
        """Run the row function over new and held records; stage the new retry snapshot and the dead letters.

        Updates ``counts`` (``written`` becomes what is written now) and ``staged``; returns the processed
        batch (persisted: the row function must run once per record), the rows to write, and the commit
        record's retry fields.
        """
        term, layout = self._term, self._layout
        now = time.time()
        processed = process_records(  # it orders new and held records together: one shuffle, not two
            fresh, held,
            row_function=row_function, policy=self._hooks.policy, now=now,
            partitions=self._config.shuffle_partitions,
        ).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            rest = processed.where(F.col("status") != WRITTEN).toArrow()
        except BaseException:
            processed.unpersist()
            raise
        snapshot = snapshot_table(rest)
        dead = dead_letter_table(rest, epoch=term.epoch, batch_id=batch_id)
        held_before = held.num_rows if held is not None else 0
        counts["written"] += held_before - snapshot.num_rows - dead.num_rows
        counts["retried"] = sum(1 for at in snapshot.column("last_failed_at").to_pylist() if at == now)
        counts["dead_lettered"] = dead.num_rows
        path = layout.staging(layout.retry, term.epoch, batch_id)
        write_parquet(snapshot, path)
        staged["retry"] = layout.relative(path)
        if dead.num_rows:
            path = layout.staging(layout.dead_letter, term.epoch, batch_id)
            write_parquet(dead, path)
            staged["dead_letter"] = layout.relative(path)
        fields = {
            "retry": layout.relative(layout.retry / published_name(batch_id, "part-00000.parquet")),
            "retry_waiting": snapshot.num_rows,
            "retry_next_due": next_due(snapshot),
        }
        rows = processed.where(F.col("status") == WRITTEN).select("id", "key", "seq", "ts", "payload")
        return processed, rows, fields

    def _stage_table(self, rows: DataFrame, staged: dict[str, str], batch_id: int) -> None:
        """Apply the transform (order re-imposed after it), add the batch columns, write the staged table."""
        term, layout = self._term, self._layout
        if self._hooks.transform is not None:  # it may repartition: each key back into one partition, by seq
            rows = ordered(self._hooks.transform(rows), partitions=self._config.shuffle_partitions)
        path = layout.staging(layout.table, term.epoch, batch_id)
        with_batch(rows, epoch=term.epoch, batch_id=batch_id).write.mode("overwrite").parquet(str(path))
        staged["table"] = layout.relative(path)

    @staticmethod
    def _stats(df: DataFrame) -> tuple[dict[str, int], list[str], dict[str, tuple[int, int]]]:
        """One small action over the cached batch: counts by kind, valid lines read, the files read, and each
        key's lowest and highest ``seq`` (to find late records without a second pass)."""
        rows = df.groupBy("kind", "key").agg(
            F.count(F.lit(1)).alias("n"),
            F.sum("valid_lines").alias("valid"),
            F.collect_list(F.when(F.col("kind") == KIND_FILE, F.col("source_file"))).alias("files"),
            F.min("seq").alias("low"),
            F.max("seq").alias("high"),
        ).collect()
        written = quarantined = valid = 0
        marker_files: list[str] = []
        markers = False
        spans: dict[str, tuple[int, int]] = {}
        for row in rows:
            if row["kind"] == KIND_ROW:
                written += int(row["n"])
                spans[row["key"]] = (int(row["low"]), int(row["high"]))
            elif row["kind"] == KIND_BAD:
                quarantined += int(row["n"])
            elif row["kind"] == KIND_FILE:
                markers = True
                valid += int(row["valid"] or 0)
                marker_files += row["files"]
        if not markers:
            valid = written
        files = sorted({_source_name(f) for f in marker_files if f})
        counts = {"written": written, "duplicate": max(valid - written, 0), "quarantined": quarantined}
        return counts, files, spans


class SparkCareer:
    """The leader's work: a Structured Streaming consumer whose output is made visible by fenced commits.

    Implements ``career.Career``. The query runs on Spark's own thread with a processing-time trigger;
    ``execute`` (the runner's control thread) starts it, watches its health, archives consumed files and
    reports the backlog. Each batch stages Parquet, commits through the fence, then publishes (see
    ``_BatchWriter``); a re-run of a committed batch id is skipped, so the output is exactly once.

    Example::

        career = SparkCareer(SparkCareerConfig(data_root=Path("/srv/tenure")), observer, replica_id="r1")
        career.prepare()                       # warm standby: Spark up and warmed on a scratch sample
        career.inaugurate(ctx)                 # elected: roll forward, clean dead staging
        while leading:
            career.execute() or time.sleep(0.1)
        last_batch = career.hand_over(Outcome.CLEAN)
        career.close()

    Args:
        config: the career's settings.
        observer: receives batch, commit and backlog figures (metrics).
        replica_id: stored in commit records and bound to every log event.
        clock: monotonic clock in seconds (injectable).
        group: the consumer group; names its consumption marks on the queue (``consumed/<group>/``).
        registered_groups: the groups registered on the queue (``config.queue_dir``), read before each
            archiving round; a queue file is archived only once all of them (and this group) have consumed
            it, and not at all while this raises (registry unreachable). Default None: the only consumer.
        faults: a fault-injection hook for tests and drills, called with the name of each dangerous window as
            it is reached (``inaugurate``, ``after_commit``, ``after_publish``, ``after_checkpoint``).
    """

    def __init__(self, config: SparkCareerConfig, observer: CareerObserver, *, replica_id: str,
                 clock: Callable[[], float] = time.monotonic, group: str = "default",
                 registered_groups: Callable[[], Collection[str]] | None = None,
                 faults: Callable[[str], None] | None = None) -> None:
        self._config = config
        self._observer = observer
        self._replica_id = replica_id
        self._clock = clock
        queue_root = Path(config.queue_dir).resolve() if config.queue_dir is not None else None
        self._layout = Layout(Path(config.data_root).resolve(), queue_root)
        self._marks = ConsumptionMarks(self._layout, group, registered_groups)
        self._log = structlog.get_logger("tenure.career.spark").bind(replica_id=replica_id)
        self._session: SparkSession | None = None
        self._owned = False
        self._prepared = False
        self._term: _Term | None = None
        self._next_backlog = 0.0
        self._next_sweep = 0.0
        self._archive_lock = threading.Lock()
        self._ticked_for: float | None = None
        self._faults = faults or _no_fault
        self._hooks = _Hooks(
            transform=load_hook("transform", config.transform) if config.transform else None,
            row_function=load_hook("row_function", config.row_function) if config.row_function else None,
            policy=config.retry_policy,
        )

    # -- lifecycle -------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Check the transform; warm standby: start Spark and run the real pipeline once on a scratch sample.

        Cold standby does nothing here unless a transform is configured: then Spark starts for the check and
        stops again.

        Raises:
            HookError: the transform fails on an empty batch or breaks the output schema.
        """
        if self._prepared:
            return
        if self._hooks.transform is not None and self._config.transform is not None:
            check_transform(self._ensure_session(), self._config.transform, self._hooks.transform)
        if self._config.standby == "warm":
            started = self._clock()
            self._ensure_session()
            self._warm_up()
            self._log.info("warmed_up", seconds=round(self._clock() - started, 3))
        elif self._owned:
            self._stop_session()
        self._prepared = True

    def ready(self) -> bool:
        """True once ``prepare`` has finished."""
        return self._prepared

    def inaugurate(self, ctx: CareerContext) -> None:
        """Begin a term: take a checkpoint of its own, roll a committed-but-unpublished batch forward, delete
        staging of dead epochs. Each step is safe even if this term is already stale (see ``_storage``).

        The query starts on the first ``execute``.

        Raises:
            SparkCareerError: a term is still open, or the checkpoint never saw the committed batch.
            NotLeader: leadership was lost before the term could start.
            Fenced: a newer term has committed or started.
        """
        if self._term is not None:
            raise SparkCareerError(f"inaugurate(epoch {ctx.epoch}) while epoch {self._term.epoch} is still open; "
                                   "call hand_over first")
        started = self._clock()
        self._ensure_session()
        log = self._log.bind(epoch=ctx.epoch)
        layout = self._layout
        for folder in (layout.landing, layout.table, layout.quarantine, layout.archive):
            folder.mkdir(parents=True, exist_ok=True)
        record, _version = ctx.fence.read_commit()
        self._faults("inaugurate")
        if record is not None and int(record.get("epoch") or 0) > ctx.epoch:
            raise Fenced(f"inaugurate(epoch {ctx.epoch}): the commit record has epoch {record.get('epoch')}; "
                         "a newer leader has committed")
        if not ctx.still_leading():
            raise NotLeader(f"inaugurate(epoch {ctx.epoch}): leadership lost before the term started")
        try:
            checkpoint, copied_from = adopt_checkpoint(layout, ctx.epoch)
        except StaleTermError as exc:
            raise Fenced(str(exc)) from exc
        term = _Term(ctx=ctx, log=log, marks=self._marks, checkpoint=checkpoint)
        rolled = 0
        committed = _committed_batch(record)
        if record is not None and committed is not None:
            # Batch ids are the checkpoint's: a checkpoint that never planned the committed batch (deleted,
            # replaced, another data root) would restart at batch 0 and every batch up to the committed id
            # would be skipped as a re-run — silent loss. Refuse instead.
            if not (checkpoint / "offsets" / str(committed)).exists():
                raise SparkCareerError(
                    f"ZooKeeper says batch {committed} is committed (epoch {record.get('epoch')}), but the "
                    f"checkpoint {layout.checkpoint} has no such batch: it was deleted or belongs elsewhere. "
                    "Restore the checkpoint, or start a new consumer group with a new data root")
            term.last_committed = committed
            term.last_record = record
            if not is_published(layout, record):
                rolled = finish_publish(layout, record)
        removed = remove_dead_staging(layout, ctx.epoch)
        self._term = term
        archived = self._archive_committed(term)
        log.info("inaugurated", epoch=ctx.epoch, batch=term.last_committed, rolled_forward=rolled,
                 removed_staging=len(removed), archived=archived, clean=ctx.after_clean_handover,
                 checkpoint_from=copied_from, seconds=round(self._clock() - started, 3))

    def execute(self) -> bool:
        """Start the query on the first call, then check its health; True if a batch finished since last call.

        Raises:
            Fenced: a batch's commit was fenced (a newer leader exists): hand over.
            SparkCareerError: the query died (the batch error is chained); an injected fault is raised as is.
        """
        term = self._term
        if term is None:
            raise SparkCareerError("execute() before inaugurate(): there is no term to work for")
        query = term.query
        if query is None:
            self._start_query(term)
            return False
        if not query.isActive and not self._recover_query(term):
            return False
        self._housekeeping(term)
        with term.lock:
            changed = term.completed != term.reported
            term.reported = term.completed
        return changed

    def hand_over(self, outcome: Outcome) -> int | None:
        """End the term; returns the last committed batch id.

        CLEAN: no new batch starts; the batch in flight finishes its commit and publish and Spark commits it
        to the checkpoint, bounded by ``handover_timeout_s``; then the query stops. REVOKED/FAILED: the query
        stops at once (a batch in flight is abandoned; its commit would be fenced anyway).
        """
        term = self._term
        if term is None:
            return None
        started = self._clock()
        term.stop.set()
        query = term.query
        timed_out = False
        if query is not None and outcome is Outcome.CLEAN:
            timed_out = not self._wait_for_quiet(term, started + self._config.handover_timeout_s)
        if query is not None:
            try:
                query.stop()
            except Exception as exc:  # stopping a query that died: nothing more to stop
                term.log.debug("query_stop_error", error=repr(exc)[:500])
        self._archive_committed(term)  # only if Spark's checkpoint has the batch: then no re-run needs its files
        self._term = None
        term.log.info("handed_over", outcome=outcome.value, batch=term.last_committed, timed_out=timed_out,
                      seconds=round(self._clock() - started, 3))
        if self._config.standby == "cold" and self._owned:
            self._stop_session()
        return term.last_committed

    def close(self) -> None:
        """Stop a running query and, if this career started Spark, Spark itself."""
        if self._term is not None:
            self.hand_over(Outcome.FAILED)
        if self._owned:
            self._stop_session()
        self._session = None

    # -- internals -------------------------------------------------------------------------------------------

    def _ensure_session(self) -> SparkSession:
        if self._session is None:
            conf = {
                "spark.sql.streaming.stopTimeout": str(int(self._config.handover_timeout_s * 1000)),
                **self._config.spark_conf,
            }
            self._session, self._owned = build_session(
                self._config.spark_master, app_name=self._config.app_name,
                shuffle_partitions=self._config.shuffle_partitions, extra_conf=conf)
        else:
            use_driver_python(self._session, self._config.spark_master)
        return self._session

    def _stop_session(self) -> None:
        if self._session is not None:
            self._session.sparkContext.stop()
            self._session = None
            self._owned = False

    def _stream(self, session: SparkSession, layout: Layout, *, sample: bool) -> DataFrame:
        config = self._config
        if sample or config.file_source:
            options: dict[str, str] = {"pathGlobFilter": f"*.{{jsonl,{TICK_SUFFIX[1:]}}}"}
            if config.max_bytes_per_trigger is not None:
                options["maxBytesPerTrigger"] = str(config.max_bytes_per_trigger)
            elif config.max_files_per_trigger is not None:
                options["maxFilesPerTrigger"] = str(config.max_files_per_trigger)
            if not sample:
                options.update(config.source_options)
            path = str(layout.landing) if sample or config.source_path is None else config.source_path
            return classified_stream(session, source_format=BINARY_FILE, path=path, options=options,
                                     schema=None, max_line_bytes=config.max_line_bytes,
                                     dedup_window=config.dedup_window, source_file_expr="", line_expr="")
        return classified_stream(session, source_format=config.source_format, path=config.source_path,
                                 options=config.source_options, schema=config.source_schema,
                                 max_line_bytes=config.max_line_bytes, dedup_window=config.dedup_window,
                                 source_file_expr=config.source_file_expr, line_expr=config.line_expr)

    def _start_query(self, term: _Term) -> None:
        started = self._clock()
        session = self._ensure_session()
        writer = _BatchWriter(term, self._layout, self._config, self._observer, self._replica_id, self._hooks,
                              self._faults)
        name = re.sub(r"[^A-Za-z0-9_]", "_", f"tenure_{self._replica_id}_{term.epoch}_{term.restarts}")
        term.error = None
        term.query = (
            self._stream(session, self._layout, sample=False)
            .writeStream.queryName(name)
            .foreachBatch(writer)
            .option("checkpointLocation", str(term.checkpoint))
            .trigger(processingTime=f"{int(self._config.trigger_interval_s * 1000)} milliseconds")
            .start()
        )
        term.log.info("query_started", query=name, seconds=round(self._clock() - started, 3))

    def _recover_query(self, term: _Term) -> bool:
        """The query has stopped on its own. Restart it after a leadership pause; otherwise raise."""
        error = term.error
        if isinstance(error, NotLeader) and not term.stop.is_set():
            if not term.ctx.still_leading():
                return False  # still suspended: the runner pauses us or revokes the term
            term.restarts += 1
            term.log.info("query_restarting", reason="leadership resumed", restarts=term.restarts)
            self._start_query(term)
            return False
        if isinstance(error, Fenced | InjectedFaultError):
            raise error
        exc = term.query.exception() if term.query is not None else None
        if isinstance(error, ElectionError):
            raise SparkCareerError(f"epoch {term.epoch}: a batch could not reach ZooKeeper: {error}") from error
        detail = str(error) if error is not None else str(exc)
        raise SparkCareerError(f"epoch {term.epoch}: the streaming query stopped: {detail[:2000]}") from error

    def _wait_for_quiet(self, term: _Term, deadline: float) -> bool:
        """Wait until no batch is in flight and the last one is in Spark's commit log (or the query ended)."""
        query = term.query
        while self._clock() < deadline:
            with term.lock:
                in_flight, last = term.in_flight, term.last_seen
            if in_flight is None and (not query.isActive or last is None or spark_committed(term.checkpoint, last)):
                return True
            time.sleep(_POLL_S)
        return False

    def _archive_committed(self, term: _Term) -> int:
        """Mark the last committed batch's files consumed once Spark's checkpoint has committed it, then
        archive every queue file all groups have consumed (other groups' leaders may have caught up)."""
        if not self._config.file_source:
            return 0
        record = term.last_record
        committed = _committed_batch(record)
        if (record is not None and committed is not None and committed != term.marked
                and spark_committed(term.checkpoint, committed)):
            _mark_consumed(self._layout, term, record, self._faults)
        return term.marks.archive_ready()

    def _housekeeping(self, term: _Term) -> None:
        now = self._clock()
        if now < self._next_backlog:
            return
        self._next_backlog = now + _BACKLOG_EVERY_S
        layout = self._layout
        if self._config.file_source:
            self._archive_committed(term)
            empty = empty_landing_files(layout, _EMPTY_FILE_MIN_AGE_S)
            if empty:
                with self._archive_lock:
                    archive_files(layout, empty)
            if now >= self._next_sweep:
                self._next_sweep = now + _SWEEP_EVERY_S
                swept = sweep_archive(layout, self._config.archive_retention_s)
                if swept:
                    term.log.info("archive_swept", files=swept)
                stale = term.marks.sweep()
                if stale:
                    term.log.info("stale_marks_swept", marks=stale)
            # Files this group consumed but a slower group still holds in landing/ are not this group's backlog.
            pending = set((term.last_record or {}).get("files") or []) | term.marks.marked()
            self._observer.backlog(len([n for n in landing_files(layout) if n not in pending]))
            self._wake_for_retries(term)

    def _wake_for_retries(self, term: _Term) -> None:
        """Drop a tick file into ``landing/`` once held records fall due: a file source runs no batch without
        a new file, and a quiet queue must not keep a due retry waiting."""
        due = (term.last_record or {}).get("retry_next_due")
        if due is None or due > time.time() or due == self._ticked_for:
            return
        self._ticked_for = due
        name = f"tenure-tick-{term.epoch}-{time.time_ns()}{TICK_SUFFIX}"
        partial = self._layout.landing / f".{name}"
        partial.write_bytes(b"tick\n")
        partial.replace(self._layout.landing / name)
        term.log.debug("retry_tick", due=due, file=name)

    def _warm_up(self) -> None:
        """Run the real pipeline — parse, dedup, order, Parquet, commit — once over a scratch sample."""
        session = self._ensure_session()
        scratch = Path(tempfile.mkdtemp(prefix="tenure-warmup-"))
        try:
            layout = Layout(scratch)
            layout.landing.mkdir(parents=True)
            # Batches of a realistic size, not a token one: the JVM compiles the hot paths of a 5 000-record
            # batch only when it has run some, and a new leader's first batch is otherwise twice as slow.
            for f in range(_WARMUP_FILES):
                lines = [f'{{"id":"w{f}-{i}","key":"k{i % 100}","seq":{i},"ts":{i},"payload":{{"n":{i}}}}}'
                         for i in range(_WARMUP_RECORDS_PER_FILE)]
                if f == 0:
                    lines += ['{"id":"w0-1","key":"k1","seq":1,"ts":1,"payload":null}', "not json", ""]
                sample = layout.landing / f".sample-{f:02d}.jsonl"
                sample.write_text("\n".join(lines) + "\n")
                os.utime(sample, (time.time() - 100 + f, time.time() - 100 + f))
                sample.rename(layout.landing / f"sample-{f:02d}.jsonl")
            fence = _ScratchFence()
            ctx = CareerContext(epoch=0, fence=fence, still_leading=lambda: True, previous_handover=None)
            term = _Term(ctx=ctx, log=self._log.bind(warmup=True), marks=ConsumptionMarks(layout, "warmup"),
                         checkpoint=layout.checkpoint)
            config = replace(self._config, fail_after=None)
            # The user's transform runs on the sample; their row function does not (it may have effects
            # outside), but the retry path does, through the identity function.
            hooks = replace(self._hooks, row_function=identity_row if self._hooks.row_function else None)
            writer = _BatchWriter(term, layout, config, _NullObserver(), self._replica_id, hooks)
            query = (
                self._stream(session, layout, sample=True)
                .writeStream.foreachBatch(writer)
                .option("checkpointLocation", str(layout.checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            finished = query.awaitTermination(int(self._config.warmup_timeout_s))
            if not finished:
                query.stop()
            if term.error is not None or query.exception() is not None:
                self._log.warning("warmup_failed", error=repr(term.error or query.exception())[:1000])
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
