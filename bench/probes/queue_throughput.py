"""A group's aggregate throughput by (queues, replicas), against one queue on one replica, side by side in one run.

`.venv/bin/python -m bench.probes.queue_throughput [--records N] [--fills F] [--configs NAME ...]` (from the
repository root) produces F backlogs of ``--records`` records each (default 60 000, 100 keys, files of 2 000
records, routed by key; one producer run cut in F, so each key's ``seq`` keeps rising) per number of queues,
then runs each configuration in the order given (the baseline first and last, by default, brackets the machine's
drift): a topology of R warm Spark replicas (``local[2]`` each) of a
group of N queues on a one-server ensemble, started, balanced (every replica ready, every queue led, the counts
within one), then the backlog hard-linked into the queues' ``landing/`` at once, and timed until every record is
committed (the replicas' ``batch_committed`` events), one backlog after the other. Configurations: ``1q1r`` (the
baseline), ``2q2r``, ``4q1r``, ``4q2r``, ``4q3r``, and on the embedded Spark standalone cluster of one worker of
two cores ``1q1r-cluster``, ``4q1r-cluster`` and ``4q2r-cluster`` (each replica's queries on its one application;
two leaders get a core each). Figures:
records/s from the backlog's arrival to the last commit (``records_per_s``) and its ratio to the baseline's, the CPU
each replica's tree used (driver, JVM, Python workers) and the machine's, the records per CPU second of the
replicas' trees (what a record cost, whatever else the machine ran) and its ratio to the baseline's, and the Delta
step of the batches (``delta_s``). Writes ``<name>.json``, ``<name>.md`` and ``<name>.png`` (``--name``, default
``throughput``) to ``bench/results/issue-51-scaling/``, which ``docs/performance/scaling.md`` quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import CpuMeter, markdown_table, percentiles
from bench._group import ReplicaCpu, balanced, group_topology, logged_commits
from bench._plots import pyplot, save
from bench.probes import results_folder, run_header
from tenure.career.queue import QueueLayout
from tenure.service.ops import produce

_OUT = results_folder("issue-51-scaling")
_PER_FILE = 2_000
_START_TIMEOUT_S = 600.0
_RUN_TIMEOUT_S = 900.0

#: name → (queues, replicas, Spark standalone workers)
CONFIGS: dict[str, tuple[int, int, int]] = {
    "1q1r": (1, 1, 0), "2q2r": (2, 2, 0), "4q1r": (4, 1, 0), "4q2r": (4, 2, 0), "4q3r": (4, 3, 0),
    "1q1r-cluster": (1, 1, 1), "4q1r-cluster": (4, 1, 1), "4q2r-cluster": (4, 2, 1),
}


def _backlogs(scratch: Path, records: int, fills: int, queues: int) -> list[tuple[Path, int]]:
    """``fills`` backlogs of about ``records`` records each for a topic of ``queues``, with the records they hold:
    one produced run cut in order (each queue's files in turn), so that each key's ``seq`` goes on rising from one
    backlog to the next (backlogs produced apart would start every key again at 1, and the second would be late)."""
    whole = scratch / f"source-{queues}"
    produce(whole, records=records * fills, keys=100, seed=4, queues=queues, progress=False,
            batch_records=_PER_FILE, batch_bytes=1 << 30, flush_interval_s=3600.0)
    folders = [scratch / f"source-{queues}-{fill}" for fill in range(fills)]
    for queue in range(queues):
        files = sorted(QueueLayout(whole, queue, queues).landing.iterdir())
        for fill, folder in enumerate(folders):
            landing = QueueLayout(folder, queue, queues).landing
            landing.mkdir(parents=True, exist_ok=True)
            for path in files[fill * len(files) // fills:(fill + 1) * len(files) // fills]:
                os.link(path, landing / path.name)
    return [(folder, sum(len(path.read_bytes().splitlines()) for path in folder.glob("**/landing/*")))
            for folder in folders]


def _fill(source: Path, data_root: Path, queues: int) -> int:
    """Hard-link every produced file into the topology's queues' ``landing/`` (no copy); the files linked."""
    linked = 0
    for queue in range(queues):
        src, dst = QueueLayout(source, queue, queues).landing, QueueLayout(data_root, queue, queues).landing
        dst.mkdir(parents=True, exist_ok=True)
        for path in sorted(src.iterdir()):
            os.link(path, dst / path.name)
            linked += 1
    return linked


def _run(name: str, work: Path, sources: list[tuple[Path, int]]) -> list[dict[str, Any]]:
    """Start the configuration's topology, wait until it is balanced, then for each of ``sources`` (a backlog and
    its records) in turn: link it in and time it until every record is committed."""
    queues, replicas, workers = CONFIGS[name]
    topology = group_topology(work, queues=queues, replicas=replicas, spark_workers=workers)
    runs = []
    try:
        topology.start()
        led: dict[str, tuple[int, ...]] = {}

        def settled() -> bool:
            led.update(balanced(topology, queues) or {})
            return bool(led)

        try:
            topology.wait_for(settled, _START_TIMEOUT_S, f"{name}: every replica ready and the queues balanced",
                              interval_s=0.5)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc} (replicas: {topology.statuses()})") from exc
        logs = [topology.logs / f"{r.replica_id}.log" for r in topology]
        for fill, (source, records) in enumerate(sources):
            meter, per_replica = CpuMeter(), ReplicaCpu(topology)
            meter.start(*(r.pid for r in topology if r.pid is not None))
            per_replica.start()
            filled_at = time.time()
            _fill(source, topology.data_root, queues)
            commits: list[dict[str, Any]] = []

            def done() -> bool:
                commits[:] = [c for log in logs for c in logged_commits(log) if c["at"] >= filled_at]  # noqa: B023
                if any(not r.alive for r in topology):
                    raise RuntimeError(f"{name}: a replica exited; see {topology.logs}")
                return sum(int(c["written"]) for c in commits) >= records  # noqa: B023

            topology.wait_for(done, _RUN_TIMEOUT_S, f"{name}: every record committed", interval_s=0.5)
            runs.append({"fill": fill + 1, **_figures(commits, filled_at, records), "cpu": meter.stop(),
                         "replica_cores": per_replica.stop()})
    finally:
        topology.stop()
    return [{"config": name, "queues": queues, "replicas": replicas, "spark_workers": workers, "led": led, **run}
            for run in runs]


def _figures(commits: list[dict[str, Any]], filled_at: float, records: int) -> dict[str, Any]:
    last = max(c["at"] for c in commits)
    first = min(c["at"] for c in commits)
    delta = percentiles([c["delta_s"] for c in commits if "delta_s" in c])
    batch = percentiles([c["batch_s"] for c in commits if "batch_s" in c])
    return {"records": sum(c["written"] for c in commits), "batches": len(commits),
            "records_per_s": round(records / (last - filled_at), 1),
            "first_commit_s": round(first - filled_at, 2), "wall_s": round(last - filled_at, 2),
            "delta_s": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in delta.items()},
            "batch_s": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in batch.items()}}


def _per_cpu_s(run: dict[str, Any]) -> float:
    """Records committed per CPU second of the replicas' process trees: what a record cost, whatever else the
    machine ran meanwhile. On the embedded cluster, per CPU second of the whole machine: the executors run under
    the cluster's worker, outside the replicas' trees."""
    if run["spark_workers"]:
        cpu_s = run["cpu"]["cores_busy"] * run["cpu"]["wall_s"]
    else:
        cpu_s = sum(c["all"] for c in run["replica_cores"].values()) * run["cpu"]["wall_s"]
    return round(run["records"] / cpu_s) if cpu_s else 0.0


def render(body: dict[str, Any], name: str = "throughput") -> None:
    """``<name>.md`` and ``<name>.png`` from ``<name>.json``'s ``body``."""
    runs = body["runs"]
    configs = body["configs"]
    baseline = [r["records_per_s"] for r in runs if r["config"] == "1q1r"]
    base = statistics.fmean(baseline) if baseline else None
    per_cpu = [_per_cpu_s(r) for r in runs if r["config"] == "1q1r"]
    base_cpu = statistics.fmean(per_cpu) if per_cpu else None
    for r in runs:
        r["ratio"] = round(r["records_per_s"] / base, 3) if base else None
        r["per_cpu_s"] = _per_cpu_s(r)
        r["per_cpu_s_ratio"] = round(r["per_cpu_s"] / base_cpu, 3) if base_cpu else None
    summary = []
    for config in configs:
        mine = [r for r in runs if r["config"] == config]
        if not mine:
            continue
        ratios = [r["ratio"] for r in mine if r["ratio"] is not None]
        summary.append({"config": config, "queues": mine[0]["queues"], "replicas": mine[0]["replicas"],
                        "runs": len(mine), "records/s median": round(statistics.median(r["records_per_s"]
                                                                                       for r in mine)),
                        "ratio to 1q1r": round(statistics.median(ratios), 3) if ratios else None,
                        "machine cores busy": round(statistics.median(r["cpu"]["cores_busy"] for r in mine), 2),
                        "replicas' cores": round(statistics.median(
                            sum(c["all"] for c in r["replica_cores"].values()) for r in mine), 2),
                        "rest of the machine, cores": round(statistics.median(
                            r["cpu"]["other_cpu_s"] / r["cpu"]["wall_s"] for r in mine), 2),
                        "records per CPU s (replicas'; machine's on a cluster)": round(
                            statistics.median(r["per_cpu_s"] for r in mine)),
                        "its ratio to 1q1r": statistics.median(r["per_cpu_s_ratio"] for r in mine)
                        if base_cpu else None,
                        "delta p50 s": statistics.median(r["delta_s"]["p50"] for r in mine if r["delta_s"]["p50"]),
                        "batch p50 s": statistics.median(r["batch_s"]["p50"] for r in mine if r["batch_s"]["p50"])})
    rows = [{"order": r["order"], "fill": r["fill"], "config": r["config"], "records/s": r["records_per_s"],
             "ratio": r["ratio"],
             "batches": r["batches"], "first commit s": r["first_commit_s"], "wall s": r["wall_s"],
             "led": " ".join(f"{k}:{','.join(map(str, v))}" for k, v in r["led"].items()),
             "zookeeper": round(r["cpu"]["zookeeper_cpu_s"] / r["cpu"]["wall_s"], 3),
             "other": round(r["cpu"]["other_cpu_s"] / r["cpu"]["wall_s"], 3),
             "all": r["cpu"]["cores_busy"],
             **{f"{replica} driver/jvm/workers": f"{c['driver']} / {c['jvm']} / {c['workers']}"
                for replica, c in r["replica_cores"].items()}} for r in runs]
    lines = ["# A group's aggregate throughput by queues and replicas (`python -m bench.probes.queue_throughput`)",
             "", f"`{body['command']}`; {body['records']:,} records over 100 keys in files of {_PER_FILE:,} "
             f"records, the backlog linked into landing/ at once; load average (1 min) before: "
             f"{body['load_before']}, after: {body['load_after']}; {body['machine']['cores']} cores.", "",
             *([body["note"], ""] if body.get("note") else []), markdown_table(summary), "",
             "Every run (cores: CPU seconds / wall seconds from the backlog's arrival "
             "to the last commit; per replica: its Python process, its JVM, its Python workers):", "",
             markdown_table(rows), ""]
    (_OUT / f"{name}.md").write_text("\n".join(lines))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for index, r in enumerate(summary):
        ax.bar(index - 0.2, r["ratio to 1q1r"] or 0, width=0.4, color="#4c9a6a",
               label="records/s" if index == 0 else None)
        ax.bar(index + 0.2, r["its ratio to 1q1r"] or 0, width=0.4, color="#8fb8de",
               label="records per CPU second (replicas'; the machine's on a cluster)" if index == 0 else None)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(summary)), [r["config"] for r in summary])
    ax.set_ylabel("÷ 1q1r's (mean of its runs)")
    ax.legend()
    ax.set_title("N queues on R replicas against one queue on one (2 cores, shared)")
    save(fig, _OUT / f"{name}.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.queue_throughput", description=__doc__)
    parser.add_argument("--records", type=int, default=60_000, help="records of each backlog")
    parser.add_argument("--fills", type=int, default=2, help="backlogs timed one after the other per topology")
    parser.add_argument("--configs", nargs="+", default=[*CONFIGS, "1q1r"], choices=list(CONFIGS),
                        help="the configurations in the order run (one may come again: the baseline first and last "
                             "brackets the machine's drift)")
    parser.add_argument("--keep-work", action="store_true", help="keep the scratch folder (the replicas' logs)")
    parser.add_argument("--render", action="store_true", help="write NAME.md and .png from NAME.json")
    parser.add_argument("--name", default="throughput", help="the results' file names (default throughput)")
    args = parser.parse_args(argv)
    if args.render:
        render(json.loads((_OUT / f"{args.name}.json").read_text()), args.name)
        return
    scratch = Path(tempfile.mkdtemp(prefix="tenure-scaling-"))
    body: dict[str, Any] = {**run_header("queue_throughput", argv), "records": args.records, "fills": args.fills,
                            "configs": list(dict.fromkeys(args.configs)), "runs": []}
    try:
        sources = {queues: _backlogs(scratch, args.records, args.fills, queues)
                   for queues in sorted({CONFIGS[name][0] for name in args.configs})}
        for index, name in enumerate(args.configs):
            print(f"queue_throughput: {index + 1}/{len(args.configs)} {name} …", file=sys.stderr, flush=True)
            runs = _run(name, scratch / f"{index}-{name}", sources[CONFIGS[name][0]])
            body["runs"] += [{"order": index + 1, **run} for run in runs]
            print(f"queue_throughput: {name}: {[r['records_per_s'] for r in runs]} records/s", file=sys.stderr,
                  flush=True)
            body["load_after"] = [round(x, 2) for x in os.getloadavg()]
            (_OUT / f"{args.name}.json").write_text(json.dumps(body, indent=2) + "\n")
    finally:
        if not args.keep_work:
            shutil.rmtree(scratch, ignore_errors=True)
    render(body, args.name)


if __name__ == "__main__":
    main()
