"""Per-record failure isolation: a row function that raises sends its record to a retry store, not the batch down.

Seed 002's retry queue (one failing message never stops the offset) with seed 003's per-key order: when a
record fails, it is held with a due time (exponential back-off), and every later record of its key is held
behind it. When the head is due it re-enters a batch with its waiters, in ``seq`` order; after its last
attempt it is dead-lettered and its key moves on.

The retry store is a snapshot: each committed batch names one Parquet file ``retry/batch-<B>-part-00000.parquet``
with every record held after that batch. It is staged, committed (the commit record names it) and published like
the table, so a new leader — or a re-run of a batch — starts from exactly the committed store.

A new record whose id is held in that snapshot is the producer's repeat of a held record that Spark's dedup
window has already forgotten (a held record has not advanced its key's order mark, so the mark cannot catch it):
it is dropped before the row function, with status ``duplicate``, and the held copy carries on.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)

from tenure.career._deadline import call_within
from tenure.career.queue import QUEUE_COLUMN
from tenure.errors import Unresponsive

__all__ = [
    "DEAD",
    "DUPLICATE",
    "HELD",
    "RETRY_COLUMNS",
    "WRITTEN",
    "RetryPolicy",
    "RowFunction",
    "RowTimeout",
    "dead_letter_table",
    "identity_row",
    "next_due",
    "process_records",
    "read_snapshot",
    "repeat_ids",
    "snapshot_table",
    "timed_out_now",
    "unique_held",
    "write_parquet",
]

WRITTEN = "written"
HELD = "held"  # failed and due later, or waiting behind its key's failed record
DEAD = "dead"  # out of attempts: dead-lettered
DUPLICATE = "duplicate"  # a new record whose id is held: a repeat, dropped before the row function

RETRY_COLUMNS: tuple[str, ...] = (
    "id", "key", "seq", "ts", "payload", "attempts", "first_failed_at", "last_failed_at", "due_at", "error",
)
"""The retry snapshot's columns; a waiter behind its key's failed record has 0 attempts and no due time."""

_RETRY_SCHEMA = pa.schema([
    ("id", pa.string()), ("key", pa.string()), ("seq", pa.int64()), ("ts", pa.int64()), ("payload", pa.string()),
    ("attempts", pa.int32()), ("first_failed_at", pa.float64()), ("last_failed_at", pa.float64()),
    ("due_at", pa.float64()), ("error", pa.string()),
])
_PROCESSED_SCHEMA = _RETRY_SCHEMA.append(pa.field("status", pa.string()))
_PROCESSED_DDL = (
    "id STRING, key STRING, seq BIGINT, ts BIGINT, payload STRING, attempts INT, first_failed_at DOUBLE, "
    "last_failed_at DOUBLE, due_at DOUBLE, error STRING, status STRING"
)
_REPEAT = "_repeat"  # in the processor's input only when something is held: true on a repeat of a held id
_MAX_ERROR = 2000
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)

RowFunction = Callable[[dict[str, Any]], Any]
"""``function(record) -> record | None``: a raise is that record's failure; only the ``payload`` may change."""


