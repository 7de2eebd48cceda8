"""The Delta commit rate one table sustains with the leaders of 1, 4 and 8 queues committing into it at once.

`.venv/bin/python -m bench.probes.delta_commit_rate [--seconds S] [--rounds R]` (from the repository root) starts,
for each count N of queues in turn (the order reversed every other round), N processes, one per queue of a topic
of N, each committing batch after batch of one small part file (100 rows) into the same fresh Delta table as fast
as it can, through the product's own publish (``tenure.career.output.publish_batch``: its application id per
queue, delta-rs's commit retries and its own, the log entry fsynced), for S seconds (default 20). Nothing else
of a batch is done (no Spark, no ZooKeeper): this is the Delta step alone, at its limit. Figures per N: versions
per second for the table, each queue's batches per second, the commit's seconds (p50/p90/p99: ``delta_s`` of a
replica's ``batch_committed`` events measures the same step), the commits that found the table moved on since
they read it (another queue's version came first: delta-rs retried on the newer version), and the versions that
came in between. Writes ``delta.json``, ``delta.md`` and ``delta.png`` to ``bench/results/issue-51-scaling/``,
which ``docs/performance/scaling.md`` quotes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench._common import markdown_table, percentiles
from bench._plots import pyplot, save
from bench.probes import results_folder, run_header
from tenure.career.output import QueueOutput, publish_batch

_OUT = results_folder("issue-51-scaling")
_ROWS = 100
COUNTS = (1, 4, 8)


def _part(folder: Path, queue: QueueOutput, batch_id: int) -> str:
    """Write batch ``batch_id``'s one part file of ``queue`` (fsynced, as staging does) and return its name."""
    name = queue.part_name(batch_id, "part-00000.parquet")
    columns: dict[str, Any] = {"id": [f"{queue.queue}-{batch_id}-{i}" for i in range(_ROWS)],
                               "key": [f"k{i % 10}" for i in range(_ROWS)],
                               "_batch": pa.array([batch_id] * _ROWS, pa.int64()),
                               "_epoch": pa.array([1] * _ROWS, pa.int64())}
    if queue.column is not None:
        columns["_queue"] = pa.array([queue.column] * _ROWS, pa.int32())
    path = folder / name
    pq.write_table(pa.table(columns), path)
    with path.open("rb") as handle:
        os.fsync(handle.fileno())
    return name


def _newest(folder: Path) -> int:
    """The table's newest log version, from its log folder's listing."""
    return max(int(n[:20]) for n in os.listdir(folder / "_delta_log") if n.endswith(".json") and n[:20].isdigit())


def _leader(folder: str, queue: int, queues: int, seconds_: float, ready: Any, go: Any, out: Any) -> None:
    """One queue's leader: once every leader is ready, batch after batch for ``seconds_``, each timed; put its
    figures."""
    table, output = Path(folder), QueueOutput(queue, queues)
    seconds, moved, between, batch = [], 0, [], 1
    ready.put(queue)
    go.wait()
    until = time.monotonic() + seconds_
    while time.monotonic() < until:
        name = _part(table, output, batch)
        read = _newest(table)
        started = time.monotonic()
        version = publish_batch(table, batch, epoch=1, replica_id=f"r{queue}", parts=[name], queue=output)
        seconds.append(time.monotonic() - started)
        if version is not None and version > read + 1:
            moved += 1
            between.append(version - read - 1)
        batch += 1
    out.put({"queue": queue, "batches": batch - 1, "seconds": seconds, "moved": moved, "between": between})


