"""Where a fresh JVM's first state load goes: a cold JIT, the changelog chain, the row count (issue 30).

A plain Spark query with tenure's state settings (RocksDB, changelog checkpointing, ``dropDuplicatesWithinWatermark``
over a 2-minute watermark, 2 shuffle partitions, ``local[2]``). ``build`` writes 50 files of 10 000 ids and runs
them one per batch into a checkpoint; every other mode copies that checkpoint, adds one file and prints Spark's
progress of the restarted query's first batch, in a new process and JVM.

Run: ``.venv/bin/python -m bench.probes.state_load {m60|m5} {build|cold|warm}``; environment: ``RESTARTS``
(restarts of the small warm-up query, default 2), ``TRACK`` (``trackTotalNumberOfRows``, default true). It made
``bench/results/issue-30-track/state-load.md``, which ``docs/performance/first-batch.md`` quotes (issue 30).
"""

import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

ROOT = Path("/tmp/loadx")
MAINTENANCE = {"m60": "60s", "m5": "5s"}


def session(policy: str) -> SparkSession:
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
             .config("spark.sql.streaming.stateStore.maintenanceInterval", MAINTENANCE[policy])
             .config("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", os.environ.get("TRACK", "true"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def write_file(folder: Path, n: int, tag: str, rows: int = 10000) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{tag}-{n:04d}.json"
    tmp.write_text("\n".join(json.dumps({"id": f"{tag}-{n}-{i}"}) for i in range(rows)) + "\n")
    tmp.rename(folder / f"{tag}-{n:04d}.json")


def run(spark: SparkSession, src: Path, ckpt: Path) -> list[Any]:
    query = (spark.readStream.schema("id string").option("maxFilesPerTrigger", 1).json(str(src))
             .withColumn("t", F.current_timestamp()).withWatermark("t", "2 minutes")
             .dropDuplicatesWithinWatermark(["id"])
             .writeStream.format("noop").option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    query.awaitTermination()
    return list(query.recentProgress)


def figures(progress: Any) -> dict[str, Any]:
    op = progress["stateOperators"][0] if progress.get("stateOperators") else {}
    metrics = op.get("customMetrics", {})
    return {"batch": progress["batchId"], "triggerExecution": progress["durationMs"].get("triggerExecution"),
            "addBatch": progress["durationMs"].get("addBatch"), "rows": op.get("numRowsTotal"),
            "load_ms": metrics.get("rocksdbLoadLatencyMs"), "replayed": metrics.get("rocksdbNumReplayChangelogFiles"),
            "replay_ms": metrics.get("rocksdbReplayChangeLogLatencyMs"),
            "files_copied": metrics.get("rocksdbFilesCopied"), "bytes_copied": metrics.get("rocksdbBytesCopied")}


def build(spark: SparkSession, base: Path) -> None:
    shutil.rmtree(base, ignore_errors=True)
    for n in range(50):
        write_file(base / "src", n, "big")
    started = time.time()
    later = [p for p in run(spark, base / "src", base / "ckpt") if p["batchId"] >= 10]

    def median(field: Any) -> float:
        return float(statistics.median(field(p) for p in later))

    print(json.dumps({"track": os.environ.get("TRACK"), "built_s": round(time.time() - started, 1),
                      "addBatch_p50": median(lambda p: p["durationMs"]["addBatch"]),
                      "update_ms_p50": median(lambda p: p["stateOperators"][0]["allUpdatesTimeMs"]),
                      "removal_ms_p50": median(lambda p: p["stateOperators"][0]["allRemovalsTimeMs"]),
                      "commit_ms_p50": median(lambda p: p["stateOperators"][0]["commitTimeMs"])}))


def restart(spark: SparkSession, policy: str, mode: str, base: Path) -> None:
    if mode == "warm":  # the warm-up's small query, then as many restarts of it (each loads its state)
        tiny = ROOT / f"tiny-{os.getpid()}"
        for n in range(3):
            write_file(tiny / "src", n, "tiny", 2000)
        run(spark, tiny / "src", tiny / "ckpt")
        for r in range(int(os.environ.get("RESTARTS", "2"))):
            write_file(tiny / "src", 10 + r, "tiny", 2000)
            print("warm-up restart", [figures(p) for p in run(spark, tiny / "src", tiny / "ckpt")
                                      if p.get("stateOperators")])
    work = ROOT / f"run-{policy}-{mode}-{os.getpid()}"
    shutil.copytree(base / "ckpt", work / "ckpt")
    write_file(base / "src", 1000 + os.getpid() % 1000, "new")
    started = time.time()
    progress = run(spark, base / "src", work / "ckpt")
    print(json.dumps({"policy": policy, "mode": mode, "restarts": os.environ.get("RESTARTS"),
                      "track": os.environ.get("TRACK"), "wall_s": round(time.time() - started, 2),
                      "batches": len(progress), **figures(progress[0])}))


def main() -> None:
    policy, mode = sys.argv[1], sys.argv[2]
    spark = session(policy)
    if mode == "build":
        build(spark, ROOT / policy)
    else:
        restart(spark, policy, mode, ROOT / policy)


if __name__ == "__main__":
    main()
