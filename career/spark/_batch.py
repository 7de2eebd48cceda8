"""The fenced batch writer: one term's ``foreachBatch``, which makes a batch visible only by fenced commit.

The numbered steps, and why each is safe for a stale term, are in :class:`BatchWriter`'s docstring.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)

from tenure.career._durable import sync_tree
from tenure.career._protocol import CareerObserver
from tenure.career.output import check_batch_schema
from tenure.career.queue import printable_name
from tenure.career.spark._config import SparkCareerConfig
from tenure.career.spark._errors import HandingOverError, SparkCareerError
from tenure.career.spark._hooks import Hooks
from tenure.career.spark._intake import batch_files, batch_offset, file_name
from tenure.career.spark._layout import Layout, published_name
from tenure.career.spark._order import HighWaterMarks, arrow_maxima, maxima, split_late
from tenure.career.spark._pipeline import (
    CHANGED,
    KIND_BAD,
    KIND_FILE,
    KIND_ROW,
    ordered,
    output_partitions,
    quarantine_rows,
    records,
    with_batch,
)
from tenure.career.spark._publish import finish_publish, is_published, staged_parts
from tenure.career.spark._record import check_record, check_size
from tenure.career.spark._retry import (
    WRITTEN,
    RowFunction,
    dead_letter_table,
    identity_row,
    next_due,
    process_records,
    read_snapshot,
    repeat_ids,
    snapshot_table,
    timed_out_now,
    unique_held,
    write_parquet,
)
from tenure.career.spark._set_aside import stage_set_aside
from tenure.career.spark._term import Term, committed_batch, mark_consumed
from tenure.errors import Fenced, NotLeader

__all__ = ["BATCH_COMMITTED", "BATCH_FAILED", "BATCH_FENCED", "ROW_FUNCTION_TIMED_OUT", "BatchWriter"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
BATCH_COMMITTED: Final = "batch_committed"
BATCH_FENCED: Final = "batch_fenced"
BATCH_FAILED: Final = "batch_failed"
ROW_FUNCTION_TIMED_OUT: Final = "row_function_timed_out"


#: Fields of a commit record that a batch which writes no table carries over from the one before it.
_CARRIED = ("order", "retry", "retry_waiting", "retry_next_due")
_SHORT_ERROR = 300
_LOGGED_ERROR = 1 << 20  # the whole error, bar a runaway one


_CACHED = StorageLevel.MEMORY_AND_DISK_DESER
"""How a batch is cached while its steps read it: in memory as Spark's columnar batches, spilled to disk when
memory runs short (DataFrame.persist's default). PySpark's ``MEMORY_AND_DISK`` would serialize every cached
batch again, CPU spent on each read of the cache."""


class BatchWriter:
    """The ``foreachBatch`` function of one term (runs on Spark's stream thread, one batch at a time).

    For batch ``B`` (the numbered steps are the order of side effects, ARCHITECTURE.md "One record's path"):

    1. Refuse to start when the term is handing over or not leading: raise, never return — a returning
       ``foreachBatch`` lets Spark mark the batch done (data loss); a raise makes Spark re-run it later.
    2. Make durable what Spark wrote to the term's checkpoint (``B-1``'s commit and state, ``B``'s offsets:
       ``CheckpointSync``), then read the commit record. If ``B`` is already committed (a re-run after a
       failover), finish its publish if unfinished, run the batch through the ``noop`` sink (Spark requires the
       batch's state stores to commit), and return: ``skipped``. Otherwise the last committed batch is in this
       term's checkpoint (Spark only starts ``B`` after committing ``B-1``), so its queue files are marked
       consumed by this group now (and archived once every group on the queue has consumed them). If ``B`` is
       the poison batch this term was told to set aside (``CareerContext.set_aside``), steps 3–5 stage, commit
       and publish its queue files and a manifest under ``set-aside/`` instead of running it (``_set_aside``).
    3. Classify, deduplicate, set late records aside (``_order``), order (through the row function and retry
       store, when there is one; then the transform); write staged Parquet under ``_staging/epoch=<e>/batch=<B>/``
       of each output, with the advanced per-key marks; fsync it all.
    4. Fenced commit of a record naming the staged folders, the part files each Delta output gains (``parts``),
       the files read and the marks, at the version read in 2.
    5. Publish: hard-link the staged part files into ``table/``, ``quarantine/``, ``retry/``, ``dead-letter/``
       and ``order/`` (idempotent), and fsync the folders; then add the batch's files in ``table/``,
       ``quarantine/`` and ``dead-letter/`` to each one's Delta table as one version that carries the batch as
       Delta's transaction version (``tenure.career.output.publish_batch``: a part file gone by then is refused),
       fsync the log, and drop the staging (until then a part file deleted from an output is linked again).
    6. Return: Spark then commits the batch to this term's checkpoint.

    The fault hook is called at ``after_checkpoint`` (2, before marking), ``after_stage`` (end of 3),
    ``after_commit`` (after 4) and ``after_publish`` (after 5); the fence calls it at ``before_transaction``.

    Why each step is safe when the term is already stale (a pause of the whole process at any point, then a
    successor elected; ``tests/test_stale_leader.py`` places the pauses; ARCHITECTURE.md "Where each guarantee
    is enforced"):

    - Inauguration: the checkpoint is a copy of the term's own (``adopt_checkpoint``; refused once a newer term
      has one); roll-forward publishes a batch ZooKeeper says is committed, which is right whoever does it;
      staging is removed only for lower epochs, which can never commit again (``remove_dead_staging``).
    - Staging (3) writes under the term's own ``epoch=<e>`` folder: invisible until a commit names it (a
      set-aside batch's links and manifest too).
    - The commit (4) is the fence: one ZooKeeper transaction that fails once the term's election node is gone.
    - Publishing (5, or 2's roll-forward) links only what a committed record names (a record whose paths are not
      the layout's own for its epoch and batch is refused first: ``_record``); links are idempotent, so a stale
      term and its successor racing on the same batch produce the same files.
    - The Delta commit (end of 5) adds only the files of a batch ZooKeeper says is committed, so a version is
      never a batch that did not commit. It is skipped when the table's transaction version already covers the
      batch (a successor rolled it forward and went on); a stale term that checked before its successor
      committed loses on Delta's transaction conflict (``ConcurrentTransaction`` on the same application id),
      re-reads and stops. So each committed batch becomes one version, once, and versions follow batch order:
      a successor rolls the last committed batch forward, Delta version included, before its first batch.
    - Spark's checkpoint commit (6), and any batch the stale query plans, land in the term's own checkpoint
      folder, which no later term reads.
    - Consumption marks (2, and housekeeping) are written only after this term's checkpoint has the batch and
      then only if no newer term has begun copying a checkpoint (``newer_term_started``): every later copy then
      has the batch too, so no later term re-runs it and needs its archived files.
    """

    def __init__(self, term: Term, layout: Layout, config: SparkCareerConfig, observer: CareerObserver,
                 replica_id: str, hooks: Hooks, faults: Callable[[str], None]) -> None:
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
        self._observer.batch_started(batch_id)
        outcome = "failed"
        counts: dict[str, int] = {}
        progressed = True
        try:
            outcome, counts, progressed = self._run(df, batch_id)
        except Fenced as exc:
            outcome = "fenced"
            term.error = exc
            term.log.warning(BATCH_FENCED, batch=batch_id, epoch=term.epoch, error=str(exc))
            raise
        except (HandingOverError, NotLeader) as exc:
            outcome = "deferred"
            term.error = exc
            term.log.info("batch_deferred", batch=batch_id, epoch=term.epoch, reason=str(exc))
            raise
        except BaseException as exc:
            term.error, term.failed = exc, batch_id
            term.log.error(BATCH_FAILED, batch=batch_id, epoch=term.epoch,
                           error=f"{type(exc).__name__}: {exc}"[:_LOGGED_ERROR])  # repr() of a PythonException is empty
            # Spark gets a short error: its interruption check runs a backtracking regex over the message and
            # overflows the JVM's stack on a long py4j trace (StreamExecution.PROXY_ERROR), losing the error.
            # The whole error is in the log line above and in ``term.error``.
            raise SparkCareerError(f"batch {batch_id} failed: {type(exc).__name__}: "
                                   f"{str(exc)[:_SHORT_ERROR]} (the replica's log has the whole error)") from None
        finally:
            duration = time.monotonic() - started
            if outcome != "deferred":  # a deferred batch did nothing: Spark re-runs it
                self._observer.batch_finished(outcome, duration, counts, progressed=progressed)
            with term.lock:
                term.in_flight = None
                if outcome in ("committed", "skipped", "set_aside"):
                    term.last_seen = batch_id
                    term.completed += 1

    def _fault(self, point: str) -> None:
        """Call the fault hook at ``point``; what it raises is kept so ``execute`` re-raises it as is."""
        try:
            self._faults(point)
        except BaseException as exc:
            self._term.injected = exc
            raise

    def _run(self, df: DataFrame, batch_id: int) -> tuple[str, dict[str, int], bool]:
        term, layout, config = self._term, self._layout, self._config
        ctx = term.ctx
        started = time.monotonic()
        # 1. Cooperative stop and leadership, before anything runs (not even Spark's state store).
        if term.stop.is_set():
            raise HandingOverError(f"batch {batch_id} not started: epoch {term.epoch} is handing over")
        if not ctx.still_leading():
            raise NotLeader(f"batch {batch_id} not started: epoch {term.epoch} is not leading now "
                            "(suspended or past safe-until)")
        # 2. Make durable what Spark wrote (the last batch's commit, this one's offsets): marking and committing
        #    below assume the checkpoint has them. Already committed? Otherwise mark what the last committed batch
        #    read as consumed by this group, and archive what every group on the queue has consumed.
        synced = time.monotonic()
        term.durable.sync()
        durable_s = time.monotonic() - synced
        record, version = ctx.fence.read_commit()
        check_record(layout, record)  # before anything acts on what it names
        committed = committed_batch(record)
        if record is not None and int(record.get("epoch") or 0) > term.epoch:
            raise Fenced(f"batch {batch_id}: the commit record has epoch {record.get('epoch')}, above ours "
                         f"({term.epoch}); a newer leader has committed")
        if committed is not None and batch_id <= committed:
            if batch_id == committed and not is_published(layout, record or {}):
                moved = finish_publish(layout, record or {}).moved
                term.log.info("publish_rolled_forward", batch=batch_id, files=moved, by_epoch=term.epoch)
            df.write.format("noop").mode("overwrite").save()  # Spark requires the batch's state stores to commit
            term.log.info("batch_skipped", batch=batch_id, committed=committed, epoch=term.epoch)
            return "skipped", {}, True
        if committed is not None and record is not None and config.file_source and committed != term.marked:
            mark_consumed(layout, term, record, self._fault)
        if config.file_source and (reused := batch_offset(term.checkpoint, batch_id).get("reused")):
            term.log.warning("queue_name_reused", batch=batch_id, files=[printable_name(n) for n in reused],
                             effect="a file under a name this group consumed before is read as a new file")
        if ctx.set_aside is not None and ctx.set_aside.batch_id == batch_id:
            return self._set_aside(df, batch_id, record, version)
        # 3. Classify, deduplicate, hold back late records, order, run the user's code; stage every output.
        phase = time.monotonic()
        df.persist(_CACHED)
        try:
            counts, files, spans, outcomes = self._stats(df)
            read_s = time.monotonic() - phase
            self._log_outcomes(batch_id, outcomes)
            marks = self._marks_at(record)
            staged: dict[str, str] = {}
            fresh, late = records(df), None
            late_keys = marks.late_keys(spans)
            if late_keys:
                fresh, late = split_late(df, late_keys, df.sparkSession, epoch=term.epoch, batch_id=batch_id)
                counts["late"] = late.count()
                counts["written"] -= counts["late"]
            partitions = output_partitions(counts["written"], config.shuffle_partitions)
            retry: dict[str, Any] = {}
            dead_max: dict[str, int] = {}
            row_state: bool | None = None
            processed: DataFrame | None = None
            held = read_snapshot(layout.resolve(record["retry"])) if record and record.get("retry") else None
            row_function = self._hooks.row_function or (identity_row if held is not None and held.num_rows else None)
            if row_function is not None:
                processed, rows, retry, dead_max, row_state = self._retry(fresh, held, row_function, counts,
                                                                          staged, batch_id)
                written_max = maxima(rows) if counts["written"] else {}
            else:
                rows = ordered(fresh, partitions=partitions)
                written_max = {key: high for key, (_low, high) in spans.items()}
            try:
                if counts["written"]:
                    self._stage_table(rows, staged, batch_id, partitions)
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
        # A dead-lettered record moves its key past it too: a repeat of it is late, not a second chance.
        new_marks = marks.advanced(written_max).advanced(dead_max)
        order = self._stage_marks(new_marks, marks, record, staged, batch_id)
        for stored in staged.values():
            sync_tree(layout.resolve(stored))  # durable before the commit says the batch exists
        stage_s = time.monotonic() - phase - read_s
        self._fault("after_stage")
        # 4. The fenced commit: the only step that makes the batch count.
        committed_at = time.time()
        new_record: dict[str, Any] = {
            "batch_id": batch_id,
            "epoch": term.epoch,
            "replica_id": self._replica_id,
            "committed_at": committed_at,
            "clock": term.clock.now(),
            "published_path": f"{layout.relative(layout.table)}/batch-{batch_id:012d}-*.parquet",
            "staged": staged,
            "parts": staged_parts(layout, staged, batch_id),
            "counts": counts,
            "files": files,
            **order,
            **retry,
        }
        check_size(new_record)
        commit_started = time.monotonic()
        ctx.fence.commit(new_record, version)
        commit_s = time.monotonic() - commit_started
        self._observer.commit_finished(commit_s, committed_at)
        with term.lock:
            term.last_committed = batch_id
            term.last_record = new_record
            term.order = (order["order"], new_marks)
        self._fault("after_commit")
        # 5. Publish (a new leader's inaugurate, or a re-run of this batch, finishes it after a crash).
        publish_started = time.monotonic()
        published = finish_publish(layout, new_record, self._fault)
        publish_s = time.monotonic() - publish_started - published.delta_s
        if retry:
            self._observer.retry_waiting(int(retry["retry_waiting"]))
        term.log.info(BATCH_COMMITTED, batch=batch_id, epoch=term.epoch, written=counts["written"],
                      durable_s=round(durable_s, 4), read_s=round(read_s, 3), stage_s=round(stage_s, 3),
                      commit_s=round(commit_s, 3), publish_s=round(publish_s, 3),
                      delta_s=round(published.delta_s, 4),
                      batch_s=round(time.monotonic() - started, 3),
                      duplicate=counts["duplicate"], quarantined=counts["quarantined"], files=len(files),
                      **({"late": counts["late"]} if counts.get("late") else {}),
                      **({"retried": counts["retried"], "dead_lettered": counts["dead_lettered"],
                          "waiting": retry["retry_waiting"]} if retry else {}))
        self._fault("after_publish")
        return "committed", counts, self._row_function_moved(row_state)

    def _row_function_moved(self, stuck: bool | None) -> bool:
        """Whether the batch counts as progress: not while the row function is stuck, that is from a batch whose
        every call ran past ``row_timeout_s`` (nothing written) until one whose call returns; batches in between
        that call it not at all (their records wait behind held ones) are stuck as well."""
        term = self._term
        if stuck is True and term.row_stuck_since is None:
            term.row_stuck_since = time.monotonic()
        elif stuck is False:
            term.row_stuck_since = None
        return term.row_stuck_since is None

    def _set_aside(self, df: DataFrame, batch_id: int, record: dict[str, Any] | None,
                   version: int) -> tuple[str, dict[str, int], bool]:
        """Commit batch ``batch_id`` without running the user's code: its queue files and a manifest go to
        ``set-aside/``; the per-key marks and the retry store carry over unchanged (steps 3–5 otherwise as a batch).

        The batch still runs through the ``noop`` sink first (Spark requires its state stores to commit): if even
        that fails, the classification itself is what fails, and the batch cannot be set aside.
        """
        term, layout = self._term, self._layout
        failed = term.ctx.set_aside
        assert failed is not None
        files = batch_files(term.checkpoint, batch_id)
        df.write.format("noop").mode("overwrite").save()
        staging = layout.staging(layout.set_aside, term.epoch, batch_id)
        lines = stage_set_aside(layout, staging, batch_id=batch_id, epoch=term.epoch, files=files, failed=failed)
        sync_tree(staging)
        self._fault("after_stage")
        counts = {"set_aside": lines}
        new_record: dict[str, Any] = {
            **{name: (record or {})[name] for name in _CARRIED if name in (record or {})},
            "batch_id": batch_id,
            "epoch": term.epoch,
            "replica_id": self._replica_id,
            "committed_at": time.time(),
            "clock": term.clock.now(),
            "staged": {"set_aside": layout.relative(staging)},
            "counts": counts,
            "files": files,
            "set_aside": failed.to_json(),
        }
        check_size(new_record)
        term.ctx.fence.commit(new_record, version)
        with term.lock:
            term.last_committed = batch_id
            term.last_record = new_record
        self._fault("after_commit")
        finish_publish(layout, new_record, self._fault)
        term.log.warning("batch_set_aside", batch=batch_id, epoch=term.epoch, files=len(files), records=lines,
                         attempts=failed.attempts, error=failed.error)
        self._fault("after_publish")
        return "set_aside", counts, True

    def _marks_at(self, record: dict[str, Any] | None) -> HighWaterMarks:
        """The per-key high-water marks as of the committed ``record`` (cached per term)."""
        term = self._term
        path = (record or {}).get("order")
        if term.order is not None and term.order[0] == path:
            return term.order[1]
        if path is not None:
            marks = HighWaterMarks.read(self._layout.resolve(path))
        elif committed_batch(record) is not None:
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
               staged: dict[str, str], batch_id: int
               ) -> tuple[DataFrame, DataFrame, dict[str, Any], dict[str, int], bool | None]:
        """Run the row function over new and held records; stage the new retry snapshot and the dead letters.

        Updates ``counts`` (``written`` becomes what is written now; a new record whose id is held is a repeat
        the dedup window has forgotten, dropped and counted as ``duplicate``, as is a second copy of a held id in
        a store committed by older code) and ``staged``; returns the processed batch (persisted: the row
        function must run once per record), the rows to write, the commit record's retry fields, the highest
        dead-lettered ``seq`` per key, and whether the row function is stuck: True when it was called and every
        call ran past ``row_timeout_s`` (nothing written), False when a call returned, None when none was made.
        """
        term, layout = self._term, self._layout
        now = term.clock.now()
        stale: list[str] = []
        if held is not None:
            held, stale = unique_held(held)
            if stale:
                term.log.warning("held_copies_dropped", batch=batch_id, epoch=term.epoch, records=len(stale),
                                 ids=sorted(stale)[:10])
        processed = process_records(  # it orders new and held records together: one shuffle, not two
            fresh, held,
            row_function=row_function, policy=self._hooks.policy, now=now,
            partitions=self._config.shuffle_partitions,
        ).persist(_CACHED)
        try:
            rest = processed.where(F.col("status") != WRITTEN).toArrow()
        except BaseException:
            processed.unpersist()
            raise
        snapshot = snapshot_table(rest)
        dead = dead_letter_table(rest, epoch=term.epoch, batch_id=batch_id)
        repeats = repeat_ids(rest)
        if repeats:
            term.log.info("held_repeats_dropped", batch=batch_id, epoch=term.epoch, records=len(repeats),
                          ids=sorted(repeats)[:10])
        held_before = held.num_rows if held is not None else 0
        counts["duplicate"] += len(repeats) + len(stale)
        counts["written"] += held_before - snapshot.num_rows - dead.num_rows - len(repeats)
        counts["retried"] = sum(1 for at in snapshot.column("last_failed_at").to_pylist() if at == now)
        counts["dead_lettered"] = dead.num_rows
        failed_now, timed_out = timed_out_now(rest, now)
        called = failed_now > 0 or counts["written"] > 0
        stuck = (timed_out == failed_now and counts["written"] == 0) if called else None
        if timed_out:
            counts["timed_out"] = timed_out
            term.log.warning(ROW_FUNCTION_TIMED_OUT, batch=batch_id, epoch=term.epoch, records=timed_out,
                             failed=failed_now, written=counts["written"])
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
        return processed, rows, fields, arrow_maxima(dead), stuck

    def _stage_table(self, rows: DataFrame, staged: dict[str, str], batch_id: int, partitions: int) -> None:
        """Apply the transform (order re-imposed after it), add the batch columns, write the staged table."""
        term, layout = self._term, self._layout
        if self._hooks.transform is not None:  # it may repartition: each key back into one partition, by seq
            rows = ordered(self._hooks.transform(rows), partitions=partitions)
        path = layout.staging(layout.table, term.epoch, batch_id)
        with_batch(rows, epoch=term.epoch, batch_id=batch_id).write.mode("overwrite").parquet(str(path))
        staged["table"] = layout.relative(path)
        # A column whose type the transform changed could never join the Delta table: fail before the commit.
        check_batch_schema(layout.table, path.glob("part-*.parquet"))

    def _log_outcomes(self, batch_id: int, outcomes: dict[str, str]) -> None:
        """Log the entries of the batch that were not read as admitted: refused (each quarantined at line 0, with
        its reason) or changed since their admission (read again as new by a later batch)."""
        term = self._term
        refused = {printable_name(name): why for name, why in sorted(outcomes.items()) if why != CHANGED}
        changed = [printable_name(name) for name, why in sorted(outcomes.items()) if why == CHANGED]
        if refused:
            term.log.warning("queue_entries_refused", batch=batch_id, entries=refused,
                             effect="each is quarantined on its own (line 0, its reason) and leaves landing/ with "
                                    "the batch's files; the batch goes on")
        if changed:
            term.log.warning("queue_files_changed", batch=batch_id, files=changed,
                             effect="changed after this batch admitted them: not read now; read again as new "
                                    "files by a later batch")

    @staticmethod
    def _stats(df: DataFrame) -> tuple[dict[str, int], list[str], dict[str, tuple[int, int]], dict[str, str]]:
        """One small action over the cached batch: counts by kind, valid lines read, the files read, each key's
        lowest and highest ``seq`` (to find late records without a second pass), and the entries not read as
        admitted (name → a refusal's reason, or ``changed``).

        The five narrow columns come to the driver as Arrow and are summed there: a Spark aggregation would add
        a shuffle stage to every batch (measured: 50–80 ms of a 0.5 s batch), and these columns are a few bytes
        a record: the file's path, which every row carries, is sent for the file markers only.
        """
        marker = F.col("kind") == KIND_FILE
        table = df.select("kind", "key", "seq", F.when(marker, F.col("source_file")).alias("source_file"),
                          "valid_lines", F.when(marker, F.col("reason")).alias("outcome")).toArrow()
        kinds = table.column("kind")
        rows = table.filter(pc.equal(kinds, KIND_ROW))
        markers = table.filter(pc.equal(kinds, KIND_FILE))
        written = rows.num_rows
        quarantined = int(pc.sum(pc.equal(kinds, KIND_BAD)).as_py() or 0)
        valid = int(pc.sum(markers.column("valid_lines")).as_py() or 0) if markers.num_rows else written
        files = sorted({file_name(f) for f in markers.column("source_file").to_pylist() if f})
        outcomes = {file_name(f): why for f, why in zip(markers.column("source_file").to_pylist(),
                                                         markers.column("outcome").to_pylist(), strict=True)
                    if f and why}
        spans: dict[str, tuple[int, int]] = {}
        if written:
            by_key = rows.group_by("key").aggregate([("seq", "min"), ("seq", "max")])
            spans = {key: (int(low), int(high)) for key, low, high in zip(
                by_key.column("key").to_pylist(), by_key.column("seq_min").to_pylist(),
                by_key.column("seq_max").to_pylist(), strict=True)}
        counts = {"written": written, "duplicate": max(valid - written, 0), "quarantined": quarantined}
        return counts, files, spans, outcomes
