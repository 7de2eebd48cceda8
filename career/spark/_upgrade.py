"""Carrying a data root of an earlier release into the dedup store of tenure's own (issue 53).

Until the dedup store, Spark's ``dropDuplicatesWithinWatermark`` kept the ids in each term's checkpoint (RocksDB).
At the inauguration of the first term of this release on such a data root (its commit record has no
``dedup_since``), :func:`carry_spark_state` reads that state once with Spark's state data source and writes its keys
as the seed of the dedup store (``_dedup.write_seed``); the term's first batch then publishes them with its own. The
term's checkpoint drops the state folder: Spark refuses to resume a checkpoint whose state names an operator the
query no longer has (``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``). The folder it drops is the term's
own copy; the earlier term's folder, which a term that fails before its first commit leaves the next one to copy,
keeps it, and the seed, once written, is not written again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)

from tenure.career._durable import fsync
from tenure.career.spark._dedup import load_seed, write_seed

__all__ = ["DEDUP_NOT_SEEDED", "DEDUP_SEEDED", "carry_spark_state"]

DEDUP_SEEDED: Final = "dedup_store_seeded"
DEDUP_NOT_SEEDED: Final = "dedup_store_not_seeded"


def carry_spark_state(session: SparkSession, dedup: Path, checkpoint: Path, record: dict[str, Any] | None,
                      committed: int | None, window_ms: int, log: Any) -> None:
    """At inauguration: seed the dedup store in ``dedup`` from the Spark state ``checkpoint`` (the term's own copy)
    holds for the ``committed`` batch, when the ``record`` is an earlier release's and no seed is written yet; then
    drop the checkpoint's state folder."""
    if committed is not None and "dedup_since" not in (record or {}) and \
            load_seed(dedup, committed, window_ms) is None:
        newest_ms, keys = _spark_state(session, checkpoint, committed, window_ms, log)
        write_seed(dedup, committed, newest_ms, keys)
    state = checkpoint / "state"
    if state.exists():
        shutil.rmtree(state)
        fsync(checkpoint, directory=True)


def _spark_state(session: SparkSession, checkpoint: Path, batch_id: int, window_ms: int,
                 log: Any) -> tuple[int, dict[str, int]]:
    """The newest event time and the remembered keys, with their first-seen times, of the deduplication state
    ``checkpoint`` (a copy of the earlier release's) holds for committed batch ``batch_id``.

    The newest event time is that batch's timestamp in the offset log (the event time of an ingestion-time source,
    and within a batch of the group clock of the queue source's). Spark keeps when each key expires (first seen +
    the window of its day, which may not be today's): a key Spark still remembered a window before the newest event
    time is kept, its first-seen time taken as its expiry less today's window, brought within the window that ends
    at the newest event time: a key is remembered at most a window from now, and an earlier, longer window does
    not hold the store's time in the future.

    A checkpoint without that state (or one Spark cannot read) gives no keys, logged: a repeat within the first
    window is then caught as late by the per-key marks (quarantined, never written twice), not dropped.
    """
    newest_ms = _batch_timestamp_ms(checkpoint, batch_id)
    try:
        state = (session.read.format("statestore").option("batchId", batch_id).load(str(checkpoint))
                 .select(F.col("key.dedup_key").alias("key"),
                         (F.col("value.expiresAtMicros") / 1000).cast("long").alias("expires_ms"))
                 .toArrow())
    except Exception as exc:
        log.warning(DEDUP_NOT_SEEDED, batch=batch_id, checkpoint=str(checkpoint),
                    error=f"{type(exc).__name__}: {str(exc)[:300]}",
                    effect="a repeat within the first dedup window is quarantined as late instead of dropped")
        return newest_ms, {}
    horizon_ms = newest_ms - window_ms
    keys = {key: min(max(expires - window_ms, horizon_ms), newest_ms) for key, expires in zip(
        state.column("key").to_pylist(), state.column("expires_ms").to_pylist(), strict=True)
        if expires >= horizon_ms}
    log.info(DEDUP_SEEDED, batch=batch_id, keys=len(keys), newest_ms=newest_ms)
    return newest_ms, keys


def _batch_timestamp_ms(checkpoint: Path, batch_id: int) -> int:
    """Batch ``batch_id``'s ``batchTimestampMs`` in the checkpoint's offset log (its file: a version line, then one
    JSON line of metadata); 0 when the log has none."""
    try:
        return int(json.loads((checkpoint / "offsets" / str(batch_id)).read_text().splitlines()[1])
                   .get("batchTimestampMs", 0))
    except (FileNotFoundError, IndexError, ValueError):
        return 0