def identity_row(record: dict[str, Any]) -> None:
    """A row function that accepts every record unchanged (used to drain the store when none is configured)."""
    return None


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how late a failed record is tried again, and how long one call may take.

    Attempt ``n`` (1-based) that fails is retried ``min(backoff_s × 2^(n-1), backoff_max_s)`` later; the
    ``attempts``-th failure dead-letters the record. A call running past ``row_timeout_s`` fails with
    :class:`RowTimeout` (None: no deadline). The values are checked where they are set (``SparkCareerConfig``'s
    ``retry_*`` and ``row_timeout_s`` settings).
    """

    attempts: int = 5
    backoff_s: float = 1.0
    backoff_max_s: float = 300.0
    row_timeout_s: float | None = None

    def delay(self, attempts: int) -> float:
        return min(self.backoff_s * math.pow(2, attempts - 1), self.backoff_max_s)


class RowTimeout(Exception):
    """A row-function call ran past ``row_timeout_s``: its record fails like any other failure."""


@contextlib.contextmanager
def _alarm(timeout_s: float) -> Iterator[None]:
    """Raise :class:`RowTimeout` in this (main) thread after ``timeout_s``.

    A signal interrupts what a thread cannot: a blocking socket read or ``time.sleep`` returns into the handler,
    which raises. Spark runs ``mapInArrow`` functions on a Python worker's main thread, where signals land; the
    timer is disarmed and the previous handler restored after each call, as the worker is reused.
    """

    def expire(_signum: int, _frame: object) -> None:
        raise RowTimeout(f"the row function did not return within {timeout_s:g} s (row_timeout_s)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _call(row_function: RowFunction, record: dict[str, Any], timeout_s: float | None) -> Any:
    """``row_function(record)`` under its deadline; off the main thread (no signals there) a helper thread
    waits instead, which lets the batch go on but cannot stop the call."""
    if timeout_s is None:
        return row_function(record)
    if threading.current_thread() is threading.main_thread():
        with _alarm(timeout_s):
            return row_function(record)
    try:
        return call_within(lambda: row_function(record), timeout_s, "the row function")
    except Unresponsive as exc:
        raise RowTimeout(f"the row function did not return within {timeout_s:g} s (row_timeout_s)") from exc


def _apply(row_function: RowFunction, key: str, rid: str, seq: int, ts: int, payload: str,
           timeout_s: float | None = None) -> str:
    """Run the row function on one record; returns the payload to write (raises what the function raises)."""
    record = {"id": rid, "key": key, "seq": seq, "ts": ts, "payload": json.loads(payload)}
    result = _call(row_function, record, timeout_s)
    if result is None:
        return payload
    if not isinstance(result, dict):
        raise TypeError(f"row function returned {type(result).__name__}; return the record (a dict) or None")
    for name in ("id", "key", "seq"):
        if result.get(name, record[name]) != record[name]:
            raise ValueError(f"row function changed {name!r}; only the payload may change")
    return _ENCODER.encode(result.get("payload"))


def _processor(row_function: RowFunction, policy: RetryPolicy, now: float
               ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` body over rows sorted by (key, seq) within each key's one partition.

    A row flagged ``_repeat`` (see :func:`process_records`) is passed through as ``duplicate``: it never reaches
    the row function and takes no part in its key's order, so its held copy is tried as if it were alone.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current_key: str | None = None
        blocked = False
        for batch in batches:
            cols = batch.to_pydict()
            repeats = cols.get(_REPEAT)
            out: dict[str, list[Any]] = {name: [] for name in _PROCESSED_SCHEMA.names}
            for i in range(batch.num_rows):
                row = {name: cols[name][i] for name in _RETRY_SCHEMA.names}
                if repeats is not None and repeats[i]:
                    for name in _RETRY_SCHEMA.names:
                        out[name].append(row[name])
                    out["status"].append(DUPLICATE)
                    continue
                if row["key"] != current_key:
                    current_key, blocked = row["key"], False
                status = HELD
                due = row["due_at"]
                if blocked or (due is not None and due > now):
                    blocked = True  # this record, and every later one of its key in this batch, waits
                else:
                    try:
                        row["payload"] = _apply(row_function, row["key"], row["id"], row["seq"], row["ts"],
                                                row["payload"], policy.row_timeout_s)
                        status = WRITTEN
                    except Exception as exc:  # the record's failure, whatever it is, must not fail the batch
                        row["attempts"] = (row["attempts"] or 0) + 1
                        row["first_failed_at"] = row["first_failed_at"] or now
                        row["last_failed_at"] = now
                        row["error"] = f"{type(exc).__name__}: {exc}"[:_MAX_ERROR]
                        if row["attempts"] >= policy.attempts:
                            status, row["due_at"] = DEAD, None
                        else:
                            row["due_at"] = now + policy.delay(row["attempts"])
                            blocked = True
                for name in _RETRY_SCHEMA.names:
                    out[name].append(row[name])
                out["status"].append(status)
            yield pa.RecordBatch.from_pydict(out, schema=_PROCESSED_SCHEMA)

    return run


def process_records(new_rows: DataFrame, held: pa.Table | None, *, row_function: RowFunction,
                    policy: RetryPolicy, now: float, partitions: int) -> DataFrame:
    """The batch's new records plus the held ones, through the row function, each key in ``seq`` order.

    Returns rows of the retry columns plus ``status`` (``written``, ``held``, ``dead`` or ``duplicate``), each
    key's rows in one of ``partitions`` partitions in (key, seq) order — ready for the table without another
    shuffle. A new record whose id is in ``held`` is a repeat of a held record: ``duplicate``, not run.

    Args:
        new_rows: this batch's deduplicated records (``id``, ``key``, ``seq``, ``ts``, ``payload``).
        held: the committed retry snapshot (``None`` or empty: nothing held).
        row_function: ``function(record) -> record | None``; a raise is that record's failure.
        policy: attempts and back-off.
        now: the batch's time (Unix seconds): what is due, and when failures are due again.
        partitions: output partitions, by key.
    """
    rows = new_rows.select(
        "id", "key", "seq", "ts", "payload",
        F.lit(0).cast("int").alias("attempts"), *(F.lit(None).cast("double").alias(name) for name in
                                                  ("first_failed_at", "last_failed_at", "due_at")),
        F.lit(None).cast("string").alias("error"),
    )
    if held is not None and held.num_rows:
        # Only a batch that holds records pays for finding repeats of them. A broadcast join, not
        # ``isin``: the held ids go to the JVM as one Arrow table (a local relation, broadcast without a job),
        # where ``isin`` would make one py4j call and one plan literal per id — fine for a dozen held records,
        # slow for the thousands a long outage of a row function's dependency can hold. A left join with a
        # flag rather than a left-anti join: the repeats reach the processor, which drops them before the row
        # function and reports them as ``duplicate`` in the same pass, so counting them costs no second job.
        spark = new_rows.sparkSession
        ids = pc.unique(held.column("id"))  # unique: the left join must never multiply a new record
        flags = spark.createDataFrame(pa.table({"id": ids, _REPEAT: pa.array([True] * len(ids))}))
        rows = rows.join(F.broadcast(flags), "id", "left").unionByName(
            spark.createDataFrame(held.select(list(RETRY_COLUMNS))).withColumn(_REPEAT, F.lit(False)))
    return (
        rows.repartition(partitions, "key")
        .sortWithinPartitions("key", "seq")
        .mapInArrow(_processor(row_function, policy, now), _PROCESSED_DDL)
    )


def read_snapshot(path: Path | None) -> pa.Table | None:
    """The retry snapshot a commit record names (``None`` when it names none)."""
    if path is None:
        return None
    return pq.read_table(path, schema=_RETRY_SCHEMA)


def write_parquet(table: pa.Table, folder: Path) -> None:
    """Write ``table`` as the single part file ``part-00000.parquet`` of a staging folder (replacing any)."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / ".part-00000.parquet"
    pq.write_table(table, partial)
    partial.replace(folder / "part-00000.parquet")


