"""Example pipeline code: a ``transform`` and a ``row_function`` to start from (docs/concepts/your-pipeline.md).

Run them with ``tenure run --transform tenure.career.examples:enrich
--row-function tenure.career.examples:reject_poison``.
Your own module must be importable by the replica and by Spark's Python workers (installed, or on PYTHONPATH).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)

__all__ = ["enrich", "reject_poison"]


def enrich(records: DataFrame) -> DataFrame:
    """Add ``payload_bytes`` (size of the JSON payload) and ``key_bucket`` (0–15, stable per key).

    A transform gets the batch's validated, deduplicated records (``id``, ``key``, ``seq``, ``ts``,
    ``payload`` as JSON text) and returns what to write. Keep one row per record and keep ``id``, ``key``,
    ``seq``; row-wise steps (``withColumn``, ``select``, a broadcast join) keep each key in one part file.
    """
    return records.withColumn("payload_bytes", F.length("payload")).withColumn(
        "key_bucket", F.pmod(F.hash("key"), F.lit(16)))


def reject_poison(record: dict[str, Any]) -> dict[str, Any] | None:
    """Refuse a record whose payload says ``"poison": true``; stamp the others ``"checked": true``.

    A row function gets one record as a dict (``payload`` decoded) and returns it — only ``payload`` may
    change — or None to keep it as is. A raise is that record's failure: it is retried with back-off, its
    key's later records wait behind it, and after the last attempt it is dead-lettered.
    """
    payload = record["payload"]
    if isinstance(payload, dict):
        if payload.get("poison"):
            raise ValueError(f"record {record['id']} is marked poison")
        return {**record, "payload": {**payload, "checked": True}}
    return None
