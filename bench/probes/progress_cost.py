"""What a query's progress costs the leader to receive: PySpark's listener bridge against one JSON string.

`.venv/bin/python -m bench.probes.progress_cost [SECONDS]` (from the repository root, nothing
else running) runs one streaming query for SECONDS (default 60) in the career's session settings: a `rate`
source at 1 000 rows/s, deduplication within a watermark (so each progress carries a state operator and its
RocksDB metrics, as tenure's does) and a `noop` sink, a trigger every 200 ms. Every progress Spark reports is
converted both ways, one after the other, on Spark's listener thread:

- `field by field`: `QueryProgressEvent.fromJObject`, what PySpark's own listener bridge does (a py4j call per
  field of the progress and of each source, sink and state operator);
- `one JSON string`: `QueryProgressEvent.fromJson` over `jevent.progress().json()` (tenure's
  `career/spark/_progress.py`).

Each pair is checked to carry the same batch id, run id, durations, inputs and state figures (a mismatch fails
the run). It writes the milliseconds per conversion (p50, p90, max) to `results.json` and `results.md` in
`bench/results/issue-29-progress/` (`--render` writes `results.md` again from `results.json`): the figures
`docs/performance/delta-output.md` and `career/spark/_progress.py` quote for the one-JSON-string listener (issue 29).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from typing import Any

from bench.probes import results_folder

_HERE = results_folder("issue-29-progress")
_WAYS = ("field by field", "one JSON string")


def _figures(progress: Any) -> tuple[Any, ...]:
    return (progress.batchId, str(progress.runId), dict(progress.durationMs), progress.numInputRows,
            [(op.numRowsTotal, op.numRowsDroppedByWatermark, dict(op.customMetrics))
             for op in progress.stateOperators])


def _measure(seconds: float) -> dict[str, Any]:
    from pyspark.java_gateway import ensure_callback_server_started
    from pyspark.sql.streaming.listener import (
        JStreamingQueryListener,
        QueryProgressEvent,
        StreamingQueryListener,
    )

    from tenure.career.spark import build_session

    spark, _owned = build_session("local[2]", app_name="progress-cost", shuffle_partitions=2, extra_conf={})
    timings: dict[str, list[float]] = {way: [] for way in _WAYS}
    mismatches: list[str] = []

    class Both(JStreamingQueryListener):
        def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802 (Spark's name)
            started = time.perf_counter()
            walked = QueryProgressEvent.fromJObject(jevent).progress
            timings[_WAYS[0]].append(time.perf_counter() - started)
            started = time.perf_counter()
            parsed = QueryProgressEvent.fromJson({"progress": json.loads(jevent.progress().json())}).progress
            timings[_WAYS[1]].append(time.perf_counter() - started)
            if _figures(walked) != _figures(parsed):
                mismatches.append(f"{_figures(walked)} != {_figures(parsed)}")

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            pass

    listener = Listener()
    ensure_callback_server_started(spark.sparkContext._gateway)  # type: ignore[no-untyped-call]
    jvm: Any = spark.sparkContext._jvm
    listener._jlistenerobj = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(Both(listener))
    spark.streams.addListener(listener)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 1000).load()
             .withWatermark("timestamp", "1 minute").dropDuplicatesWithinWatermark(["value"])
             .writeStream.format("noop").option("checkpointLocation", tempfile.mkdtemp(prefix="progress-cost-"))
             .trigger(processingTime="200 milliseconds").start())
    time.sleep(seconds)
    query.stop()
    spark.streams.removeListener(listener)
    spark.stop()
    if mismatches:
        raise SystemExit(f"the two conversions differ: {mismatches[0]}")
    return {"command": f".venv/bin/python -m bench.probes.progress_cost {seconds:g}",
            "seconds": seconds, "ms": {way: [round(t * 1000, 2) for t in ts] for way, ts in timings.items()}}


def _render(results: dict[str, Any]) -> str:
    lines = ["# A progress's cost to the listener: field by field against one JSON string", "",
             f"`{results['command']}`: one streaming query (rate source, deduplication within a watermark, noop "
             "sink, a trigger every 200 ms) for "
             f"{results['seconds']:g} s; every progress converted both ways on Spark's listener thread, the same "
             "figures checked. Every timing is in `results.json`.", "",
             "| way | progresses | p50 ms | p90 ms | max ms |", "|---|---|---|---|---|"]
    for way in _WAYS:
        ms = sorted(results["ms"][way])
        lines.append(f"| {way} | {len(ms)} | {statistics.median(ms):.1f} | {ms[int(0.9 * (len(ms) - 1))]:.1f} | "
                     f"{ms[-1]:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if sys.argv[1:] == ["--render"]:
        results = json.loads((_HERE / "results.json").read_text())
    else:
        results = _measure(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0)
        (_HERE / "results.json").write_text(json.dumps(results) + "\n")
    (_HERE / "results.md").write_text(_render(results))


if __name__ == "__main__":
    main()
