"""Where tenure's longer read step comes from: its queue source and its stats action, apart from the replica.

`.venv/bin/python -m bench.probes.read_cost [ROUNDS]` (from the repository root, nothing else
running) produces 400 000 records in 40 files of 10 000 (the throughput bench's file size), then, ROUNDS times in a
rotating order, runs one process per way, each a streaming query (the career's session settings and flow
control: 5 files per trigger, `Trigger.AvailableNow`) over hard links of those files, whose `foreachBatch`
persists the batch and times its first action:

- `binaryFile + aggregation`: the bare query's read (Spark's file source in the JVM, the line splitter, the
  deduplication, then `bench/_query.py`'s aggregation by kind with the files collected);
- `queue source + aggregation`: tenure's queue source (`career/spark/_intake.py`) with the same action;
- `queue source + stats`: tenure's read step exactly (`BatchWriter._stats`: five narrow columns to the driver).

It reports, per way, the median over rounds of each run's read p50 (batches after the first) and of the query's
seconds, and writes `results.json` and `results.md` to `bench/results/issue-29-read/` (`--render` writes
`results.md` again from `results.json`): the figures `docs/performance/delta-output.md` quotes for the read step
(issue 29).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.probes import results_folder

_HERE = results_folder("issue-29-read")
_WAYS = ("binaryFile + aggregation", "queue source + aggregation", "queue source + stats")
_RECORDS, _PER_FILE = 400_000, 10_000


def _run_one(way: str, work: Path, source: Path) -> dict[str, Any]:
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)

    from tenure.career.spark import SparkCareerConfig, build_session
    from tenure.career.spark._batch import BatchWriter
    from tenure.career.spark._layout import Layout
    from tenure.career.spark._pipeline import KIND_FILE, classified_stream
    from tenure.career.spark._query import source_stream

    landing = work / "landing"
    landing.mkdir(parents=True)
    for file in sorted(source.iterdir()):
        (landing / file.name).hardlink_to(file)
    (work / "marks").mkdir()
    config = SparkCareerConfig(data_root=work)
    spark, _owned = build_session(config.spark_master, app_name="read-cost",
                                  shuffle_partitions=config.shuffle_partitions, extra_conf=config.spark_conf)
    if way.startswith("binaryFile"):
        stream = classified_stream(spark, source_format="binaryFile", path=str(landing),
                                   options={"maxFilesPerTrigger": str(config.max_files_per_trigger)}, schema=None,
                                   max_line_bytes=config.max_line_bytes, source_file_expr="", line_expr="")
    else:
        stream = source_stream(spark, config, Layout(work), sample=False, marks=work / "marks",
                               checkpoint=work / "checkpoint")
    reads: list[float] = []

    def write(df: DataFrame, _batch_id: int) -> None:
        df.persist()
        started = time.monotonic()
        if way.endswith("stats"):
            BatchWriter._stats(df)
        else:
            df.groupBy("kind").agg(F.count(F.lit(1)).alias("n"), F.collect_list(
                F.when(F.col("kind") == KIND_FILE, F.col("source_file"))).alias("files")).collect()
        reads.append(time.monotonic() - started)
        df.unpersist()

    started = time.monotonic()
    query = (stream.writeStream.foreachBatch(write).option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.monotonic() - started
    spark.stop()
    return {"query_s": round(seconds, 3), "batches": len(reads), "read_p50_s": round(statistics.median(reads[1:]), 3)}


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--one":
        print(json.dumps(_run_one(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))))
        return
    if sys.argv[1:] == ["--render"]:
        _render()
        return
    from tenure.service.ops import produce

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "source"
        produce(source, records=_RECORDS, keys=100, seed=4, progress=False, batch_records=_PER_FILE,
                batch_bytes=1 << 30, flush_interval_s=3600.0)
        for index in range(rounds):
            for way in _WAYS[index % 3:] + _WAYS[:index % 3]:
                work = Path(scratch) / "work"
                shutil.rmtree(work, ignore_errors=True)
                out = subprocess.run([sys.executable, "-m", "bench.probes.read_cost", "--one", way, str(work),
                                      str(source / "landing")], capture_output=True, text=True, check=True)
                runs.append({"way": way, "round": index + 1, **json.loads(out.stdout.strip().splitlines()[-1])})
    summary = {way: {"read_p50_s": statistics.median(r["read_p50_s"] for r in runs if r["way"] == way),
                     "query_s": statistics.median(r["query_s"] for r in runs if r["way"] == way)} for way in _WAYS}
    (_HERE / "results.json").write_text(json.dumps({"rounds": rounds, "records": _RECORDS, "runs": runs,
                                                    "median": summary}, indent=2) + "\n")
    _render()


def _render() -> None:
    results = json.loads((_HERE / "results.json").read_text())
    runs, rounds = results["runs"], results["rounds"]
    lines = [
        "# Tenure's read step apart from the replica: its queue source and its stats action",
        "",
        f"`.venv/bin/python -m bench.probes.read_cost {rounds}`: {_RECORDS:,} records in files of "
        f"{_PER_FILE:,}, 5 files per trigger; one process per way and round, the order rotating each round. "
        "Read: the batch's first action (source, line splitter, deduplication and the action), p50 over the "
        "batches after the first; query: the whole `Trigger.AvailableNow` query.",
        "",
        "| way | read p50 s (median of rounds) | query s (median of rounds) | runs' read p50 s |",
        "|---|---|---|---|",
    ]
    for way in _WAYS:
        median = {k: round(v, 3) for k, v in results["median"][way].items()}
        each = ", ".join(str(r["read_p50_s"]) for r in runs if r["way"] == way)
        lines.append(f"| {way} | {median['read_p50_s']} | {median['query_s']} | {each} |")
    (_HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
