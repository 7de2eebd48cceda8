"""tenure on an embedded Spark standalone cluster: throughput against the bare query (1 and 2 workers) and the
graceful handover gap against local mode, with the successor's split, paired in one run; a PNG of both.

Run: ``python -m bench.run --only cluster``. ``python -m bench._on_cluster --master URL <bench._bare's arguments>``
runs the bare query on that master (what the throughput comparison launches for its cluster runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench._cluster import (
    HANDOVER_TIMEOUT_S,
    SESSION_TIMEOUT_S,
    ZK_TICK_MS,
    Cluster,
    Commit,
    CommitTimeline,
    TenureCluster,
)
from bench._common import BenchContext, Result, Target
from bench._handover import _run_recipes, stats
from bench._plots import add_plot, change_bars, pyplot, save, segment_legend
from bench._split import SEGMENTS, median_segments, seconds_to
from bench._throughput import _fill_landing, _run_bare, _steady_rate
from tenure.career.queue import QueueLayout
from tenure.career.spark import worker_python
from tenure.service.local import SparkCluster, Topology, free_base_port
from tenure.service.ops import produce, verify
from tenure.service.replica import ReplicaSpec

__all__ = ["main", "run_cluster"]

_RATE = 1000.0  # records/s while handing over: files always waiting, and a backlog the leader drains at the end
_TIMEOUT_S = 1800.0  # one throughput run (a loaded 2-core machine runs executors slowly)
_DRAIN_TIMEOUT_S = 600.0
# What Topology gives a replica on a cluster: the driver binds and advertises loopback; executors run this Python.
_DRIVER_ENV = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": worker_python()}
#: the handover blocks: label → (workers, --standby-executors; None: the default, 1)
HANDOVER_SETUPS: dict[str, tuple[int, int | None]] = {
    "cluster-2w": (2, None), "cluster-2w-no-standby": (2, 0), "local": (0, None)}
#: what ``--recipes`` may choose: the throughput runs, and each handover block
PARTS = ("throughput", *HANDOVER_SETUPS)
_LOG_STAMP = re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) INFO CoarseGrainedExecutorBackend: (.*)$", re.M)


class _Replicas(TenureCluster):
    """``TenureCluster`` (warm standby) on an embedded Spark cluster of ``workers`` workers, or local Spark with 0.

    It keeps a commit timeline of its own from start to stop (``commits``), and before it stops a topology with a
    producer it stops the producer and waits until the leader has drained ``landing/`` (``drained``), so that
    ``verify`` can account for every record.
    """

    def __init__(self, directory: Path, *, workers: int, rate: float, replicas: int = 3,
                 standby_executors: int | None = None) -> None:
        self.workers = workers
        self.standby_executors = standby_executors
        super().__init__(directory, standby="warm", rate=rate, replicas=replicas)
        self.label = f"cluster-{workers}w" if workers else "local"
        self.commits: list[Commit] = []
        self.drained: bool | None = None
        self._timeline: CommitTimeline | None = None

    def _make(self, attempt: int) -> Topology:
        directory = self._directory if attempt == 1 else self._directory.with_name(f"{self._directory.name}.{attempt}")
        spec = ReplicaSpec(group=self.group, career="spark", session_timeout_s=SESSION_TIMEOUT_S,
                           handover_timeout_s=HANDOVER_TIMEOUT_S, standby=self._standby)
        if self.standby_executors is not None:
            spec |= ReplicaSpec(standby_executors=self.standby_executors)
        return Topology(directory, replicas=self._replicas, spec=spec, zk_tick_ms=ZK_TICK_MS,
                        spark_workers=self.workers)

    @property
    def timeline(self) -> CommitTimeline:
        assert self._timeline is not None, "start() first"
        return self._timeline

    def start(self) -> None:
        super().start()
        try:
            self._timeline = CommitTimeline(self.connect_string, self.group).__enter__()
        except BaseException:
            super().stop()
            raise

    def stop(self) -> None:
        try:
            if self._rate and self._timeline is not None:
                self.drained = self._drain()
        finally:
            if self._timeline is not None:
                self.commits = self._timeline.snapshot()
                self._timeline.__exit__(None, None, None)
                self._timeline = None
            super().stop()

    def _drain(self) -> bool:
        producer = self.topology.producer
        if producer is not None and producer.poll() is None:
            producer.terminate()
            producer.wait(30)
        landing = QueueLayout(self.data_root).landing
        deadline = time.monotonic() + _DRAIN_TIMEOUT_S
        while any(r.alive for r in self.topology) and time.monotonic() < deadline:
            if not any(not p.name.startswith((".", "_")) for p in landing.iterdir()):
                return True
            time.sleep(1.0)
        return False

    def written(self) -> int:
        return sum(c.written for c in self.timeline.snapshot())


class _LoadSampler:
    """The 1-minute load average every ``interval_s`` in a thread, so each run and handover can say how busy the
    machine was then."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self.samples: list[tuple[float, float]] = []
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), os.getloadavg()[0]))
            if self._stop.wait(self._interval_s):
                return

    @contextlib.contextmanager
    def running(self) -> Iterator[_LoadSampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(self._interval_s + 1)

    def mean(self, start: float, end: float) -> float | None:
        """The mean sample between two wall-clock times (the nearest sample when none falls between)."""
        inside = [load for at, load in self.samples if start <= at <= end]
        if not inside and self.samples:
            inside = [min(self.samples, key=lambda s: abs(s[0] - start))[1]]
        return round(statistics.fmean(inside), 2) if inside else None


# -- throughput --------------------------------------------------------------------------------------------------

def _bare_rate(work: Path, source: Path, records: int, workers: int) -> dict[str, Any]:
    """The bare query: local[2] as ``bench._throughput`` runs it, or on a fresh cluster of ``workers`` workers."""
    if not workers:
        return _run_bare(work, source, records)
    data_root = work / "data"
    _fill_landing(source, data_root)
    out = work / "batches.json"
    spark = SparkCluster(workers=workers, port=free_base_port(workers + 1, low=20000, high=30000),
                         directory=work / "spark")
    with spark, (work / "bare.log").open("ab") as log:
        subprocess.run([sys.executable, "-m", "bench._on_cluster", "--master", spark.master_url,
                        "--data-root", str(data_root), "--records", str(records), "--out", str(out),
                        "--timeout-s", f"{_TIMEOUT_S:g}"], env={**os.environ, **_DRIVER_ENV},
                       stdout=log, stderr=subprocess.STDOUT, check=True, timeout=_TIMEOUT_S + 180)
    return _steady_rate(json.loads(out.read_text())["batches"])


def _tenure_rate(work: Path, source: Path, records: int, workers: int) -> dict[str, Any]:
    """One warm replica (the leader, nothing else on the cores) until it has written ``records``; then verify."""
    replicas = _Replicas(work, workers=workers, rate=0.0, replicas=1)
    replicas.start()
    try:
        # Linked once the replica runs: its warm-up (a minute or more) dwarfs the milliseconds this takes.
        _fill_landing(source, replicas.data_root)
        deadline = time.monotonic() + _TIMEOUT_S
        while (done := replicas.written()) < records:
            if replicas.pid("replica-1") is None or time.monotonic() > deadline:
                raise RuntimeError(f"{replicas.label}: {done} of {records} records written when the replica exited "
                                   f"or {_TIMEOUT_S:g} s passed; see {replicas.topology.logs}")
            time.sleep(0.2)
    finally:
        replicas.stop()
    figures = _steady_rate([{"batch_id": c.batch_id, "committed_at": c.committed_at, "written": c.written}
                            for c in replicas.commits])
    report = verify(replicas.data_root)
    return {**figures, "verify_ok": report.ok, "ids_written": report.ids_written}


def _throughput(ctx: BenchContext, result: Result, load: _LoadSampler) -> list[dict[str, Any]]:
    """Bare and tenure on 1 and 2 workers (and local[2], once, for reference), alternating, over one produced set."""
    records = 30_000 if ctx.quick else 200_000
    per_file = 1_000 if ctx.quick else 4_000  # 5 files a trigger: 5 000 / 20 000 records a batch
    rounds = 1 if ctx.quick else 2
    result.params.update({"records": records, "keys": 100, "records_per_file": per_file,
                          "records_per_batch": 5 * per_file, "rounds": rounds})
    source = ctx.work / "source"
    summary = produce(source, records=records, keys=100, seed=4, progress=False,
                      batch_records=per_file, batch_bytes=1 << 30, flush_interval_s=3600.0)
    result.params["bytes"] = summary.bytes
    # Round 1 runs each setup bare first, round 2 the reverse order throughout (A-B, B-A): a drift in the
    # machine's load over the run weighs on both sides alike. local[2] runs once (the reference, not the subject).
    plan = [[(w, kind) for w in (1, 2) for kind in ("bare", "tenure")] + ([] if ctx.quick else
                                                                          [(0, "bare"), (0, "tenure")])]
    plan += [list(reversed([step for step in plan[0] if step[0]])) for _ in range(rounds - 1)]
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    for index, steps in enumerate(plan):
        if ctx.budget_s is not None and index > 0 and time.monotonic() - started > ctx.budget_s / 2:
            result.notes.append(f"Throughput: only {index} of {rounds} rounds within the time budget (--budget-min).")
            break
        for workers, kind in steps:
            work = ctx.work / f"throughput-{kind}-{workers}w-{index + 1}"
            work.mkdir(parents=True)
            began = time.time()
            try:
                run_one = _bare_rate if kind == "bare" else _tenure_rate
                figures = run_one(work, QueueLayout(source).landing, records, workers)
            except Exception as exc:
                figures = {"records_per_s": None, "error": f"{type(exc).__name__}: {exc}"}
                result.error = f"throughput {kind} {workers}w round {index + 1}: {figures['error']}"
            runs.append({"setup": _setup(workers), "workers": workers, "run": kind, "round": index + 1,
                         "load_1m": load.mean(began, time.time()), **figures})
            print(f"bench: cluster throughput {runs[-1]['setup']} {kind} round {index + 1}: "
                  f"{runs[-1]['records_per_s']} records/s", file=sys.stderr, flush=True)
    return runs


def _setup(workers: int) -> str:
    return f"cluster {workers}w" if workers else "local[2]"


def _mean_rate(runs: list[dict[str, Any]], workers: int, kind: str) -> float | None:
    rates = [r["records_per_s"] for r in runs if r["workers"] == workers and r["run"] == kind and r["records_per_s"]]
    return round(statistics.fmean(rates), 1) if rates else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


# -- the successor's executors (the handover's split itself is bench._split's, made by bench._handover) --------

@dataclass(frozen=True)
class _Executor:
    """One executor from its worker's work folder: launched (the folder's mtime) and its log's milestones (the
    log has whole seconds: ``+ 0.5`` centres them)."""

    launched: float
    started: float | None  # the JVM logs "Started daemon"
    registered: float | None  # "Successfully registered with driver"
    first_task: float | None  # the first "Got assigned task"


def _executors(spark: SparkCluster | None) -> list[_Executor]:
    if spark is None:
        return []
    found = []
    for folder in sorted(p for w in spark.workers for p in (w.directory / "work").glob("app-*/*") if p.is_dir()):
        stamps: dict[str, float] = {}
        with contextlib.suppress(OSError):
            for stamp, message in _LOG_STAMP.findall((folder / "stderr").read_text(errors="replace")):
                key = next((k for k in ("Started daemon", "Successfully registered", "Got assigned task")
                            if message.startswith(k)), None)
                if key is not None and key not in stamps:  # naive: the executor logs the local time, as we read it
                    stamps[key] = datetime.strptime(stamp, "%y/%m/%d %H:%M:%S").timestamp() + 0.5
        found.append(_Executor(folder.stat().st_mtime, stamps.get("Started daemon"),
                               stamps.get("Successfully registered"), stamps.get("Got assigned task")))
    return found


def _milestones(replicas: _Replicas, row: dict[str, Any], executors: list[_Executor]) -> dict[str, Any]:
    """The successor's executors for its term: how many, and when the first launched, registered and got a task
    and the last registered (seconds after the successor's election)."""
    elected_at = row.get("elected_at")
    ended = next((c.committed_at for c in replicas.commits
                  if c.batch_id == row["first_batch_id"] and c.replica_id == row["to"]), None)
    if elected_at is None or ended is None:
        return {}
    mine = [x for x in executors if elected_at - 1.0 <= x.launched <= ended]
    out: dict[str, Any] = {"executors": len(mine)}
    for name, pick, first_or_last in (("launched", lambda x: x.launched, min),
                                      ("registered", lambda x: x.registered, min),
                                      ("all_registered", lambda x: x.registered, max),
                                      ("first_task", lambda x: x.first_task, min)):
        moments = [m for m in map(pick, mine) if m is not None]
        out[f"executors_{name}_after_elected_s"] = round(first_or_last(moments) - elected_at, 1) if moments else None
    return out


def _handovers(ctx: BenchContext, result: Result, load: _LoadSampler) -> dict[str, list[dict[str, Any]]]:
    """N graceful handovers on 3 warm replicas over a 2-worker cluster, then N in local mode; each row split (by
    ``bench._handover``) and given the successor's executor milestones."""
    count = 1 if ctx.quick else 5
    result.params.update({"handovers_per_setup": count, "contenders": 3, "producer_records_per_s": _RATE,
                          "session_timeout_s": SESSION_TIMEOUT_S, "handover_timeout_s": HANDOVER_TIMEOUT_S})
    setups = {label: setup for label, setup in HANDOVER_SETUPS.items()
              if ctx.recipes is None or label in ctx.recipes}
    made: dict[str, _Replicas] = {}

    def maker(label: str) -> Callable[[Path], Cluster]:
        def make(directory: Path) -> Cluster:
            workers, standby = setups[label]
            made[label] = _Replicas(directory, workers=workers, rate=_RATE, standby_executors=standby)
            return made[label]
        return make

    changes = _run_recipes(ctx, [(label, maker(label)) for label in setups], count, crash=False, result=result)
    for label, rows in changes.items():
        replicas = made.get(label)
        if replicas is None:
            continue
        executors = _executors(replicas.topology.spark)
        for row in rows:
            row.update(_milestones(replicas, row, executors))
            ended = next((c.committed_at for c in replicas.commits if c.batch_id == row["first_batch_id"]), None)
            if ended is not None:
                row["load_1m"] = load.mean(ended - row["signal_to_first_commit_s"], ended)
        if replicas.drained:
            report = verify(replicas.data_root)
            result.figures.setdefault("handover_verify", {})[label] = {
                "ok": report.ok, "ids_in": report.ids_in, "ids_written": report.ids_written, "lost": report.lost,
                "waiting": report.waiting, "duplicated": report.duplicated}
        else:
            result.notes.append(f"{label}: the leader had not drained landing/ within {_DRAIN_TIMEOUT_S:g} s of the "
                                "producer's stop, so verify was not run on it.")
    return changes


# -- the result ---------------------------------------------------------------------------------------------------

def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


def run_cluster(ctx: BenchContext) -> Result:
    """Throughput (tenure vs bare, 1 and 2 workers) and graceful handovers (2-worker cluster vs local mode)."""
    result = Result(
        name="cluster", title="On a Spark standalone cluster: throughput vs the bare query, and the handover gap",
        command="python -m bench.run --only cluster",
        params={"cluster": "embedded (service/local/_spark_cluster.py): 1 master + W workers, 2 cores and 2 GB "
                           "each, executors of 1 GB (Spark's default); the driver runs in the replica; "
                           "spark.cores.max leaves 1 core per follower (Topology)",
                "spark": "career defaults: 2 shuffle partitions, UI off, RocksDB state, 5 files per trigger, 0.5 s "
                         "trigger; local mode: local[2]"},
    )
    if ctx.recipes is not None:
        unknown = set(ctx.recipes) - set(PARTS)
        if unknown:
            raise ValueError(f"--recipes: no part {sorted(unknown)} of the cluster bench; choose from {list(PARTS)}")
        result.params["recipes"] = list(ctx.recipes)
        result.command += " --recipes " + " ".join(ctx.recipes)
    with _LoadSampler().running() as load:
        runs = _throughput(ctx, result, load) if ctx.recipes is None or "throughput" in ctx.recipes else []
        changes = _handovers(ctx, result, load)
    result.params["load_1m_samples"] = {"n": len(load.samples), "min": round(min(s for _, s in load.samples), 2),
                                        "max": round(max(s for _, s in load.samples), 2),
                                        "mean": round(statistics.fmean(s for _, s in load.samples), 2)}
    rates = {w: {kind: _mean_rate(runs, w, kind) for kind in ("tenure", "bare")} for w in (1, 2, 0)}
    for w, rate in rates.items():
        if rate["tenure"] is None and rate["bare"] is None:
            continue
        row = {"setup": _setup(w), "tenure records/s": rate["tenure"], "bare records/s": rate["bare"],
               "tenure / bare": _ratio(rate["tenure"], rate["bare"]),
               "runs": sum(r["workers"] == w and r["run"] == "tenure" for r in runs)}
        if w == 2:
            row |= {"tenure 2w / 1w": _ratio(rate["tenure"], rates[1]["tenure"]),
                    "bare 2w / 1w": _ratio(rate["bare"], rates[1]["bare"])}
        result.table.append(row)
    result.tables["Throughput runs (steady state: batches after the first 3 with data)"] = [
        {"setup": r["setup"], "run": r["run"], "round": r["round"], "records/s": r["records_per_s"],
         "steady batches": r.get("steady_batches"),
         "batch interval p50 s": (r.get("batch_interval_s") or {}).get("p50"),
         "verify ok": r.get("verify_ok"), "load 1m": r["load_1m"]} for r in runs]
    gaps, splits = [], []
    for label, rows in changes.items():
        if not rows:
            continue
        gap = stats([r["gap_s"] for r in rows])
        gaps.append({"setup": label, "handovers": gap["n"], "gap p50 s": gap["p50"], "gap p90 s": gap["p90"],
                     "gap max s": gap["max"],
                     "SIGTERM→first commit p50 s": stats([r["signal_to_first_commit_s"] for r in rows])["p50"],
                     "first batch records (min)": min(r["first_batch_records"] for r in rows),
                     "load 1m (mean)": _median([r.get("load_1m") for r in rows])})
        split: dict[str, Any] = {"setup": label, **median_segments(rows)}
        if label.startswith("cluster"):
            for name, title in (("launched", "first executor launched"), ("registered", "first executor registered"),
                                ("all_registered", "all executors registered"), ("first_task", "first task")):
                split[f"{title} (after elected)"] = _median([r.get(f"executors_{name}_after_elected_s") for r in rows])
        splits.append(split)
    result.tables["Graceful handover gap (SIGTERM of the leader; 3 warm replicas, data waiting)"] = gaps
    result.tables["Where the gap goes: median seconds per segment (medians do not add up to the median gap)"] = splits
    result.tables["Every handover: seconds per segment"] = [
        {"setup": label, "#": i + 1, "gap s": r["gap_s"],
         **{SEGMENTS[k]: v for k, v in (r.get("segments_s") or {}).items()},
         "first executor registered (after elected)": r.get("executors_registered_after_elected_s"),
         "load 1m": r.get("load_1m")} for label, rows in changes.items() for i, r in enumerate(rows)]
    verified = [r["verify_ok"] for r in runs if "verify_ok" in r] + \
        [v["ok"] for v in result.figures.get("handover_verify", {}).values()]
    cluster_gap = next((g["gap p50 s"] for g in gaps if g["setup"] == "cluster-2w"), None)
    local_gap = next((g["gap p50 s"] for g in gaps if g["setup"] == "local"), None)
    result.figures.update({"runs": runs, "records_per_s": {_setup(w): r for w, r in rates.items()},
                           "ratio_tenure_over_bare": {_setup(w): _ratio(r["tenure"], r["bare"])
                                                      for w, r in rates.items()},
                           "scaling_2w_over_1w": {k: _ratio(rates[2][k], rates[1][k]) for k in ("tenure", "bare")},
                           "handovers": changes, "gap_p50_cluster_over_local": _ratio(cluster_gap, local_gap),
                           "verify_ok": all(verified) if verified else None})
    if cluster_gap is not None and local_gap is not None:
        result.targets.append(Target("cluster graceful gap p50 (2 workers, standby executors)", cluster_gap,
                                     f"≤ 2 × the local gap p50 ({2 * local_gap:.2f} s)", cluster_gap <= 2 * local_gap))
    for w in (1, 2):
        ratio = _ratio(rates[w]["tenure"], rates[w]["bare"])
        if ratio is None:
            continue
        result.targets.append(Target(f"throughput ratio tenure / bare, {w} worker{'s' * (w > 1)}", ratio, "≥ 0.9",
                                     None if ratio is None else ratio >= 0.9))
    result.targets.append(Target("tenure data roots verified exactly once", sum(verified),
                                 f"all {len(verified)}", bool(verified) and all(verified)))
    add_plot(result, ctx.out, lambda path: _plot(result, path))
    result.notes += [
        "Throughput: bare and tenure read the same produced files (hard links), with the same pipeline and "
        "session settings, as `bench/_throughput.py` does; on a cluster each run gets a fresh embedded cluster "
        "of W workers (same settings). tenure is one warm replica (`tenure run --career spark --spark-master "
        "spark://…`; it holds a standby application of 1 executor while it warms up and grows it when elected); "
        "the bare query "
        "(`python -m bench._on_cluster`, which runs `bench/_bare.py` on the cluster's master) appends Parquet "
        "straight into `table/`. Round 1 runs bare first, round 2 tenure first; local[2] runs once, for reference.",
        "Everything shares the machine's cores: the driver, the executors (1 core each) and their Python workers "
        "run on the same 2 cores, so a second worker adds a JVM, not a CPU.",
        "Handover: each setup runs its block on its own 3-replica warm topology under a producer; the leader is "
        "SIGTERMed once it has made 3 commits and every follower is ready (warm), then restarted. Gap: the old "
        "leader's last commit to the successor's first (`committed_at` in `/tenure/<group>/commit`).",
        "Segments (`bench/_split.py`): boundaries from the old leader's and the successor's JSON logs "
        "(`handed_over`, `released`, `elected`, `spark_session_ready`, `inaugurated`, `query_started`) and the "
        "first batch's `batch_committed` (`read_s`, `stage_s`, `commit_s`); the gap ends at the first commit's "
        "`committed_at`, before its fenced write and publish (hatched). On a cluster with standby executors (the "
        "default, `cluster-2w`) the successor leads on the application it held as a follower, with 1 warm executor, "
        "and grows it to its share; with `--standby-executors 0` (`cluster-2w-no-standby`, the design before) its "
        "application starts at inauguration and its executors start then: the first batch's read waits for them. "
        "Executor times come from the workers' "
        "work folders (launch: the folder's mtime; registered with the driver and first task assigned: the "
        "executor's log, whole seconds + 0.5), in seconds after the successor's election.",
        "Exactly once: `tenure.service.ops.verify` on every tenure data root (throughput runs; each handover topology "
        "after its producer stops and the leader drains `landing/`).",
    ]
    return result


def _plot(result: Result, path: Path) -> None:
    """Throughput bars (tenure vs bare per setup, each round a dot) and every handover's gap, split stacked."""
    plt = pyplot()
    runs: list[dict[str, Any]] = result.figures.get("runs", [])
    changes: dict[str, list[dict[str, Any]]] = result.figures.get("handovers", {})
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, 5.2), gridspec_kw={"width_ratios": [1, 2]})
    setups = [s for s in ("cluster 1w", "cluster 2w", "local[2]") if any(r["setup"] == s for r in runs)]
    for offset, kind, colour in ((-0.2, "tenure", "#2e7d32"), (0.2, "bare", "#78909c")):
        mine = [[r["records_per_s"] for r in runs if r["setup"] == s and r["run"] == kind and r["records_per_s"]]
                for s in setups]
        left.bar([i + offset for i in range(len(setups))], [statistics.fmean(m) if m else 0 for m in mine],
                 width=0.38, color=colour, label=kind)
        for i, m in enumerate(mine):
            left.scatter([i + offset] * len(m), m, color="black", s=12, zorder=3)
    if not setups:
        left.text(0.5, 0.5, "throughput not run (--recipes)", ha="center", va="center", transform=left.transAxes)
    left.set_xticks(range(len(setups)), setups)
    left.set_ylabel("records/s (steady state; dots: rounds)")
    left.set_title("Throughput: tenure's leader vs the bare query", fontsize=10, loc="left")
    left.legend(fontsize=8)
    left.grid(axis="y", alpha=0.3)
    marker = "first executor registered"
    for x, row in change_bars(right, changes, total_key="gap_s"):
        registered = row.get("executors_registered_after_elected_s")
        if registered is not None and (row.get("segments_s") or {}).get("election") is not None:
            elected = seconds_to(row["segments_s"], "election")
            right.scatter([x], [elected + registered], marker="D", color="black", s=22, zorder=4, label=marker)
    segment_legend(right, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    right.set_ylabel("seconds from the old leader's last commit")
    right.set_title("Graceful handover gap: 2-worker cluster (standby executors or none) vs local mode, split",
                    fontsize=10, loc="left")
    right.grid(axis="y", alpha=0.3)
    load = result.params.get("load_1m_samples", {})
    fig.suptitle(f"tenure on an embedded Spark cluster (2 cores; load average 1 min: mean {load.get('mean')}, "
                 f"max {load.get('max')})", fontsize=10)
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    """The bare query on a Spark master: ``--master URL`` and then ``bench._bare``'s own arguments."""
    parser = argparse.ArgumentParser(prog="python -m bench._on_cluster",
                                     description="bench._bare's query on --master (a cluster's spark://…)")
    parser.add_argument("--master", required=True)
    args, rest = parser.parse_known_args(argv)
    from bench._bare import main as bare
    from tenure.career.spark import SparkCareerConfig, build_session

    defaults = SparkCareerConfig(data_root=Path("."))
    # Started here on the master, with the career's settings: bench._bare's own build_session then reuses it.
    build_session(args.master, app_name="bare", shuffle_partitions=defaults.shuffle_partitions,
                  extra_conf=defaults.spark_conf)
    return bare(rest)


if __name__ == "__main__":
    sys.exit(main())
