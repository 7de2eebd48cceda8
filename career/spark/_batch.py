"""The fenced batch writer: one term's ``foreachBatch``, which makes a batch visible only by fenced commit.

The numbered steps, and why each is safe for a stale term, are in :class:`BatchWriter`'s docstring.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)

from tenure.career._durable import sync_tree
from tenure.career._protocol import CareerObserver, FailedBatch
from tenure.career.output import check_batch_schema
from tenure.career.queue import printable_name
from tenure.career.redis_queue import Position, TrimPoint
from tenure.career.set_aside import ReplayRecord, mark_replayed, pending_replays, replay_records
from tenure.career.spark._config import SparkCareerConfig
from tenure.career.spark._dedup import DedupStore, Judged, load_seed, load_store, seed_name, write_judged
from tenure.career.spark._errors import HandingOverError, SparkCareerError
from tenure.career.spark._hooks import Hooks
from tenure.career.spark._intake import batch_files, batch_offset, file_name
from tenure.career.spark._layout import Layout
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
    without_repeats,
)
from tenure.career.spark._publish import finish_publish, is_published, staged_parts
from tenure.career.spark._record import check_record, check_size
from tenure.career.spark._redis_topic import Trimmer, batch_positions, record_field
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
from tenure.career.spark._split import Unit, bisect, in_units
from tenure.career.spark._term import Term, committed_batch, mark_consumed
from tenure.errors import Fenced, NotLeader

__all__ = ["BATCH_COMMITTED", "BATCH_FAILED", "BATCH_FENCED", "ROW_FUNCTION_TIMED_OUT", "BatchWriter"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
BATCH_COMMITTED: Final = "batch_committed"
BATCH_FENCED: Final = "batch_fenced"
BATCH_FAILED: Final = "batch_failed"
ROW_FUNCTION_TIMED_OUT: Final = "row_function_timed_out"


#: Fields of a commit record that a batch set aside whole carries over from the one before it (its marks it stages).
_CARRIED = ("retry", "retry_waiting", "retry_next_due")
_RECORD_COLUMNS = ("id", "key", "seq", "ts", "payload")
_REPLAY_COLUMNS = ("kind", "source_file", "line", *_RECORD_COLUMNS)
_REPLAY_SCHEMA = ("kind STRING, source_file STRING, line BIGINT, id STRING, key STRING, seq BIGINT, ts BIGINT, "
                  "payload STRING")
_SHORT_ERROR = 300
_LOGGED_ERROR = 1 << 20  # the whole error, bar a runaway one


_CACHED = StorageLevel.MEMORY_AND_DISK_DESER
"""How a batch is cached while its steps read it: in memory as Spark's columnar batches, spilled to disk when
memory runs short (DataFrame.persist's default). PySpark's ``MEMORY_AND_DISK`` would serialize every cached
batch again, CPU spent on each read of the cache."""


@dataclass(frozen=True)
class _Replay:
    """The set-aside batches a batch replays, and their records."""

    batches: tuple[int, ...] = ()
    records: tuple[ReplayRecord, ...] = ()


@dataclass(frozen=True)
class _Failing:
    """What a split sets aside: the failing records by source (each a JSON line, with the line it came from), their
    positions (source, line) and their keys' highest ``seq``, how many came from the queue (not from a replay), and
    the split's trials."""

    poison: FailedBatch
    records: dict[str, list[tuple[int, bytes]]]
    positions: frozenset[tuple[str, int]]
    highest: dict[str, int]
    from_queue: int
    trials: int
    replayed: int

    @property
    def count(self) -> int:
        return len(self.positions)


@dataclass(frozen=True)
class _Staged:
    """What step 3 staged: the commit record's fields, and what the term keeps of them."""

    counts: dict[str, int]
    files: list[str]
    staged: dict[str, str]
    order: dict[str, str]
    retry: dict[str, Any]
    marks: HighWaterMarks
    row_state: bool | None
    read_s: float
    set_aside: dict[str, Any] | None


def _highest(found: Sequence[ReplayRecord]) -> dict[str, int]:
    """The highest ``seq`` per key of replayed records."""
    highest: dict[str, int] = {}
    for r in found:
        highest[r.record["key"]] = max(int(r.record["seq"]), highest.get(r.record["key"], int(r.record["seq"])))
    return highest


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
       consumed by this group now (and archived once every group on the queue has consumed them). The set-aside
       batches an operator asked to replay are read (``tenure.career.set_aside``). If ``B`` is the poison batch
       this term was told to set aside (``CareerContext.set_aside``) and a split of it failed before, steps 3–5
       stage, commit and publish its queue files and a manifest under ``set-aside/`` instead of running it
       (``_set_aside``).
    3. Classify, deduplicate, set late records aside (``_order``), add the replayed records (past the late check),
       order (through the row function and retry store, when there is one; then the transform); write staged
       Parquet under ``_staging/epoch=<e>/batch=<B>/`` of each output, with the advanced per-key marks; fsync it
       all. The poison batch to set aside runs too: if it fails, it is split (``_split``) and step 3 is done again
       without the records that fail, which are staged under ``set-aside/``.
    4. Fenced commit of a record naming the staged folders, the part files each Delta output gains (``parts``),
       the files read, the marks and the replayed batches, at the version read in 2: so a replay is written once
       (the next batch, reading this record, records it done).
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
                 replica_id: str, hooks: Hooks, faults: Callable[[str], None], trimmer: Trimmer | None = None) -> None:
        self._term = term
        self._trimmer = trimmer
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

    @property
    def _queue_field(self) -> dict[str, int]:
        """The commit record's ``queue``, in a topic of several queues (a topic of one's records have none)."""
        return {} if self._layout.queues == 1 else {"queue": self._layout.index}

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
            term.log.info("batch_skipped", batch=batch_id, committed=committed, epoch=term.epoch)
            return "skipped", {}, True
        if committed is not None and record is not None and config.file_source and committed != term.marked:
            mark_consumed(layout, term, record, self._fault)
        if config.file_source and (reused := batch_offset(term.checkpoint, batch_id).get("reused")):
            term.log.warning("queue_name_reused", batch=batch_id, files=[printable_name(n) for n in reused],
                             effect="a file under a name this group consumed before is read as a new file")
        replay = self._replays(record)
        store = self._dedup_at(record)
        poison = ctx.set_aside if ctx.set_aside is not None and ctx.set_aside.batch_id == batch_id else None
        if poison is not None and poison.split_failed:
            return self._set_aside(df, batch_id, record, version, poison, store)
        # 3. Classify, deduplicate, hold back late records, order, run the user's code; stage every output. The
        #    poison batch this term was told to set aside runs once more, and is split if it fails (``_split``).
        phase = time.monotonic()
        df.persist(_CACHED)
        try:
            judging = time.monotonic()
            kept, judged = without_repeats(df, store, batch_id)
            dedup_s = time.monotonic() - judging
            try:
                done = self._stage(kept, batch_id, record, replay)
            except (Fenced, NotLeader, HandingOverError):
                raise
            except Exception as exc:
                if poison is None:
                    raise
                done = self._split(kept, batch_id, record, replay, poison, exc)
        finally:
            df.unpersist()
        counts, staged = done.counts, done.staged
        self._stage_dedup(judged, staged)
        for stored in staged.values():
            sync_tree(layout.resolve(stored))  # durable before the commit says the batch exists
        stage_s = time.monotonic() - phase - done.read_s - dedup_s
        self._fault("after_stage")
        # 4. The fenced commit: the only step that makes the batch count.
        trim_to, through, redis_field = self._redis_field(batch_id, record)
        committed_at = time.time()
        new_record: dict[str, Any] = {
            **self._queue_field,
            "batch_id": batch_id,
            "epoch": term.epoch,
            "replica_id": self._replica_id,
            "committed_at": committed_at,
            "clock": term.clock.now(),
            "published_path": f"{layout.relative(layout.table)}/"
                              f"{layout.published_name(layout.table, batch_id, '*.parquet')}",
            "staged": staged,
            "parts": staged_parts(layout, staged, batch_id),
            "counts": counts,
            "files": done.files,
            **done.order,
            **done.retry,
            **({"replayed": list(replay.batches)} if replay.batches else {}),
            **({"set_aside": done.set_aside} if done.set_aside is not None else {}),
            **redis_field,
            "dedup_since": self._dedup_since(record, batch_id),
        }
        check_size(new_record)
        commit_started = time.monotonic()
        ctx.fence.commit(new_record, version)
        commit_s = time.monotonic() - commit_started
        self._observer.commit_finished(commit_s, committed_at)
        store.apply(judged)
        with term.lock:
            term.last_committed = batch_id
            term.last_record = new_record
            term.order = (done.order["order"], done.marks)
        self._fault("after_commit")
        # 5. Publish (a new leader's inaugurate, or a re-run of this batch, finishes it after a crash).
        publish_started = time.monotonic()
        published = finish_publish(layout, new_record, self._fault)
        self._forget_expired(store, judged)
        publish_s = time.monotonic() - publish_started - published.delta_s
        self._replayed(new_record)
        self._trim(trim_to, through)
        if done.retry:
            self._observer.retry_waiting(int(done.retry["retry_waiting"]))
        term.log.info(BATCH_COMMITTED, batch=batch_id, epoch=term.epoch, written=counts["written"],
                      durable_s=round(durable_s, 4), read_s=round(done.read_s, 3), stage_s=round(stage_s, 3),
                      commit_s=round(commit_s, 3), publish_s=round(publish_s, 3),
                      delta_s=round(published.delta_s, 4),
                      batch_s=round(time.monotonic() - started, 3),
                      duplicate=counts["duplicate"], quarantined=counts["quarantined"], files=len(done.files),
                      dedup_s=round(dedup_s, 4), dedup_keys=len(store),
                      **{name: counts[name] for name in ("late", "replayed", "set_aside") if counts.get(name)},
                      **({"retried": counts["retried"], "dead_lettered": counts["dead_lettered"],
                          "waiting": done.retry["retry_waiting"]} if done.retry else {}))
        self._fault("after_publish")
        outcome = "set_aside" if counts.get("set_aside") else "committed"
        return outcome, counts, self._row_function_moved(done.row_state)

    def _stage(self, df: DataFrame, batch_id: int, record: dict[str, Any] | None, replay: _Replay,
               failing: _Failing | None = None) -> _Staged:
        """Step 3 for the (cached) batch ``df``: classify, deduplicate, hold back late records, add the replayed
        records (past the late check: their keys' order is re-opened for them), order, run the user's code, and
        stage every output, the advanced per-key marks and, for a split batch, what ``failing`` sets aside."""
        term, layout, config = self._term, self._layout, self._config
        phase = time.monotonic()
        counts, files, spans, outcomes = self._stats(df)
        read_s = time.monotonic() - phase
        if failing is None:  # a split stages the batch again: its entries were reported the first time
            self._log_outcomes(batch_id, outcomes)
            self._fault("after_read")
        marks = self._marks_at(record)
        staged: dict[str, str] = {}
        fresh, late = records(df), None
        late_keys = marks.late_keys(spans)
        if late_keys:
            fresh, late = split_late(df, late_keys, df.sparkSession, epoch=term.epoch, batch_id=batch_id,
                                     queue=layout.output.column)
            counts["late"] = late.count()
            counts["written"] -= counts["late"]
        if replay.records:
            fresh = fresh.unionByName(self._frame(df.sparkSession, replay.records).select(*_RECORD_COLUMNS))
            counts["written"] += len(replay.records)
            counts["replayed"] = len(replay.records)
        partitions = output_partitions(counts["written"], config.shuffle_partitions)
        retry: dict[str, Any] = {}
        dead_max: dict[str, int] = {}
        row_state: bool | None = None
        processed: DataFrame | None = None
        held = self._held_at(record)
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
            bad = quarantine_rows(df, epoch=term.epoch, batch_id=batch_id, queue=layout.output.column)
            (bad if late is None else bad.unionByName(late)).coalesce(1) \
                .write.mode("overwrite").parquet(str(path))
            staged["quarantine"] = layout.relative(path)
        set_aside = None
        if failing is not None:
            set_aside = self._stage_failing(failing, counts, staged, batch_id)
        # A dead-lettered record moves its key past it too, as does a record set aside: a repeat of it is late,
        # not a second chance (a replay is how it comes back). A replayed record moves it as a written one does.
        new_marks = (marks.advanced(written_max).advanced(dead_max).advanced(_highest(replay.records))
                     .advanced(failing.highest if failing is not None else {}))
        order = self._stage_marks(new_marks, marks, record, staged, batch_id)
        return _Staged(counts, files, staged, order, retry, new_marks, row_state, read_s, set_aside)

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

    # -- poison batches and replays --------------------------------------------------------------------------

    def _replays(self, record: dict[str, Any] | None) -> _Replay:
        """The set-aside batches an operator asked to replay that no committed batch has replayed, with their
        records; a replay the last committed batch names is recorded done first (a crash between that batch's
        commit and the record)."""
        self._replayed(record)
        folder = self._layout.set_aside
        pending = pending_replays(folder)
        found = [r for batch in pending for r in replay_records(folder, batch, self._config.max_line_bytes)]
        return _Replay(tuple(pending), tuple(found))

    def _replayed(self, record: dict[str, Any] | None) -> None:
        """Record done the replays the committed ``record`` names (idempotent)."""
        for batch in (record or {}).get("replayed") or []:
            mark_replayed(self._layout.set_aside, int(batch), in_batch=int((record or {})["batch_id"]),
                          records=int(((record or {}).get("counts") or {}).get("replayed", 0)))

    @staticmethod
    def _frame(session: SparkSession, found: Sequence[ReplayRecord]) -> DataFrame:
        """Replayed records as record rows (``kind``, ``source_file``, ``line`` and the record's fields)."""
        rows = [(KIND_ROW, r.source, r.line, r.record["id"], r.record["key"], r.record["seq"], r.record["ts"],
                 json.dumps(r.record["payload"], separators=(",", ":"), ensure_ascii=False)) for r in found]
        return session.createDataFrame(rows, _REPLAY_SCHEMA)

    def _split(self, df: DataFrame, batch_id: int, record: dict[str, Any] | None, replay: _Replay,
               poison: FailedBatch, error: Exception) -> _Staged:
        """The poison batch failed once more: bisect its records (and those it replays) down to the ones that fail
        (``_split.bisect``), then stage the rest as the batch, and what fails under ``set-aside/``."""
        term = self._term
        started = time.monotonic()
        term.log.warning("batch_splitting", batch=batch_id, epoch=term.epoch, attempts=poison.attempts,
                         failing_s=round(poison.failing_s, 1), error=f"{type(error).__name__}: {error}"[:_SHORT_ERROR])
        universe = df.where(F.col("kind") == KIND_ROW).select(*_REPLAY_COLUMNS)
        if replay.records:
            universe = universe.unionByName(self._frame(df.sparkSession, replay.records))
        positions: dict[str, list[int]] = defaultdict(list)
        located = universe.select("source_file", "line").toArrow()
        for source, line in zip(located.column("source_file").to_pylist(), located.column("line").to_pylist(),
                                strict=True):
            positions[source].append(int(line))
        trials = 0

        def fails(units: list[Unit]) -> bool:
            nonlocal trials
            trials += 1
            return self._trial_fails(universe.where(in_units(units)), batch_id)

        blamed = bisect([Unit(source, tuple(sorted(lines))) for source, lines in sorted(positions.items())], fails,
                        self._config.split_max_trials)
        failing = self._failing(universe.where(in_units(blamed)), poison, trials, len(replay.records))
        kept = _Replay(replay.batches, tuple(r for r in replay.records if (r.source, r.line) not in failing.positions))
        done = self._stage(df.where(~in_units(blamed)), batch_id, record, kept, failing)
        term.log.warning("batch_split", batch=batch_id, epoch=term.epoch, set_aside=failing.count, trials=trials,
                         seconds=round(time.monotonic() - started, 3),
                         files=sorted(failing.records), written=done.counts["written"])
        return done

    def _trial_fails(self, rows: DataFrame, batch_id: int) -> bool:
        """Whether the user's code fails on ``rows`` (record rows) as the batch runs it: the row function (its
        failures go to the retry store; only a failure of the batch counts) and the transform, into Spark's
        ``noop`` sink, unordered (the batch's own steps around them are not on trial). A term that is handing over
        or no longer leads stops splitting (raises)."""
        term = self._term
        if term.stop.is_set():
            raise HandingOverError(f"batch {batch_id} not split: epoch {term.epoch} is handing over")
        if not term.ctx.still_leading():
            raise NotLeader(f"batch {batch_id} not split: epoch {term.epoch} is not leading now")
        out = rows.select(*_RECORD_COLUMNS)
        started = time.monotonic()
        try:
            if self._hooks.row_function is not None:
                out = process_records(out, None, row_function=self._hooks.row_function, policy=self._hooks.policy,
                                      now=term.clock.now(), partitions=self._config.shuffle_partitions) \
                    .where(F.col("status") == WRITTEN).select(*_RECORD_COLUMNS)
            if self._hooks.transform is not None:
                out = self._hooks.transform(out)
            out.write.format("noop").mode("overwrite").save()  # no ordering: it runs none of the user's code
        except Exception as exc:
            term.log.debug("split_trial", batch=batch_id, failed=True, seconds=round(time.monotonic() - started, 3),
                           error=f"{type(exc).__name__}: {exc}"[:_SHORT_ERROR])
            return True
        term.log.debug("split_trial", batch=batch_id, failed=False, seconds=round(time.monotonic() - started, 3))
        return False

    def _failing(self, rows: DataFrame, poison: FailedBatch, trials: int, replayed: int) -> _Failing:
        """What a split sets aside: the blamed records by source (a queue file's name, a set-aside file's for a
        replayed record, or another source's), each as one JSON line with the line it came from, and their keys'
        highest ``seq``."""
        table = rows.select("source_file", "line", *_RECORD_COLUMNS).toArrow()
        kept: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
        positions: set[tuple[str, int]] = set()
        highest: dict[str, int] = {}
        from_queue = 0
        for row in table.to_pylist():
            source, line, key, seq = row["source_file"], int(row["line"]), row["key"], int(row["seq"])
            record = {name: row[name] for name in _RECORD_COLUMNS}
            record["payload"] = json.loads(record["payload"]) if record["payload"] is not None else None
            replayed_from = source.startswith(str(self._layout.set_aside))
            kept[file_name(source)].append((line, json.dumps(record, separators=(",", ":"),
                                                              ensure_ascii=False).encode()))
            positions.add((source, line))
            highest[key] = max(seq, highest.get(key, seq))
            from_queue += not replayed_from
        return _Failing(poison, dict(kept), frozenset(positions), highest, from_queue, trials, replayed)

    def _stage_failing(self, failing: _Failing, counts: dict[str, int], staged: dict[str, str],
                       batch_id: int) -> dict[str, Any] | None:
        """Stage a split batch's failing records under ``set-aside/`` and count them; returns the commit record's
        ``set_aside`` field (None when nothing fails any more)."""
        if not failing.count:
            return None
        term, layout = self._term, self._layout
        staging = layout.staging(layout.set_aside, term.epoch, batch_id)
        counts["set_aside"] = stage_set_aside(layout, staging, batch_id=batch_id, epoch=term.epoch, files=[],
                                              failed=failing.poison, records=failing.records)
        # The file markers still count the lines set aside as valid: they are not repeats.
        counts["duplicate"] = max(counts["duplicate"] - failing.from_queue, 0)
        staged["set_aside"] = layout.relative(staging)
        return {**failing.poison.to_json(), "split": True, "records": failing.count, "trials": failing.trials}

    def _set_aside(self, df: DataFrame, batch_id: int, record: dict[str, Any] | None, version: int,
                   failed: FailedBatch, store: DedupStore) -> tuple[str, dict[str, int], bool]:
        """Commit batch ``batch_id`` without running the user's code, its split having failed too: its queue files
        and a manifest go to ``set-aside/``; the per-key marks move past its records (as a split's do), the retry
        store carries over unchanged (steps 3–5 otherwise as a batch).

        The batch's records are still classified and read (``_stats``: Spark requires its state stores to
        commit): if even that fails, the classification itself is what fails, and the batch cannot be set aside.
        """
        term, layout = self._term, self._layout
        files = batch_files(term.checkpoint, batch_id)
        df.persist(_CACHED)
        try:
            kept, judged = without_repeats(df, store, batch_id)
            _counts, _read, spans, _outcomes = self._stats(kept)
            # A stream's entries have no file to keep: the batch's records are set aside themselves, by stream.
            entries = self._by_stream(kept) if self._trimmer is not None else None
        finally:
            df.unpersist()
        marks = self._marks_at(record)
        new_marks = marks.advanced({key: high for key, (_low, high) in spans.items()})
        staging = layout.staging(layout.set_aside, term.epoch, batch_id)
        lines = stage_set_aside(layout, staging, batch_id=batch_id, epoch=term.epoch, files=files, failed=failed,
                                records=entries)
        staged = {"set_aside": layout.relative(staging)}
        order = self._stage_marks(new_marks, marks, record, staged, batch_id)
        self._stage_dedup(judged, staged)
        for stored in staged.values():
            sync_tree(layout.resolve(stored))
        self._fault("after_stage")
        counts = {"set_aside": lines}
        trim_to, through, redis_field = self._redis_field(batch_id, record)
        new_record: dict[str, Any] = {
            **{name: (record or {})[name] for name in _CARRIED if name in (record or {})},
            **self._queue_field,
            "batch_id": batch_id,
            "epoch": term.epoch,
            "replica_id": self._replica_id,
            "committed_at": time.time(),
            "clock": term.clock.now(),
            "staged": staged,
            "counts": counts,
            "files": files,
            **order,
            "set_aside": {**failed.to_json(), "split": False, "records": lines},
            **redis_field,
            "dedup_since": self._dedup_since(record, batch_id),
        }
        check_size(new_record)
        term.ctx.fence.commit(new_record, version)
        store.apply(judged)
        with term.lock:
            term.last_committed = batch_id
            term.last_record = new_record
            term.order = (order["order"], new_marks)
        self._fault("after_commit")
        finish_publish(layout, new_record, self._fault)
        self._forget_expired(store, judged)
        self._trim(trim_to, through)
        term.log.warning("batch_set_aside", batch=batch_id, epoch=term.epoch, files=len(files), records=lines,
                         attempts=failed.attempts, error=failed.error)
        self._fault("after_publish")
        return "set_aside", counts, True

    # -- a Redis topic ---------------------------------------------------------------------------------------

    def _redis_field(self, batch_id: int, record: dict[str, Any] | None
                     ) -> tuple[TrimPoint | None, Position | None, dict[str, Any]]:
        """On a Redis topic, the batch's positions and the trim point to apply after its commit (computed now from
        what every registered group had committed and checkpointed), and the commit record's ``redis`` field
        (``_redis_topic``); nothing on a queue folder."""
        trimmer = self._trimmer
        if trimmer is None:
            return None, None, {}
        checkpoint = self._term.checkpoint
        through, after = batch_positions(lambda batch: batch_offset(checkpoint, batch), batch_id)
        trim_to = trimmer.plan(after, record, self._term.log)
        return trim_to, through, {"redis": record_field(trimmer.stream, through, after, trim_to)}

    def _trim(self, trim_to: TrimPoint | None, through: Position | None) -> None:
        """After the commit, on a Redis topic: trim the stream and show the group's place to operators."""
        if self._trimmer is not None and through is not None:
            self._trimmer.apply(trim_to, through, self._term.log)

    @staticmethod
    def _by_stream(df: DataFrame) -> dict[str, list[tuple[int, bytes]]]:
        """A batch's records by stream (``<stream>/<id>`` sources), each with its entry's number, as JSON lines:
        what a batch of a Redis topic set aside whole keeps."""
        table = df.where(F.col("kind") == KIND_ROW).select("source_file", "line", *_RECORD_COLUMNS).toArrow()
        kept: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
        for row in table.to_pylist():
            record = {name: row[name] for name in _RECORD_COLUMNS}
            record["payload"] = json.loads(record["payload"]) if record["payload"] is not None else None
            kept[str(row["source_file"]).rsplit("/", 1)[0]].append(
                (int(row["line"]), json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()))
        return dict(kept)

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

    def _held_at(self, record: dict[str, Any] | None) -> pa.Table | None:
        """The retry store as of the committed ``record`` (the one the follower preloaded, when the record names
        its very snapshot), or None when the record names none."""
        path = (record or {}).get("retry")
        if not path:
            return None
        held = self._term.held
        if held is not None and held[0] == path:
            return held[1]
        return read_snapshot(self._layout.resolve(path))

    def _dedup_at(self, record: dict[str, Any] | None) -> DedupStore:
        """The dedup store as of the committed ``record``: the term's own when it is that batch's (kept since the
        term's last commit, or the follower's, preloaded), else loaded from the published files; for a data root
        Spark's state store deduplicated (a record without ``dedup_since``), from the seed inauguration wrote."""
        term, config = self._term, self._config
        committed = committed_batch(record)
        if term.dedup is not None and term.dedup.batch_id == committed:
            return term.dedup
        started = time.monotonic()
        seeded = committed is not None and "dedup_since" not in (record or {})
        if seeded:  # an earlier release's data root: inauguration wrote the seed (``_upgrade``)
            assert committed is not None
            store = load_seed(self._layout.dedup, committed, config.dedup_window_ms) or \
                DedupStore.seeded(config.dedup_window_ms, committed, 0, {})
        else:
            store = load_store(self._layout.dedup, committed, config.dedup_window_ms)
        term.log.info("dedup_store_loaded", batch=committed, keys=len(store), seeded=seeded,
                      seconds=round(time.monotonic() - started, 4))
        term.dedup = store
        return store

    @staticmethod
    def _dedup_since(record: dict[str, Any] | None, batch_id: int) -> int:
        """The commit record's ``dedup_since``: the first batch whose dedup keys are in ``dedup/`` (kept from the
        record before; this batch's for the first batch of a data root, or the first after an upgrade)."""
        since = (record or {}).get("dedup_since")
        return int(since) if since is not None else batch_id

    def _stage_dedup(self, judged: Judged, staged: dict[str, str]) -> None:
        """Stage the batch's dedup file (the keys it saw first): published with the batch, after its commit."""
        layout = self._layout
        folder = layout.staging(layout.dedup, self._term.epoch, judged.batch_id)
        write_judged(judged, folder)
        staged["dedup"] = layout.relative(folder)

    def _forget_expired(self, store: DedupStore, judged: Judged) -> None:
        """After a publish: drop from memory what the dedup window has passed, and delete those batches' files (and
        the upgrade's seed, once the batch that carried its keys is published)."""
        layout = self._layout
        gone = [layout.published_name(layout.dedup, batch, "part-00000.parquet") for batch in store.forget_expired()]
        if judged.carried:
            gone.append(seed_name(judged.batch_id - 1))
        for name in gone:
            with contextlib.suppress(FileNotFoundError):  # a batch of before the upgrade published none
                (layout.dedup / name).unlink()

    def _stage_marks(self, new: HighWaterMarks, old: HighWaterMarks, record: dict[str, Any] | None,
                     staged: dict[str, str], batch_id: int) -> dict[str, str]:
        """Stage the advanced marks when they moved; returns the commit record's ``order`` field."""
        layout = self._layout
        path = (record or {}).get("order")
        if new is not old or path is None:
            folder = layout.staging(layout.order, self._term.epoch, batch_id)
            write_parquet(new.to_arrow(), folder)
            staged["order"] = layout.relative(folder)
            path = layout.relative(layout.order / layout.published_name(layout.order, batch_id, "part-00000.parquet"))
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
        dead = dead_letter_table(rest, epoch=term.epoch, batch_id=batch_id, queue=layout.output.column)
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
            "retry": layout.relative(layout.retry
                                     / layout.published_name(layout.retry, batch_id, "part-00000.parquet")),
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
        with_batch(rows, epoch=term.epoch, batch_id=batch_id, queue=layout.output.column) \
            .write.mode("overwrite").parquet(str(path))
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
