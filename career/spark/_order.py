"""Per-key order: per key, ``seq`` is the order, enforced by the consumer, not by file mtimes.

ARCHITECTURE.md "Where each guarantee is enforced" places this guarantee among the others.

Spark's file source orders files by modification time in milliseconds and breaks ties by listing order, so a
fast producer's files can reach batches out of order. The consumer therefore keeps, per key, the highest ``seq``
it has published or dead-lettered (its *high-water mark*: the key has moved past it either way). A record whose
``seq`` is at or below its key's mark arrived after its key had moved past it: it is *late*. It is never
written out of order, and never silently: it goes to ``quarantine/`` with reason ``late`` (the record as compact
JSON in ``value``), is counted as ``tenure_records_total{outcome="late"}``, and ``tenure verify`` reports it and
checks the claim.

The marks are a snapshot like the retry store: each committed batch that advanced them names one Parquet file
``order/batch-<B>-part-00000.parquet`` (``key``, ``seq``), staged, committed and published with the batch, so a
new leader, or a re-run of a batch, starts from exactly the committed marks. Their size is one row per key.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)

from tenure.career.spark._pipeline import KIND_ROW, batch_columns

__all__ = ["LATE", "HighWaterMarks", "arrow_maxima", "maxima", "split_late"]

LATE = "late"
"""The quarantine ``reason`` of a record that arrived after its key had moved past its ``seq`` (published or
dead-lettered a ``seq`` at least its own)."""

_SCHEMA = pa.schema([("key", pa.string()), ("seq", pa.int64())])


class HighWaterMarks:
    """The highest published or dead-lettered ``seq`` of each key (immutable: :meth:`advanced` returns a new one)."""

    def __init__(self, marks: Mapping[str, int] | None = None) -> None:
        self._marks = dict(marks or {})

    @classmethod
    def read(cls, path: Path) -> HighWaterMarks:
        """The snapshot a commit record names."""
        table = pq.read_table(path, schema=_SCHEMA)
        return cls(dict(zip(table.column("key").to_pylist(), table.column("seq").to_pylist(), strict=True)))

    @classmethod
    def of_table(cls, folder: Path) -> HighWaterMarks:
        """Marks computed from a published table: the start for data written before marks were kept."""
        if not folder.is_dir() or not any(folder.glob("*.parquet")):
            return cls()
        return cls(arrow_maxima(ds.dataset(folder, format="parquet").to_table(columns=["key", "seq"])))

    def __len__(self) -> int:
        return len(self._marks)

    def get(self, key: str) -> int | None:
        return self._marks.get(key)

    def late_keys(self, spans: Mapping[str, tuple[int, int]]) -> dict[str, int]:
        """The keys of a batch that hold late records, with their marks; ``spans`` maps key → (min, max) seq."""
        late = {}
        for key, (low, _high) in spans.items():
            mark = self._marks.get(key)
            if mark is not None and low <= mark:
                late[key] = mark
        return late

    def advanced(self, maxima: Mapping[str, int]) -> HighWaterMarks:
        """These marks after publishing rows whose highest ``seq`` per key is ``maxima`` (``self`` when none
        moves, so a caller can tell by identity whether there is anything new to write)."""
        moved = {key: seq for key, seq in maxima.items() if seq > self._marks.get(key, seq - 1)}
        return HighWaterMarks({**self._marks, **moved}) if moved else self

    def to_arrow(self) -> pa.Table:
        return pa.table({"key": pa.array(list(self._marks), pa.string()),
                         "seq": pa.array(list(self._marks.values()), pa.int64())})


def split_late(classified: DataFrame, late: Mapping[str, int], spark: SparkSession, *,
               epoch: int, batch_id: int, queue: int | None = None) -> tuple[DataFrame, DataFrame]:
    """Split a batch's records into those in order and the late ones (in quarantine shape).

    Only called when :meth:`HighWaterMarks.late_keys` found some: the common batch pays nothing for this.
    """
    marks = spark.createDataFrame(list(late.items()), "key STRING, _mark BIGINT")
    rows = classified.where(F.col("kind") == KIND_ROW).join(F.broadcast(marks), "key", "left")
    is_late = F.col("_mark").isNotNull() & (F.col("seq") <= F.col("_mark"))
    on_time = rows.where(~is_late).select("id", "key", "seq", "ts", "payload")
    record = F.concat(F.regexp_replace(F.to_json(F.struct("id", "key", "seq", "ts")), "}$", ""),
                      F.lit(',"payload":'), F.col("payload"), F.lit("}"))
    quarantined = rows.where(is_late).select(
        record.alias("value"), F.lit(LATE).alias("reason"), "source_file", "line",
        *batch_columns(epoch=epoch, batch_id=batch_id, queue=queue))
    return on_time, quarantined


def arrow_maxima(records: pa.Table) -> dict[str, int]:
    """The highest ``seq`` per key of an Arrow table of records (``key``, ``seq``)."""
    if records.num_rows == 0:
        return {}
    grouped = records.group_by("key").aggregate([("seq", "max")])
    return dict(zip(grouped.column("key").to_pylist(), grouped.column("seq_max").to_pylist(), strict=True))


def maxima(rows: DataFrame) -> dict[str, int]:
    """The highest ``seq`` per key of ``rows`` (one small job; used where rows were filtered by user code)."""
    result = rows.groupBy("key").agg(F.max("seq").alias("seq")).collect()
    return {row["key"]: int(row["seq"]) for row in result}
