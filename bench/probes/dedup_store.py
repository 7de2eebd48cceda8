"""What a dedup store of tenure's own would cost, beside Spark's state store (issue 53's way forward).

A new leader's first batch loads the dedup state (RocksDB) the query keeps in its checkpoint: 1.3–2.8 s for a window
of 450 000–590 000 ids, the step that keeps issue 53's handover targets out of reach. Spark ties a loaded store to
one query run, so a follower cannot load it ahead. A store of tenure's own, which a follower keeps loaded as it
keeps the per-key marks, would take the load off the new leader's path; this probe measures what it would cost
where it runs, side by side in one JVM, on the same files (batches of ``BATCH`` ids, 2 % of them repeats of ids of
earlier batches, as a producer's retries):

- ``spark``: tenure's operator today, ``dropDuplicatesWithinWatermark`` over a 2-minute watermark on RocksDB with
  changelog checkpointing (the career's settings, ``career/spark/_session.py``).
- ``own``: a stateless query; each batch collects its distinct ids to the driver, looks them up in a Python dict
  of the ids seen (the store), drops the repeats with a broadcast anti-join, and writes the batch's new ids as a
  Parquet file (what a leader would stage, and a follower read to keep its copy of the store caught up).

For each way: the steady batch (Spark's ``triggerExecution``, p50 of the last 20 of ``BATCHES`` batches, building
a store of ``BATCHES × BATCH`` ids), then ``RESTARTS`` times the first batch of a new query on a copy of the
checkpoint with new files (a new leader's first batch; for ``own`` its store is the follower's, already
loaded). For ``own`` also: a follower's catch-up after one batch (read the batch's Parquet, add its ids), a cold
load of the whole store from its Parquet files, and the store's memory (``tracemalloc``).

Run: ``.venv/bin/python -m bench.probes.dedup_store [BATCHES]`` (default 86: 602 000 ids) from the repository
root, nothing else running. Writes ``results.json`` and ``results.md`` to ``bench/results/issue-53-dedup-store/``,
which ``docs/performance/standby-state.md`` quotes.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

from bench.probes import results_folder, run_header

BATCH = 7_000
"""Ids a batch: the handover benchmark's 5 000 records/s over a 1.4-s batch."""
REPEATS = 0.02
RESTARTS = 3
STEADY = 20
_OUT = results_folder("issue-53-dedup-store")


