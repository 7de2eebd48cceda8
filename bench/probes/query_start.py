"""A new query's start, step by step, with the fork server on and off side by side in one process (issue 53).

`.venv/bin/python -m bench.probes.query_start [PAIRS [IDLE_S]]` (from the repository root, nothing else running)
produces a queue of 20 files, builds the career's session on `local[2]` and warms it with one query, then runs PAIRS
pairs of query starts, `--fork-server` on and off in turn (the order alternating by pair), each on a checkpoint of
its own over the same files, as a new term's query starts, each after IDLE_S seconds of nothing (default 0; past
60 s, Spark has stopped the pooled planner workers, as on a follower that has not led for a minute: with the
setting on, their daemon has the queue sources imported). Each start is timed in three steps:

- `define`: the source stream defined (`_query.source_stream`: the data source registered, `load()`, the
  classification's DataFrame);
- `start`: `writeStream … start()` until it returns (the query's thread started, its source created);
- `to first call`: from there to the first `foreachBatch` call (the first trigger: the source runner's start,
  the first listing and planning).

It writes `results.json` and `results.md` to `bench/results/issue-53-query-start/` (`…-idle/` when IDLE_S > 0):
the medians per step and way, and the ratio of on to off.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.probes import results_folder

_STEPS = ("define", "start", "to first call", "total")


def _one_start(spark: Any, config: Any, work: Path, name: str, fork_server_on: bool) -> dict[str, float]:
    from tenure.career.spark._layout import Layout
    from tenure.career.spark._query import source_stream
    from tenure.career.spark._session import use_driver_python

    use_driver_python(spark, config.spark_master, fork_server_on=fork_server_on)
    called = threading.Event()
    at: list[float] = []

    def first_call(_df: Any, _batch_id: int) -> None:
        if not at:
            at.append(time.monotonic())
        called.set()

    began = time.monotonic()
    stream = source_stream(spark, config, Layout(work), sample=False, marks=work / "marks",
                           checkpoint=work / "checkpoints" / name)
    defined = time.monotonic()
    query = (stream.writeStream.queryName(name).foreachBatch(first_call)
             .option("checkpointLocation", str(work / "checkpoints" / name)).trigger(processingTime="0 seconds")
             .start())
    started = time.monotonic()
    if not called.wait(120):
        raise TimeoutError(f"{name}: no batch within 120 s")
    query.stop()
    return {"define": defined - began, "start": started - defined, "to first call": at[0] - started,
            "total": at[0] - began}


def main() -> None:
    from tenure.career.spark import SparkCareerConfig, build_session
    from tenure.service.ops import produce

    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    idle_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    here = results_folder("issue-53-query-start-idle" if idle_s > 0 else "issue-53-query-start")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        produce(work, records=20_000, keys=100, seed=53, progress=False, batch_records=1_000,
                batch_bytes=1 << 30, flush_interval_s=3600.0)
        (work / "marks").mkdir()
        config = SparkCareerConfig(data_root=work)
        spark, _owned = build_session(config.spark_master, app_name="query-start",
                                      shuffle_partitions=config.shuffle_partitions, extra_conf=config.spark_conf)
        _one_start(spark, config, work, "warm_up", True)
        for pair in range(pairs):
            for on in ((True, False) if pair % 2 == 0 else (False, True)):
                time.sleep(idle_s)
                figures = _one_start(spark, config, work, f"q{pair}_{'on' if on else 'off'}", on)
                runs.append({"pair": pair + 1, "fork_server": "on" if on else "off",
                             **{k: round(v, 3) for k, v in figures.items()}})
                print(json.dumps(runs[-1]), file=sys.stderr)
        spark.stop()
    median = {way: {step: round(statistics.median(r[step] for r in runs if r["fork_server"] == way), 3)
                    for step in _STEPS} for way in ("on", "off")}
    (here / "results.json").write_text(json.dumps({"pairs": pairs, "idle_s": idle_s, "runs": runs,
                                                   "median": median}, indent=2) + "\n")
    lines = ["# A new query's start, step by step: the fork server on and off side by side", "",
             f"`python -m bench.probes.query_start {pairs} {idle_s:g}`: {pairs} pairs in one process, the order "
             f"alternating by pair, each start after {idle_s:g} s idle; medians in seconds.", "",
             "| step | fork server on | off | on / off |", "|---|---|---|---|"]
    for step in _STEPS:
        on, off = median["on"][step], median["off"][step]
        lines.append(f"| {step} | {on} | {off} | {on / off:.2f} |" if off else f"| {step} | {on} | {off} | — |")
    (here / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