def unique_held(held: pa.Table) -> tuple[pa.Table, list[str]]:
    """The snapshot with each id held once, and the ids of the copies dropped.

    Tenure before the held-repeat check could hold a producer's repeat of a held record beside it, and both
    copies would be written once they succeed. The copy kept is the one with the most attempts (the original;
    the first on a tie).
    """
    best: dict[str, int] = {}
    ids, attempts = held.column("id").to_pylist(), held.column("attempts").to_pylist()
    for index, rid in enumerate(ids):
        kept = best.get(rid)
        if kept is None or (attempts[index] or 0) > (attempts[kept] or 0):
            best[rid] = index
    if len(best) == held.num_rows:
        return held, []
    keep = set(best.values())
    dropped = [str(rid) for index, rid in enumerate(ids) if index not in keep]
    return held.take(sorted(keep)), dropped


def snapshot_table(processed: pa.Table) -> pa.Table:
    """The held rows of a processed batch (collected to the driver) in snapshot shape."""
    held = processed.filter(pc.equal(processed.column("status"), HELD))
    return held.select(list(RETRY_COLUMNS)).cast(_RETRY_SCHEMA)


def timed_out_now(processed: pa.Table, now: float) -> tuple[int, int]:
    """Of a processed batch's rows that failed in this batch (``last_failed_at == now``): how many, and how many
    of those ran past the row timeout."""
    failed = processed.filter(pc.equal(processed.column("last_failed_at"), now))
    errors = failed.column("error").to_pylist()
    return failed.num_rows, sum(1 for error in errors if error and error.startswith(f"{RowTimeout.__name__}:"))


def repeat_ids(processed: pa.Table) -> list[str]:
    """The ids of a processed batch's ``duplicate`` rows: new records dropped as repeats of held ones."""
    return [str(rid) for rid in processed.filter(pc.equal(processed.column("status"), DUPLICATE))
            .column("id").to_pylist()]


def dead_letter_table(processed: pa.Table, *, epoch: int, batch_id: int, queue: int | None = None) -> pa.Table:
    """The dead rows of a processed batch in dead-letter shape: the retry columns plus ``_epoch``, ``_batch`` and,
    in a topic of several queues (``queue`` not None), ``_queue``."""
    dead = processed.filter(pc.equal(processed.column("status"), DEAD)).select(list(RETRY_COLUMNS))
    dead = dead.cast(_RETRY_SCHEMA)
    n = dead.num_rows
    dead = dead.append_column("_epoch", pa.array([epoch] * n, pa.int64())) \
        .append_column("_batch", pa.array([batch_id] * n, pa.int64()))
    return dead if queue is None else dead.append_column(QUEUE_COLUMN, pa.array([queue] * n, pa.int64()))


def next_due(snapshot: pa.Table) -> float | None:
    """When the store next has work: the earliest due time of each key's first held record (its lowest ``seq``);
    ``None`` when nothing is held.

    Only a key's first record can run next. A record behind it may carry a due time of its own, from failing
    before a lower ``seq`` of its key arrived and failed too; that time may be long past (and ticked once), and
    taking it would pin the retry tick there, leaving the key's first record to wait for new data.
    """
    first: dict[str, tuple[int, float | None]] = {}
    for key, seq, due in zip(snapshot.column("key").to_pylist(), snapshot.column("seq").to_pylist(),
                             snapshot.column("due_at").to_pylist(), strict=True):
        if key not in first or seq < first[key][0]:
            first[key] = (seq, due)
    dues = [due for _, due in first.values() if due is not None]
    return float(min(dues)) if dues else None
