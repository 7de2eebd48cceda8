"""The streaming query: the source a term reads (or the warm-up's sample) and the query that feeds a batch writer.

The default source is the queue (:mod:`tenure.career.spark._intake`): queue files (``*.jsonl``) and retry ticks in
production order; flow control is files or bytes per trigger, never both.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from tenure.career.spark._config import SparkCareerConfig
from tenure.career.spark._intake import QUEUE_SOURCE, QueueSource, clock_options
from tenure.career.spark._layout import Layout
from tenure.career.spark._pipeline import classified_stream, stamped
from tenure.career.spark._term import TermClock

__all__ = ["query_name", "source_stream", "start_query"]


def query_name(replica_id: str, epoch: int, restarts: int) -> str:
    """The query's name in Spark (``tenure_<replica>_<epoch>_<restarts>``, non-word characters as ``_``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", f"tenure_{replica_id}_{epoch}_{restarts}")


def source_stream(session: SparkSession, config: SparkCareerConfig, layout: Layout, *, sample: bool,
                  marks: Path, checkpoint: Path | None = None,
                  clock: TermClock | None = None) -> DataFrame:
    """The classified, deduplicated stream of the configured source.

    Args:
        session: the career's SparkSession.
        config: the career's settings (source, flow control, line limit, dedup window).
        layout: the data root of one queue; its ``landing/`` is read by the queue source
            (:mod:`tenure.career.spark._intake`), and a record of another queue's key there is bad (``wrong_queue``).
        sample: read ``layout.landing`` whatever the configured source (the warm-up's scratch sample).
        marks: this group's consumption marks folder (the queue source skips what it holds).
        checkpoint: the query's checkpoint (to resume one written by Spark's file source).
        clock: the term's group clock: the queue source's event time (none: rows are stamped at ingestion).
    """
    if config.queue_url is not None and not sample:
        from tenure.career.spark._redis_source import REDIS_SOURCE, RedisSource, classified_entries  # redis-py: here

        session.dataSource.register(RedisSource)
        options = {"url": config.queue_url,
                   "queue": str(layout.index), "partitions": str(session.sparkContext.defaultParallelism),
                   "maxLineBytes": str(config.max_line_bytes), "wake": str(layout.wake),
                   **(clock_options(clock) if clock is not None else {})}
        if config.max_bytes_per_trigger is not None:
            options["maxBytesPerTrigger"] = str(config.max_bytes_per_trigger)
        else:
            options["maxEntriesPerTrigger"] = str(config.max_entries_per_trigger)
        raw = session.readStream.format(REDIS_SOURCE).options(**options).load()
        return stamped(classified_entries(raw, config.max_line_bytes, (layout.index, layout.queues)))
    if sample or config.file_source:
        session.dataSource.register(QueueSource)
        options = {"path": str(layout.landing if sample or config.source_path is None else config.source_path),
                   "marks": str(marks), "checkpoint": str(checkpoint or ""),
                   "partitions": str(session.sparkContext.defaultParallelism),
                   **(clock_options(clock) if clock is not None else {})}
        if config.max_bytes_per_trigger is not None:
            options["maxBytesPerTrigger"] = str(config.max_bytes_per_trigger)
        elif config.max_files_per_trigger is not None:
            options["maxFilesPerTrigger"] = str(config.max_files_per_trigger)
        return classified_stream(session, source_format=QUEUE_SOURCE, path=None, options=options,
                                 schema=None, max_line_bytes=config.max_line_bytes, source_file_expr="",
                                 line_expr="", whole_files=True, route=(layout.index, layout.queues))
    return classified_stream(session, source_format=config.source_format, path=config.source_path,
                             options=config.source_options, schema=config.source_schema,
                             max_line_bytes=config.max_line_bytes, source_file_expr=config.source_file_expr,
                             line_expr=config.line_expr)


def start_query(session: SparkSession, config: SparkCareerConfig, layout: Layout,
                writer: Callable[[DataFrame, int], None], *, name: str, checkpoint: Path, marks: Path,
                clock: TermClock) -> Any:
    """Start a term's query: the configured source into ``writer``, polling the source every
    ``trigger_interval_s`` while it has nothing new.

    ``name`` comes from :func:`query_name`; ``checkpoint`` is the term's own; ``marks`` the group's marks
    folder; ``clock`` the term's group clock. Returns the running ``StreamingQuery``.
    """
    # No processing-time interval: Spark waits for one on the wall clock (a clock stepped back an hour stalls the
    # query an hour). A query with nothing to read sleeps the polling delay instead, a plain sleep; one with data
    # runs its batches back to back, as it did whenever a batch outlasted the interval.
    session.conf.set("spark.sql.streaming.pollingDelay", f"{max(1, int(config.trigger_interval_s * 1000))}ms")
    session.conf.set("spark.sql.streaming.numRecentProgressUpdates", "20")  # read each second: keep it short
    return (
        source_stream(session, config, layout, sample=False, marks=marks, checkpoint=checkpoint,
                      clock=clock)
        .writeStream.queryName(name)
        .foreachBatch(writer)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )
