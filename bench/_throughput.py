"""Throughput: records/s through tenure's pipeline on the leader vs the same query run bare, alternating; a plot
of every run's per-batch rate over time."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench._cluster import TenureCluster
from bench._common import BenchContext, CpuMeter, Result, Target, percentiles
from bench._plots import add_plot, rate_plot
from tenure.career.queue import QueueLayout
from tenure.career.spark import BATCH_COMMITTED
from tenure.service.ops import produce
from tenure.service.replica import ReplicaSpec

__all__ = ["produce_records", "run_throughput"]

_SKIP_BATCHES = 3  # warm-up batches left out of the steady state (class loading, JIT, first state store)
_RECORDS_PER_FILE = 10_000  # 5 files per trigger (the career's default) → 50 000 records per batch
_TIMEOUT_S = 900.0


def _steady_rate(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """records/s from the end of batch ``_SKIP_BATCHES`` to the end of the last batch, plus per-batch figures."""
    batches = sorted(batches, key=lambda b: b["batch_id"])
    data = [b for b in batches if b["written"] > 0]
    ids = [b["batch_id"] for b in batches]
    contiguous = ids == list(range(ids[0], ids[0] + len(ids))) if ids else False
    if len(data) <= _SKIP_BATCHES + 1:
        return {"records_per_s": None, "batches": len(data), "contiguous": contiguous}
    steady = data[_SKIP_BATCHES:]
    span = steady[-1]["committed_at"] - data[_SKIP_BATCHES - 1]["committed_at"]
    records = sum(b["written"] for b in steady)
    intervals = [b["committed_at"] - a["committed_at"] for a, b in zip(data[_SKIP_BATCHES - 1:], steady, strict=False)]
    in_batch = [b["committed_at"] - b["started_at"] for b in steady if "started_at" in b]
    read = [b["read_at"] - b["started_at"] for b in steady if "read_at" in b]
    return {"records_per_s": round(records / span, 1) if span > 0 else None, "steady_records": records,
            **({"in_batch_s": {k: (round(v, 3) if isinstance(v, float) else v)
                               for k, v in percentiles(in_batch).items()}} if in_batch else {}),
            **({"read_s": {k: (round(v, 3) if isinstance(v, float) else v)
                           for k, v in percentiles(read).items()}} if read else {}),
            "steady_batches": len(steady), "batches": len(data), "contiguous": contiguous,
            "batch_interval_s": {k: (round(v, 3) if isinstance(v, float) else v)
                                 for k, v in percentiles(intervals).items()},
            "total_records": sum(b["written"] for b in data)}


def _rate_over_time(batches: list[dict[str, Any]]) -> list[list[float]]:
    """``[seconds since the first commit, records/s]`` per batch after the first: its records over the time since
    the previous batch's commit (the first has no previous one)."""
    batches = sorted(batches, key=lambda b: b["committed_at"])
    return [[round(b["committed_at"] - batches[0]["committed_at"], 3),
             round(b["written"] / (b["committed_at"] - a["committed_at"]), 1)]
            for a, b in pairwise(batches) if b["committed_at"] > a["committed_at"]]


def _fill_landing(source: Path, data_root: Path) -> None:
    """Hard-link the produced files into a fresh landing folder (same names and mtimes, no copy)."""
    landing = QueueLayout(data_root).landing
    landing.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):
        os.link(path, landing / path.name)


def _run_bare(work: Path, source: Path, records: int) -> dict[str, Any]:
    data_root = work / "data"
    _fill_landing(source, data_root)
    out = work / "batches.json"
    meter = CpuMeter()
    with (work / "bare.log").open("ab") as log:
        bare = subprocess.Popen([sys.executable, "-m", "bench._bare", "--data-root", str(data_root), "--records",
                                 str(records), "--out", str(out), "--timeout-s", f"{_TIMEOUT_S:g}"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            meter.start(bare.pid)
            deadline = time.monotonic() + _TIMEOUT_S + 120
            while not out.exists() and bare.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            cpu = meter.stop()  # the query has stopped; its JVM is still there to be counted
            if bare.wait(timeout=max(deadline - time.monotonic(), 1.0)) != 0:
                raise RuntimeError(f"the bare query failed (exit {bare.returncode}); see {work / 'bare.log'}")
        finally:
            if bare.poll() is None:
                bare.kill()
                bare.wait()
    body = json.loads(out.read_text())
    return {**_steady_rate(body["batches"]), "rate_over_time": _rate_over_time(body["batches"]), "cpu": cpu}


def _run_tenure(work: Path, source: Path, records: int, *, standby: str = "warm",
                spec: ReplicaSpec | None = None, replicas: int = 1) -> dict[str, Any]:
    """``replicas`` replicas of `tenure run --career spark`, with ``spec``'s settings added: the leader's figures.

    With one replica (the default) nothing competes with the leader for the 2 cores; with more, its followers
    (warm, idle but for what they keep ready) share them, as in a group's steady state."""
    cluster = TenureCluster(work, standby=standby, rate=0.0, replicas=replicas, spec=spec)
    cluster.start()
    try:
        # Linked once the replicas run: their warm-up (a minute or more) dwarfs the milliseconds this takes.
        meter = CpuMeter()
        meter.start(*(pid for pid in map(cluster.pid, cluster.replica_ids()) if pid is not None))
        _fill_landing(source, cluster.data_root)
        logs = [cluster.topology.logs / f"{replica}.log" for replica in cluster.replica_ids()]
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            log, batches = _leader_batches(logs)
            written = sum(b["written"] for b in batches)
            if written >= records:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"tenure wrote {written} of {records} records in {_TIMEOUT_S:g} s; "
                                   f"see {cluster.topology.logs}")
            if any(cluster.pid(replica) is None for replica in cluster.replica_ids()):
                raise RuntimeError(f"a tenure replica exited; see {cluster.topology.logs}")
            time.sleep(0.5)
        cpu = meter.stop()
    finally:
        cluster.stop()
    steps = _batch_steps(log)
    return {**_steady_rate(batches), "rate_over_time": _rate_over_time(batches), "steps_s": steps,
            "durable_s": steps.get("durable_s", {}), "in_batch_s": steps.get("in_batch_s", {}), "cpu": cpu}


def _leader_batches(logs: list[Path]) -> tuple[Path, list[dict[str, Any]]]:
    """The log of the one replica that committed batches, and its batches (the first log and none before any
    commit); a run in which two replicas committed measured a leadership change, not a steady state."""
    led = [(log, batches) for log in logs if log.exists() for batches in [_logged_batches(log)] if batches]
    if len(led) > 1:
        raise RuntimeError(f"the leadership changed during the run ({', '.join(log.stem for log, _ in led)} "
                           "committed): its rate is not a steady one")
    return led[0] if led else (logs[0], [])


_DISTURBED_CORES = 0.1
"""A run during which processes outside it (``other`` in its CPU figures) used more cores than this on average
competed for the 2 cores: its rate says more about them than about the query."""


def _disturbed(run: dict[str, Any]) -> bool:
    cpu = run.get("cpu") or {}
    return bool(cpu.get("wall_s")) and cpu.get("other_cpu_s", 0.0) / cpu["wall_s"] > _DISTURBED_CORES


def _logged_batches(log: Path) -> list[dict[str, Any]]:
    """The leader's committed batches from its ``batch_committed`` events (the warm-up's left out): id, records
    written, and when it ended and began (the event's time, and that less its ``batch_s``).

    Read from the log rather than by polling the commit record, so the measurement adds no load of its own to
    ZooKeeper or to the 2 cores (a poll every 20 ms cost this process about 0.03 cores, plus ZooKeeper's answers)."""
    batches = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{BATCH_COMMITTED}"' in line:
            with contextlib.suppress(ValueError, KeyError):
                event = json.loads(line)
                if event.get("warmup") or "written" not in event:
                    continue
                ended = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
                batches.append({"batch_id": int(event["batch"]), "committed_at": ended,
                                "started_at": ended - float(event["batch_s"]), "written": int(event["written"])})
    return batches


_STEPS = ("durable_s", "read_s", "stage_s", "commit_s", "publish_s", "delta_s")
"""The timed steps of a tenure batch, in order (``batch_committed``): the checkpoint fsyncs, reading and
counting the batch, staging every output (fsynced), the fenced ZooKeeper commit, publishing (renames), and the
Delta commits that make the batch one version of each output table."""


def _batch_steps(log: Path) -> dict[str, dict[str, Any]]:
    """p50/p99 of each step's seconds over the replica's steady batches (``batch_committed`` events after the
    first ``_SKIP_BATCHES`` with data), and of the whole batch (``in_batch_s``: its time in ``foreachBatch``;
    the steps leave out reading the commit record, marking files consumed and archiving them)."""
    events = [event for line in log.read_text(errors="replace").splitlines()
              if line.startswith("{") and f'"{BATCH_COMMITTED}"' in line
              for event in [json.loads(line)] if event.get("written")][_SKIP_BATCHES:]
    seconds = {step: [float(e[step]) for e in events if step in e] for step in _STEPS}
    seconds["in_batch_s"] = [float(e["batch_s"]) for e in events if "batch_s" in e]
    return {step: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in percentiles(values).items()}
            for step, values in seconds.items() if values}