def _measure(work: Path, queues: int, seconds: float) -> dict[str, Any]:
    table = work / f"table-{queues}"
    table.mkdir(parents=True)
    for queue in range(queues):  # batch 0 of every queue: the table exists before the race begins
        output = QueueOutput(queue, queues)
        publish_batch(table, 0, epoch=1, replica_id=f"r{queue}", parts=[_part(table, output, 0)], queue=output)
    first = _newest(table)
    context = multiprocessing.get_context("spawn")
    results, ready, go = context.Queue(), context.Queue(), context.Event()
    procs = [context.Process(target=_leader, args=(str(table), q, queues, seconds, ready, go, results))
             for q in range(queues)]
    for proc in procs:
        proc.start()
    for _ in procs:  # every process started (spawn, imports: seconds on a loaded machine) before the race
        ready.get(timeout=300)
    go.set()
    rows = [results.get(timeout=seconds + 120) for _ in procs]
    for proc in procs:
        proc.join(30)
    versions = _newest(table) - first
    commit = percentiles([s for r in rows for s in r["seconds"]])
    batches = sum(r["batches"] for r in rows)
    return {"queues": queues, "versions": versions, "batches": batches,
            "versions_per_s": round(versions / seconds, 1),
            "batches_per_s_per_queue": round(batches / queues / seconds, 1),
            "commit_s": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in commit.items()},
            "moved_fraction": round(sum(r["moved"] for r in rows) / batches, 3) if batches else None,
            "between_mean": round(statistics.fmean(b for r in rows for b in r["between"]), 2)
            if any(r["between"] for r in rows) else 0.0}


def render(body: dict[str, Any]) -> None:
    """``delta.md`` and ``delta.png`` from ``delta.json``'s ``body``."""
    runs = body["runs"]
    rows = [{"round": r["round"], "queues": r["queues"], "versions/s": r["versions_per_s"],
             "batches/s per queue": r["batches_per_s_per_queue"], "commit p50 s": r["commit_s"]["p50"],
             "p90 s": r["commit_s"]["p90"], "p99 s": r["commit_s"]["p99"],
             "found the table moved on": r["moved_fraction"], "versions in between (mean)": r["between_mean"]}
            for r in runs]
    base = statistics.fmean(r["versions_per_s"] for r in runs if r["queues"] == 1)
    summary = [{"queues": n, "versions/s median": statistics.median(r["versions_per_s"] for r in mine),
                "ratio to 1 queue": round(statistics.median(r["versions_per_s"] for r in mine) / base, 3),
                "commit p50 s median": statistics.median(r["commit_s"]["p50"] for r in mine)}
               for n in COUNTS if (mine := [r for r in runs if r["queues"] == n])]
    (_OUT / "delta.md").write_text("\n".join([
        "# The Delta commit rate of one table, 1, 4 and 8 queues committing (`python -m bench.probes."
        "delta_commit_rate`)", "", f"`{body['command']}`; {body['seconds']:g} s per run, one part file of {_ROWS} "
        f"rows per batch; load average (1 min) before: {body['load_before']}, after: {body.get('load_after')}; "
        f"{body['machine']['cores']} cores.", "", markdown_table(summary), "", markdown_table(rows), ""]))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for n in COUNTS:
        mine = [r["versions_per_s"] for r in runs if r["queues"] == n]
        ax.scatter([n] * len(mine), mine, color="#4c9a6a", s=18)
    ax.plot([s["queues"] for s in summary], [s["versions/s median"] for s in summary], color="#4c9a6a")
    ax.set_xlabel("queues committing into the table")
    ax.set_ylabel("Delta versions / s")
    ax.set_title("One Delta table's commit rate, leaders of N queues at once (2 cores)")
    ax.set_ylim(bottom=0)
    save(fig, _OUT / "delta.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.delta_commit_rate", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--render", action="store_true", help="write delta.md and delta.png from delta.json")
    args = parser.parse_args(argv)
    if args.render:
        render(json.loads((_OUT / "delta.json").read_text()))
        return
    body: dict[str, Any] = {**run_header("delta_commit_rate", argv), "seconds": args.seconds, "runs": []}
    with tempfile.TemporaryDirectory(prefix="tenure-delta-") as scratch:
        for index in range(args.rounds):
            for queues in COUNTS if index % 2 == 0 else tuple(reversed(COUNTS)):
                run = _measure(Path(scratch) / str(index), queues, args.seconds)
                body["runs"].append({"round": index + 1, **run})
                print(f"delta_commit_rate: {run}", file=sys.stderr, flush=True)
    body["load_after"] = [round(x, 2) for x in os.getloadavg()]
    (_OUT / "delta.json").write_text(json.dumps(body, indent=2) + "\n")
    render(body)


if __name__ == "__main__":
    main()
