"""The streaming query: the source a term reads (or the warm-up's sample) and the query that feeds a batch writer.

Only queue files (``*.jsonl``) and retry ticks are read from a directory source; flow control is files or bytes
per trigger, never both (Spark refuses both at once).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from career.queue import QUEUE_SUFFIX, TICK_SUFFIX
from career.spark._config import SparkCareerConfig
from career.spark._pipeline import BINARY_FILE, classified_stream
from career.spark._storage import Layout

__all__ = ["checkpoint_watermark_ms", "query_name", "source_stream", "start_query"]


def checkpoint_watermark_ms(checkpoint: Path) -> int:
    """The event-time watermark a query resuming ``checkpoint`` starts from (0 for a new one): the larger of the
    newest offset-log entry's ``batchWatermarkMs`` and the newest commit-log entry's ``nextBatchWatermarkMs``
    (each file: a version line, then one JSON line)."""
    found = 0
    for folder, field in (("offsets", "batchWatermarkMs"), ("commits", "nextBatchWatermarkMs")):
        try:
            newest = max((p for p in (checkpoint / folder).iterdir() if p.name.isdigit()), key=lambda p: int(p.name),
                         default=None)
            if newest is not None:
                found = max(found, int(json.loads(newest.read_text().splitlines()[1]).get(field, 0)))
        except (FileNotFoundError, IndexError, ValueError):
            continue  # a new checkpoint: no watermark yet
    return found


def query_name(replica_id: str, epoch: int, restarts: int) -> str:
    """The query's name in Spark (``tenure_<replica>_<epoch>_<restarts>``, non-word characters as ``_``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", f"tenure_{replica_id}_{epoch}_{restarts}")


def source_stream(session: SparkSession, config: SparkCareerConfig, layout: Layout, *, sample: bool,
                  watermark_ms: int = 0) -> DataFrame:
    """The classified, deduplicated stream of the configured source.

    Args:
        session: the career's SparkSession.
        config: the career's settings (source, flow control, line limit, dedup window).
        layout: the data root; its ``landing/`` is the default directory source.
        sample: read ``layout.landing`` as files whatever the configured source (the warm-up's scratch sample),
            without the configured source options.
        watermark_ms: the watermark of the checkpoint the query resumes (:func:`checkpoint_watermark_ms`).
    """
    if sample or config.file_source:
        options: dict[str, str] = {"pathGlobFilter": f"*.{{{QUEUE_SUFFIX[1:]},{TICK_SUFFIX[1:]}}}"}
        if config.max_bytes_per_trigger is not None:
            options["maxBytesPerTrigger"] = str(config.max_bytes_per_trigger)
        elif config.max_files_per_trigger is not None:
            options["maxFilesPerTrigger"] = str(config.max_files_per_trigger)
        if not sample:
            options.update(config.source_options)
        path = str(layout.landing) if sample or config.source_path is None else config.source_path
        return classified_stream(session, source_format=BINARY_FILE, path=path, options=options,
                                 schema=None, max_line_bytes=config.max_line_bytes,
                                 dedup_window=config.dedup_window, source_file_expr="", line_expr="",
                                 watermark_ms=watermark_ms)
    return classified_stream(session, source_format=config.source_format, path=config.source_path,
                             options=config.source_options, schema=config.source_schema,
                             max_line_bytes=config.max_line_bytes, dedup_window=config.dedup_window,
                             source_file_expr=config.source_file_expr, line_expr=config.line_expr,
                             watermark_ms=watermark_ms)


def start_query(session: SparkSession, config: SparkCareerConfig, layout: Layout,
                writer: Callable[[DataFrame, int], None], *, name: str, checkpoint: Path) -> Any:
    """Start a term's query: the configured source into ``writer`` on a processing-time trigger.

    ``name`` comes from :func:`query_name`; ``checkpoint`` is the term's own. Returns the running
    ``StreamingQuery``.
    """
    return (
        source_stream(session, config, layout, sample=False, watermark_ms=checkpoint_watermark_ms(checkpoint))
        .writeStream.queryName(name)
        .foreachBatch(writer)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{int(config.trigger_interval_s * 1000)} milliseconds")
        .start()
    )
