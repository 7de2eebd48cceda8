"""Does a follower keeping the leader's state ready slow the leader's steady state? State off against on.

`.venv/bin/python -m bench.probes.standby_state_cost [--rounds R] [--seconds S]` (from the repository root,
nothing else running) runs a group of 3 warm Spark replicas twice a round, the order alternating: ``off`` (the
default) and ``on`` (`--standby-state on`: each follower keeps a hard-linked copy of the newest checkpoint and the
committed marks and retry store, `career/spark/_prepared.py`). Each run measures the leader, with its two
followers sharing the 2 cores, the way two benchmarks do for one replica alone:

- **latency** (`bench/_latency.py`, its light load): 1 000 records/s in files of 1 000 for S seconds (default 90),
  after the dedup window's worth of ids at once; a queue file's landing to its batch visible in ``table/``, and
  Spark's trigger to the fenced commit;
- **throughput** (`bench/_throughput.py`): 1 000 000 records in files of 10 000 waiting in ``landing/``; the
  leader's steady records/s and the p50 of its batch in ``foreachBatch``.

Writes ``results.json`` (every run) and ``results.md`` (medians over runs, ``on`` over ``off``) to
``bench/results/issue-53-standby-cost/``, which ``docs/performance/standby-state.md`` quotes; ``--render`` writes
``results.md`` again from ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import _latency, _throughput
from bench._common import percentiles
from bench._paired import RECORDS
from bench.probes import results_folder, run_header
from tenure.career.queue import QueueLayout
from tenure.service.replica import ReplicaSpec

_REPLICAS = 3
_WAYS = ("off", "on")
_OUT = results_folder("issue-53-standby-cost")


def _run(way: str, work: Path, source: Path, seconds: int) -> dict[str, Any]:
    spec = ReplicaSpec(standby_state=way)
    (work / "latency").mkdir(parents=True)
    latency = _latency._run_tenure(work / "latency", int(1000 * seconds), "light", _latency._SKIP_BATCHES,
                                   replicas=_REPLICAS, spec=spec)
    (work / "throughput").mkdir()
    throughput = _throughput._run_tenure(work / "throughput", source, RECORDS, replicas=_REPLICAS, spec=spec)
    return {"latency_s": latency["latency_s"], "batch_s": latency["batch_s"], "latencies": latency["latencies"],
            "records_per_s": throughput["records_per_s"], "in_batch_s": throughput["in_batch_s"],
            "cpu": throughput["cpu"]}


def _measure(rounds: int, seconds: int, argv: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {**run_header("standby_state_cost", argv), "replicas": _REPLICAS,
                               "latency_seconds": seconds, "throughput_records": RECORDS, "runs": []}
    scratch = Path(tempfile.mkdtemp(prefix="tenure-standby-cost-"))
    try:
        source = scratch / "source"
        _throughput.produce_records(source, RECORDS)
        for index in range(rounds):
            for way in (_WAYS if index % 2 == 0 else _WAYS[::-1]):
                started = time.monotonic()
                run = _run(way, scratch / f"{way}-{index}", QueueLayout(source).landing, seconds)
                results["runs"].append({"way": way, "round": index + 1,
                                        "seconds": round(time.monotonic() - started, 1), **run})
                print(f"round {index + 1} {way}: latency p50 {run['latency_s']['p50']} s, "
                      f"p99 {run['latency_s']['p99']} s; {run['records_per_s']} records/s", file=sys.stderr)
                shutil.rmtree(scratch / f"{way}-{index}", ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def _render(results: dict[str, Any]) -> str:
    def pooled(way: str, stat: str) -> float:
        return float(percentiles([x for r in results["runs"] if r["way"] == way for x in r["latencies"]])[stat] or 0)

    def median(way: str, pick: Callable[[dict[str, Any]], float]) -> float:
        return float(statistics.median(pick(r) for r in results["runs"] if r["way"] == way))

    rows = {way: {"latency p50 s": pooled(way, "p50"), "latency p99 s": pooled(way, "p99"),
                  "batch p50 s": median(way, lambda r: r["batch_s"]["p50"]),
                  "records/s": median(way, lambda r: r["records_per_s"]),
                  "in foreachBatch p50 s": median(way, lambda r: r["in_batch_s"]["p50"])}
            for way in _WAYS}
    columns = list(rows["off"])
    lines = [
        "# A follower's state kept ready: the leader's steady state with it off and on",
        "",
        f"`{results['command']}` on {results['machine']['cores']} cores, load average "
        f"{results['load_before']} before the run. {results['replicas']} warm replicas; the "
        f"leader's figures. Latency: {results['latency_seconds']} s at 1 000 records/s a run, pooled over runs. "
        f"Throughput: {results['throughput_records']:,} records waiting; medians over runs. Every run is in "
        "`results.json`.",
        "",
        "| standby state | " + " | ".join(columns) + " | runs |",
        "|---|" + "---|" * (len(columns) + 1),
    ]
    for way in _WAYS:
        runs = sum(1 for r in results["runs"] if r["way"] == way)
        lines.append(f"| {way} | " + " | ".join(f"{rows[way][c]:,.3f}" if c != "records/s" else
                                                 f"{rows[way][c]:,.0f}" for c in columns) + f" | {runs} |")
    lines.append("| on / off | " + " | ".join(f"{rows['on'][c] / rows['off'][c]:.3f}" for c in columns) + " | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both ways (default 2)")
    parser.add_argument("--seconds", type=int, default=90, help="seconds of steady load per latency run")
    parser.add_argument("--render", action="store_true", help="write results.md again from results.json")
    args = parser.parse_args(argv)
    if args.render:
        results = json.loads((_OUT / "results.json").read_text())
    else:
        results = _measure(args.rounds, args.seconds, sys.argv[1:] if argv is None else argv)
        (_OUT / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (_OUT / "results.md").write_text(_render(results))
    print(_OUT / "results.md")


if __name__ == "__main__":
    main()
