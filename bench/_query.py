"""The consumer's Structured Streaming query without tenure's lifecycle: what the baselines run.

The same pipeline functions as ``career/spark`` (classify → deduplicate → order by key and seq → Parquet), the
same session settings (``tenure.career.spark.build_session``) and the same flow control, but no election, no fence,
no staging or publish: each batch appends its Parquet straight into ``table/``. The naive baseline and the
bare throughput run both use it, so a difference against tenure is the lifecycle's, not the query's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)
from pyspark.sql.streaming.query import StreamingQuery

from tenure.career.queue import QueueLayout
from tenure.career.spark import SparkCareerConfig, build_session
from tenure.career.spark._pipeline import (
    KIND_BAD,
    KIND_FILE,
    KIND_ROW,
    classified_stream,
    output_partitions,
    quarantine_rows,
    table_rows,
)

__all__ = ["BatchInfo", "session", "start_query"]

BatchInfo = dict[str, Any]


def session(config: SparkCareerConfig, app_name: str) -> SparkSession:
    """A SparkSession with the career's settings (local master, UI off, RocksDB state, few partitions)."""
    spark, _owned = build_session(config.spark_master, app_name=app_name,
                                  shuffle_partitions=config.shuffle_partitions, extra_conf=config.spark_conf)
    return spark


def _spark_deduplicated(stamped: DataFrame, window: str) -> DataFrame:
    """A bare consumer's deduplication: Spark's own operator, its ids in the query's checkpoint (RocksDB)."""
    return stamped.withWatermark("_ingested", window).dropDuplicatesWithinWatermark(["dedup_key"])


def start_query(spark: SparkSession, config: SparkCareerConfig, *, checkpoint: Path, table: Path,
                quarantine: Path, on_batch: Callable[[BatchInfo], None], epoch: int = 0) -> StreamingQuery:
    """Start the bare query over ``<data_root>/landing``; ``on_batch`` gets each batch's figures after its write."""
    options = {"maxFilesPerTrigger": str(config.max_files_per_trigger)} if config.max_files_per_trigger else {}
    stream = _spark_deduplicated(classified_stream(
        spark, source_format=config.source_format, path=str(QueueLayout(Path(config.data_root)).landing.resolve()),
        options=options, schema=config.source_schema, max_line_bytes=config.max_line_bytes,
        source_file_expr=config.source_file_expr, line_expr=config.line_expr), config.dedup_window)

    def write(df: DataFrame, batch_id: int) -> None:
        started = time.time()
        df.persist()
        try:
            # One aggregation, as tenure's own: counts by kind and the files read (for the latency benchmark).
            rows = df.groupBy("kind").agg(
                F.count(F.lit(1)).alias("n"),
                F.collect_list(F.when(F.col("kind") == KIND_FILE, F.col("source_file"))).alias("files"),
            ).collect()
            by_kind = {r["kind"]: int(r["n"]) for r in rows}
            files = sorted(f.rsplit("/", 1)[-1] for r in rows for f in r["files"] if f)
            read = time.time()
            if by_kind.get(KIND_ROW):
                table_rows(df, epoch=epoch, batch_id=batch_id,
                           partitions=output_partitions(by_kind[KIND_ROW], config.shuffle_partitions)) \
                    .write.mode("append").parquet(table.resolve().as_uri())
            if by_kind.get(KIND_BAD):
                quarantine_rows(df, epoch=epoch, batch_id=batch_id).write.mode("append") \
                    .parquet(quarantine.resolve().as_uri())
        finally:
            df.unpersist()
        on_batch({"batch_id": batch_id, "started_at": started, "read_at": read, "committed_at": time.time(),
                  "written": by_kind.get(KIND_ROW, 0), "quarantined": by_kind.get(KIND_BAD, 0), "files": files})

    return (stream.writeStream.foreachBatch(write)
            .option("checkpointLocation", checkpoint.resolve().as_uri())
            .trigger(processingTime=f"{int(config.trigger_interval_s * 1000)} milliseconds")
            .start())