def produce_records(source: Path, records: int, per_file: int = _RECORDS_PER_FILE) -> int:
    """Write the bench's input under ``source`` and return its bytes: ``records`` over 100 keys, seed 4, in files
    of exactly ``per_file`` records (no size or time limit cuts them short)."""
    return produce(source, records=records, keys=100, seed=4, progress=False,
                   batch_records=per_file, batch_bytes=1 << 30, flush_interval_s=3600.0).bytes


def run_throughput(ctx: BenchContext) -> Result:
    """Alternate bare and tenure runs over the same produced records; compare steady-state records/s."""
    records = 60_000 if ctx.quick else 1_000_000
    per_file = 2_000 if ctx.quick else _RECORDS_PER_FILE  # quick: still enough batches for a steady state
    rounds = ctx.rounds_or(2)
    result = Result(
        name="throughput", title="Throughput: tenure's leader vs the bare query, and the ratio",
        command="python -m bench.run --only throughput",
        params={"records": records, "keys": 100, "records_per_file": per_file, "rounds": rounds,
                "steady_state": f"batches after the first {_SKIP_BATCHES} with data",
                "spark": "career defaults: local[2], 2 shuffle partitions, UI off, RocksDB state, "
                         "5 files per trigger, the default trigger"},
    )
    source = ctx.work / "source"
    result.params["bytes"] = produce_records(source, records, per_file)
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    for index in range(rounds):
        if ctx.budget_s is not None and index > 0 and time.monotonic() - started > ctx.budget_s:
            result.notes.append(f"Only {index} of {rounds} rounds within the time budget (--budget-min).")
            break
        order = ["bare", "tenure"] if index % 2 == 0 else ["tenure", "bare"]
        for kind in order:
            work = ctx.work / f"{kind}-{index}"
            work.mkdir(parents=True)
            figures = (_run_bare if kind == "bare" else _run_tenure)(work, QueueLayout(source).landing, records)
            runs.append({"run": kind, "round": index + 1, **figures})
    result.table = [{"run": r["run"], "round": r["round"], "records/s": r["records_per_s"],
                     "steady batches": r.get("steady_batches"),
                     "batch interval p50 s": (r.get("batch_interval_s") or {}).get("p50"),
                     "in foreachBatch p50 s": (r.get("in_batch_s") or {}).get("p50"),
                     "read p50 s": (r.get("read_s") or r.get("steps_s", {}).get("read_s") or {}).get("p50"),
                     "checkpoint fsyncs p50 / p99 s": (f"{r['durable_s'].get('p50')} / {r['durable_s'].get('p99')}"
                                                       if r.get("durable_s") else "")} for r in runs]

    result.tables["CPU during each run, in cores (CPU seconds / wall seconds), by process"] = [
        {"run": r["run"], "round": r["round"], "wall s": r["cpu"]["wall_s"],
         **{name: round(r["cpu"][f"{name}_cpu_s"] / r["cpu"]["wall_s"], 3)
            for name in ("measured", "driver", "jvm", "workers", "zookeeper", "bench", "other")},
         "all": r["cpu"]["cores_busy"],
         "steal": round(r["cpu"]["steal_s"] / r["cpu"]["wall_s"], 3),
         "iowait": round(r["cpu"]["iowait_s"] / r["cpu"]["wall_s"], 3)} for r in runs if r.get("cpu", {}).get("wall_s")]

    result.tables["tenure's steady batch, step by step: p50 / p99 s"] = [
        {"round": r["round"], **{step.removesuffix("_s"): f"{r['steps_s'][step].get('p50')} / "
                                 f"{r['steps_s'][step].get('p99')}"
                                 for step in (*_STEPS, "in_batch_s") if step in r.get("steps_s", {})}}
        for r in runs if r["run"] == "tenure"]

    disturbed = [r for r in runs if _disturbed(r)]
    counted = [r for r in runs if r not in disturbed]
    if not {r["run"] for r in counted} >= {"bare", "tenure"}:
        counted = runs  # nothing to compare without them: keep every run, and say so below
    if disturbed:
        names = ", ".join(f"{r['run']} round {r['round']} (most: `{r['cpu'].get('heaviest_other') or '?'}`)"
                          for r in disturbed)
        result.notes.append(
            f"Disturbed (other processes used more than {_DISTURBED_CORES:g} cores meanwhile: `other` in the CPU "
            f"table): {names}; "
            + ("left out of the ratio." if counted is not runs else "kept: without them one side has no run."))

    def mean(kind: str) -> float | None:
        rates = [r["records_per_s"] for r in counted if r["run"] == kind and r["records_per_s"]]
        return sum(rates) / len(rates) if rates else None

    bare, tenure = mean("bare"), mean("tenure")
    ratio = round(tenure / bare, 3) if bare and tenure else None
    result.figures = {"runs": runs, "bare_records_per_s": bare, "tenure_records_per_s": tenure, "ratio": ratio,
                      "disturbed_runs": [[r["run"], r["round"]] for r in disturbed]}
    result.targets.append(Target("throughput ratio tenure / bare", ratio, "≥ 0.95",
                                 ratio is not None and ratio >= 0.95))
    add_plot(result, ctx.out, lambda path: rate_plot(
        path, {f"{r['run']} round {r['round']}": r["rate_over_time"] for r in runs},
        title=f"Throughput per batch: tenure's leader vs the bare query (steady state: after batch {_SKIP_BATCHES})"))
    result.notes += [
        "Both read the same files (hard links of one produced set), use the same pipeline functions "
        "(`career/spark/_pipeline.py`) and the same session settings (`tenure.career.spark.build_session`). The bare "
        "query (`bench/_bare.py`, `bench/_query.py`) appends Parquet straight into `table/`; tenure stages, "
        "commits through the fence, publishes (renames) and archives consumed files.",
        "tenure reads the queue with its own source (`career/spark/_intake.py`: files in (modification time, name) "
        "order, two listings per poll); the bare query with Spark's `binaryFile` file source.",
        "Checkpoint fsyncs: each tenure batch first fsyncs what Spark wrote to its checkpoint since the batch "
        "before (`CheckpointSync`), timed as `durable_s` in the replica's `batch_committed` events.",
        "tenure runs as one `tenure run --career spark` replica (the leader; no followers competing for the 2 "
        "cores); its batch times come from its `batch_committed` events (the time each is logged, just after the "
        "batch's publish, and that less its `batch_s`), the bare query's from `foreachBatch`.",
        "In foreachBatch: the median steady batch's time inside the batch function (the bare query's "
        "`foreachBatch` from start to its last write; tenure's `batch_s`, from its `batch_committed` events). "
        "Read: the first action over the batch, which runs the source, the line splitter and deduplication (the "
        "bare query's aggregation by kind; tenure's `read_s`). The "
        "rest of the batch interval is Spark's own: planning (the source's listing), the offset and commit logs, "
        "the state store. The step table splits tenure's batch: `durable` (checkpoint fsyncs), `read` (reading "
        "and counting), `stage` (every output written and fsynced), `commit` (the fenced ZooKeeper write), "
        "`publish` (renames), `delta` (the batch's Delta commit in each output table it wrote to, log fsynced "
        "included); the rest of `in_batch` is the commit-record read, marking and archiving.",
        "CPU: every process's CPU seconds from the moment the query's input is in place (tenure: landing filled "
        "once the replica runs; bare: the query's process started) until the last record is written, by process: "
        "`measured` is the query's process tree: `driver` its Python process (the replica, or the bare query), `jvm` "
        "Spark's JVM, `workers` Spark's Python workers; "
        "`zookeeper` the embedded ensemble's servers (tenure runs only), `bench` this process (it reads the "
        "replica's log twice a second), `other` the rest of the machine (`bench/_common.py`, `CpuMeter`); "
        "`steal` is time the hypervisor ran something else on the machine's cores, `iowait` idle time waiting for "
        "the disk (both machine-wide, from `/proc/stat`). The machine has 2 cores.",
        "Plot: each batch's records over the time since the previous batch's commit, against the time since the "
        "run's first commit (`rate_over_time` in each run's figures).",
    ]
    return result
