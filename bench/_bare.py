"""The bare query for the throughput baseline: no election, no fence, same pipeline and Spark settings.

Run: ``python -m bench._bare --data-root D --records N --out timings.json``; it consumes
``<data-root>/landing`` until ``N`` records are written, then writes one JSON object per batch.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tenure.career.spark._layout import Layout

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._bare")
    parser.add_argument("--data-root", type=Path, required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--ready-file", type=Path, default=None,
                        help="created once the query runs (the latency benchmark starts its producer then)")
    args = parser.parse_args(argv)

    from bench._query import session, start_query
    from tenure.career.spark import SparkCareerConfig

    config = SparkCareerConfig(data_root=args.data_root)  # the career's defaults: same flow control and trigger
    batches: list[dict[str, Any]] = []
    done = threading.Event()

    def on_batch(info: dict[str, Any]) -> None:
        batches.append(info)
        if sum(b["written"] for b in batches) >= args.records:
            done.set()

    started = time.time()
    spark = session(config, "bare")
    query = start_query(spark, config, checkpoint=args.data_root / "checkpoint-bare",
                        table=Layout(args.data_root).table, quarantine=Layout(args.data_root).quarantine,
                        on_batch=on_batch)
    if args.ready_file is not None:
        args.ready_file.touch()
    finished = done.wait(args.timeout_s)
    query.stop()
    args.out.write_text(json.dumps({"started_at": started, "finished": finished, "batches": batches}) + "\n")
    spark.stop()
    return 0 if finished else 1


if __name__ == "__main__":
    sys.exit(main())
