"""The Spark career: a single-writer Structured Streaming consumer with fenced, exactly-once output.

The leader reads ``<data-root>/landing/*.jsonl`` (or another configured source), quarantines bad lines with a
reason, drops repeated message ids with Spark state kept in the checkpoint, orders each batch by (key, seq),
stages Parquet, commits through the ZooKeeper fence, then publishes into ``table/``. A re-run of a committed
batch id is skipped; a new leader rolls a committed-but-unpublished batch forward. ARCHITECTURE.md "One record's
path" follows a record through it; "Data root layout" names every folder.

What is guaranteed: every distinct valid id is written once and every bad line quarantined once, across any
number of leader changes, provided the data root has atomic rename (local disk, HDFS) and a repeat of an id
arrives within ``dedup_window`` of its first copy. Each committed batch becomes one version of each Delta output
table it writes to (``tenure.career.output``), so a Delta reader sees whole batches only; a plain Parquet reader
of ``table/`` may briefly see part of the newest batch while its part files are being renamed into place. A
repeat later than the dedup window is quarantined as late (its seq is at or below its key's published
high-water mark), not written again.

The names below are imported when first used (``tenure.career._lazy`` says why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tenure.career._lazy import lazy_exports

if TYPE_CHECKING:
    from tenure.career.spark._batch import BATCH_COMMITTED, BATCH_FAILED, BATCH_FENCED, ROW_FUNCTION_TIMED_OUT
    from tenure.career.spark._career import QUERY_STARTED, SparkCareer
    from tenure.career.spark._config import SparkCareerConfig
    from tenure.career.spark._errors import HandingOverError, SparkCareerError
    from tenure.career.spark._hooks import HookError
    from tenure.career.spark._progress import BATCH_PROGRESS
    from tenure.career.spark._publish import DELTA_VERSION_ADDED
    from tenure.career.spark._session import SPARK_SESSION_READY, build_session
    from tenure.career.spark._standby import STANDBY_EXECUTORS_HELD, STANDBY_WITHOUT_EXECUTORS, SparkStandby
    from tenure.career.spark._worker_python import worker_python

__all__ = [
    "BATCH_COMMITTED",
    "BATCH_FAILED",
    "BATCH_FENCED",
    "BATCH_PROGRESS",
    "DELTA_VERSION_ADDED",
    "QUERY_STARTED",
    "ROW_FUNCTION_TIMED_OUT",
    "SPARK_SESSION_READY",
    "STANDBY_EXECUTORS_HELD",
    "STANDBY_WITHOUT_EXECUTORS",
    "HandingOverError",
    "HookError",
    "SparkCareer",
    "SparkCareerConfig",
    "SparkCareerError",
    "SparkStandby",
    "build_session",
    "worker_python",
]

_HOMES = {
    **dict.fromkeys(["BATCH_COMMITTED", "BATCH_FAILED", "BATCH_FENCED", "ROW_FUNCTION_TIMED_OUT"], "_batch"),
    **dict.fromkeys(["QUERY_STARTED", "SparkCareer"], "_career"),
    "SparkCareerConfig": "_config",
    **dict.fromkeys(["HandingOverError", "SparkCareerError"], "_errors"),
    "HookError": "_hooks",
    "BATCH_PROGRESS": "_progress",
    **dict.fromkeys(["SPARK_SESSION_READY", "build_session"], "_session"),
    **dict.fromkeys(["STANDBY_EXECUTORS_HELD", "STANDBY_WITHOUT_EXECUTORS", "SparkStandby"], "_standby"),
    "DELTA_VERSION_ADDED": "_publish",
    "worker_python": "_worker_python",
}


__getattr__ = lazy_exports(__name__, _HOMES)