def _session() -> SparkSession:
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
             .config("spark.sql.streaming.numRecentProgressUpdates", "1000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _write(folder: Path, index: int) -> None:
    """Batch ``index``'s file: ``BATCH`` ids, the last ``REPEATS`` of them ids of earlier batches."""
    folder.mkdir(parents=True, exist_ok=True)
    fresh = int(BATCH * (1 - REPEATS)) if index else BATCH
    ids = [f"r{index}-{i}" for i in range(fresh)]
    ids += [f"r{(index * 7 + i) % index}-{(index * 31 + i) % fresh}" for i in range(BATCH - fresh)] if index else []
    hidden = folder / f".b{index:05d}.json"
    hidden.write_text("".join(json.dumps({"id": record}) + "\n" for record in ids))
    hidden.rename(folder / f"b{index:05d}.json")


class _OwnStore:
    """The ``own`` way's store: every id seen, by the batch that first wrote it; each batch's new ids in a file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ids: dict[str, int] = {}
        self.dropped = 0
        folder.mkdir(parents=True, exist_ok=True)

    def batch(self, df: DataFrame, batch_id: int) -> None:
        df.persist()
        try:
            seen = df.select("id").distinct().toArrow().column("id").to_pylist()
            repeats = [i for i in seen if i in self.ids]
            fresh = df.dropDuplicates(["id"])
            if repeats:
                fresh = fresh.join(F.broadcast(df.sparkSession.createDataFrame([(i,) for i in repeats], "id string")),
                                   "id", "left_anti")
            fresh.write.format("noop").mode("overwrite").save()
            new = [i for i in seen if i not in self.ids]
            pq.write_table(pa.table({"id": new}), self.folder / f"batch-{batch_id:06d}.parquet")
            self.ids.update(dict.fromkeys(new, batch_id))
            self.dropped += len(repeats)
        finally:
            df.unpersist()


def _catch_up(ids: dict[str, int], path: Path) -> None:
    """A follower's step after a commit: add the committed batch's new ids (its file, ``path``) to its store."""
    batch_id = int(path.stem.split("-")[1])
    ids.update(dict.fromkeys(pq.read_table(path).column("id").to_pylist(), batch_id))


def _spark_way(df: DataFrame) -> DataFrame:
    return (df.withColumn("t", F.current_timestamp()).withWatermark("t", "2 minutes")
            .dropDuplicatesWithinWatermark(["id"]))


def _run(spark: SparkSession, way: str, source: Path, checkpoint: Path, store: _OwnStore | None) -> list[Any]:
    stream = spark.readStream.schema("id string").option("maxFilesPerTrigger", 1).json(str(source))
    if way == "spark":
        writer = _spark_way(stream).writeStream.format("noop")
    else:
        assert store is not None
        writer = stream.writeStream.foreachBatch(store.batch)
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination()
    return [p for p in query.recentProgress if p["numInputRows"]]


def _trigger_s(progress: dict[str, Any]) -> float:
    return round(float(progress["durationMs"]["triggerExecution"]) / 1000, 3)


def _measure(batches: int) -> dict[str, Any]:
    spark = _session()
    scratch = Path(tempfile.mkdtemp(prefix="tenure-dedup-store-"))
    results: dict[str, Any] = {**run_header("dedup_store", sys.argv[1:]), "batch": BATCH, "batches": batches,
                               "repeats": REPEATS, "ways": {}}
    try:
        source = scratch / "source"
        for index in range(batches):
            _write(source, index)
        own = _OwnStore(scratch / "own-store")
        stores: dict[str, _OwnStore | None] = {"spark": None, "own": own}
        for way, store in stores.items():
            progress = _run(spark, way, source, scratch / f"{way}-checkpoint", store)
            state = len(store.ids) if store is not None else progress[-1]["stateOperators"][0]["numRowsTotal"]
            results["ways"][way] = {"steady_s": [_trigger_s(p) for p in progress[-STEADY:]], "store_ids": state,
                                    "first_s": []}
            print(f"{way}: built, {state} ids", file=sys.stderr)
        for restart in range(RESTARTS):
            # Each way's new query runs on a fresh copy of its built checkpoint, which lists the files read by
            # their paths: the new files go to the same folder, and the first batch reads the oldest of them.
            _write(source, batches + restart)
            for way in (("spark", "own") if restart % 2 == 0 else ("own", "spark")):
                checkpoint = scratch / f"{way}-checkpoint-{restart}"
                shutil.copytree(scratch / f"{way}-checkpoint", checkpoint)
                store = None
                if way == "own":  # the follower's copy of the store, caught up: not the leader's own dict
                    store = _OwnStore(scratch / f"own-store-{restart}")
                    store.ids = dict(own.ids)
                first = _run(spark, way, source, checkpoint, store)
                results["ways"][way]["first_s"].append(_trigger_s(first[0]))
                if way == "spark":
                    metrics = first[0]["stateOperators"][0].get("customMetrics", {})
                    results["ways"][way].setdefault("first_load_ms", []).append(metrics.get("rocksdbLoadLatencyMs"))
                print(f"{way}: restart {restart + 1}: first batch {_trigger_s(first[0])} s", file=sys.stderr)
        files = sorted(own.folder.iterdir())
        results["own"] = {"catch_up_s": _timed(lambda: _catch_up({}, files[-1]), 20),
                          "cold_load_s": _timed(lambda: _cold_load(files), 3),
                          "store_mib": _store_mib(files),
                          "repeats_dropped": own.dropped}
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def _cold_load(files: list[Path]) -> None:
    ids: dict[str, int] = {}
    for path in files:
        _catch_up(ids, path)


def _timed(action: Callable[[], None], times: int) -> float:
    """The median seconds of ``times`` runs of ``action``."""
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return round(statistics.median(seconds), 4)


def _store_mib(files: list[Path]) -> float:
    tracemalloc.start()
    ids: dict[str, int] = {}
    for path in files:
        _catch_up(ids, path)
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return round(size / 2**20, 1)


def _render(results: dict[str, Any]) -> str:
    ways = results["ways"]
    steady = {w: statistics.median(ways[w]["steady_s"]) for w in ways}
    first = {w: statistics.median(ways[w]["first_s"]) for w in ways}
    own = results["own"]
    lines = [
        "# A dedup store of tenure's own beside Spark's state store",
        "",
        f"`{results['command']}`, load average {results['load_before']} before the run: {results['batches']} "
        f"batches of {results['batch']:,} ids ({results['repeats']:.0%} repeats of earlier batches' ids) into a "
        "store, then a new query's first batch on a copy of the checkpoint with one new file, "
        f"{len(ways['spark']['first_s'])} times each, alternating. Seconds are Spark's `triggerExecution`.",
        "",
        "| way | ids in the store | steady batch p50 s | new query's first batch (median) s | first batches s |",
        "|---|---|---|---|---|",
    ]
    for way in ways:
        lines.append(f"| {way} | {ways[way]['store_ids']:,} | {steady[way]:.3f} | {first[way]:.3f} | "
                     + ", ".join(f"{x:.3f}" for x in ways[way]["first_s"]) + " |")
    lines += [
        f"| own / spark | | {steady['own'] / steady['spark']:.2f} | {first['own'] / first['spark']:.2f} | |",
        "",
        f"Spark's first batches loaded RocksDB in {ways['spark'].get('first_load_ms')} ms (`rocksdbLoadLatencyMs`). "
        f"The own store: a follower's catch-up after one batch {own['catch_up_s'] * 1000:.1f} ms (median of 20); a "
        f"cold load of the whole store from its {results['batches']} files {own['cold_load_s']:.2f} s (median of 3); "
        f"its memory in Python {own['store_mib']} MiB; {own['repeats_dropped']:,} repeats dropped.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    if sys.argv[1:] == ["--render"]:
        results = json.loads((_OUT / "results.json").read_text())
    else:
        results = _measure(int(sys.argv[1]) if len(sys.argv) > 1 else 86)
        (_OUT / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (_OUT / "results.md").write_text(_render(results))
    print(_OUT / "results.md")


if __name__ == "__main__":
    main()
