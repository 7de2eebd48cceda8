"""End-to-end latency and batch duration at a steady load: tenure's leader against the bare query, alternating.

A record's latency is the time from its queue file landing (the file's mtime: written, then fsynced and renamed
into ``landing/``) to its rows being visible in ``table/`` — for tenure the first poll that sees the batch's
published part files, for the bare query the moment its ``foreachBatch`` write returned. A batch's duration is
the time from its trigger (Spark writes ``offsets/<B>`` in the query's checkpoint once the source has been
listed) to the commit that makes it visible (tenure: the fenced commit's ``committed_at``; bare: the write's
end). Both runs use the same pipeline functions, Spark settings and producer; only the lifecycle differs.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench._cluster import CommitTimeline, TenureCluster
from bench._common import BenchContext, Result, Target, percentiles
from bench._plots import add_plot, latency_plot
from tenure.career.queue import QueueLayout
from tenure.career.spark import QUERY_STARTED
from tenure.career.spark._layout import Layout
from tenure.service.ops import produce
from tenure.service.replica import ReplicaSpec

__all__ = ["run_latency"]

_POLL_S = 0.01
_SKIP_BATCHES = 5  # the first batches of a query pay class loading and JIT: left out of both runs
_START_TIMEOUT_S = 600.0
_DRAIN_TIMEOUT_S = 300.0
_WINDOW_S = 120.0  # the career's default dedup window: the state a steady load keeps is rate × window ids
_TARGETS = {"batch_p50_s": 0.4, "latency_p50_s": 0.5, "latency_p99_s": 1.0, "ratio": 1.1}

# name → (records/s, records per file, producer flush interval): light is the issue's "1 000 records/s, one file
# a second"; heavy is the handover benchmark's producer (2 000 records/s in files of up to 1 000 records).
_LOADS: dict[str, tuple[float, int, float]] = {"light": (1000.0, 1000, 1.0), "heavy": (2000.0, 1000, 0.5)}


class _Watcher:
    """Polls ``landing/`` (each queue file's mtime) and ``table/`` (when each batch's first part file appears)."""

    def __init__(self, data_root: Path) -> None:
        self.landing = QueueLayout(data_root).landing
        self.table = Layout(data_root).table
        self.landed: dict[str, float] = {}
        self.visible: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="latency-watcher", daemon=True)

    def __enter__(self) -> _Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(_POLL_S):
            now = time.time()
            with contextlib.suppress(OSError):
                for entry in self.landing.iterdir():
                    if entry.name.endswith(".jsonl") and entry.name not in self.landed:
                        with contextlib.suppress(OSError):
                            self.landed[entry.name] = entry.stat().st_mtime
            with contextlib.suppress(OSError):
                for entry in self.table.iterdir():
                    if entry.name.startswith("batch-"):  # tenure's published name: batch-<B, 12 digits>-…
                        self.visible.setdefault(int(entry.name[6:18]), now)


def _offset_times(checkpoints: list[Path]) -> dict[int, float]:
    """Batch id → when Spark wrote its offset log entry (the trigger, once the source was listed)."""
    found: dict[int, float] = {}
    for checkpoint in checkpoints:
        for entry in (checkpoint / "offsets").glob("[0-9]*"):
            found.setdefault(int(entry.name), entry.stat().st_mtime)
    return found


def _prefill(data_root: Path, load: str) -> set[str]:
    """Feed ``rate × window`` ids at once, so the measured batches pay for the dedup state a steady load keeps
    (Spark scans all of it every batch); returns the names of those files, which the figures leave out."""
    def names() -> set[str]:  # the consumer may archive a file before this lists it
        queue = QueueLayout(data_root)
        return {p.name for folder in (queue.landing, queue.archive) if folder.is_dir() for p in folder.rglob("*.jsonl")}

    before = names()
    # 1 000 keys are named k000…k999, never the steady load's k00…k99: their marks do not make it late.
    produce(data_root, records=_prefill_records(load), keys=1000, seed=17, progress=False, batch_records=20_000,
            batch_bytes=1 << 30, flush_interval_s=3600.0)
    return names() - before


def _prefill_records(load: str) -> int:
    return int(_LOADS[load][0] * _WINDOW_S)


def _figures(batches: list[dict[str, Any]], landed: dict[str, float], prefilled: set[str], skip: int) -> dict[str, Any]:
    """Per-file latencies and per-batch durations after the first ``skip`` steady batches."""
    steady = (b for b in batches if b["files"] and not set(b["files"]) & prefilled)
    data = sorted(steady, key=lambda b: b["batch_id"])[skip:]
    latencies = [b["visible_at"] - landed[f] for b in data for f in b["files"] if f in landed]
    durations = [b["done_at"] - b["triggered_at"] for b in data if b["triggered_at"] is not None]
    return {"latency_s": _stats(latencies), "batch_s": _stats(durations), "batches": len(data),
            "files": sum(len(b["files"]) for b in data), "latencies": [round(x, 4) for x in latencies],
            "durations": [round(x, 4) for x in durations]}


def _stats(values: list[float]) -> dict[str, Any]:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in percentiles(values).items()}


def _producer(data_root: Path, records: int, load: str) -> threading.Thread:
    rate, per_file, flush_s = _LOADS[load]
    thread = threading.Thread(
        target=produce, name="latency-producer", daemon=True,
        kwargs={"data_root": data_root, "records": records, "keys": 100, "rate": rate, "seed": 18,
                "progress": False, "batch_records": per_file, "flush_interval_s": flush_s})
    thread.start()
    return thread


def _run_bare(work: Path, records: int, load: str, skip: int) -> dict[str, Any]:
    data_root = work / "data"
    QueueLayout(data_root).landing.mkdir(parents=True)
    out, ready = work / "batches.json", work / "ready"
    with (work / "bare.log").open("ab") as log, _Watcher(data_root) as watcher:
        process = subprocess.Popen([sys.executable, "-m", "bench._bare", "--data-root", str(data_root),
                                    "--records", str(records + _prefill_records(load)), "--out", str(out),
                                    "--ready-file", str(ready),
                                    "--timeout-s", f"{_START_TIMEOUT_S + _DRAIN_TIMEOUT_S:g}"],
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + _START_TIMEOUT_S
            while not ready.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the bare query did not start; see {work / 'bare.log'}")
                time.sleep(0.1)
            prefilled = _prefill(data_root, load)  # consumed in the first seconds; its batches are left out
            _producer(data_root, records, load).join()
            process.wait(_DRAIN_TIMEOUT_S + 60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        landed = dict(watcher.landed)
    triggered = _offset_times([data_root / "checkpoint-bare"])
    batches = [{"batch_id": b["batch_id"], "files": b["files"], "visible_at": b["committed_at"],
                "done_at": b["committed_at"], "triggered_at": triggered.get(b["batch_id"])}
               for b in json.loads(out.read_text())["batches"]]
    return _figures(batches, landed, prefilled, skip)


def _leading(cluster: TenureCluster) -> bool:
    """Whether a replica has started its term's query (it logs ``query_started``)."""
    for replica in cluster.replica_ids():
        with contextlib.suppress(OSError):
            if f'"{QUERY_STARTED}"' in (cluster.topology.logs / f"{replica}.log").read_text(errors="replace"):
                return True
    return False


def _all_alive(cluster: TenureCluster) -> bool:
    return all(cluster.pid(replica) is not None for replica in cluster.replica_ids())


def _run_tenure(work: Path, records: int, load: str, skip: int, *, replicas: int = 1,
                spec: ReplicaSpec | None = None) -> dict[str, Any]:
    """``replicas`` warm replicas of `tenure run --career spark`, with ``spec``'s settings added: the leader's
    figures. With one (the default) nothing competes with the leader for the 2 cores; with more, its followers
    share them, as in a group's steady state."""
    cluster = TenureCluster(work, standby="warm", rate=0.0, replicas=replicas, spec=spec)
    cluster.start()
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not _leading(cluster):
            if not _all_alive(cluster) or time.monotonic() > deadline:
                raise RuntimeError(f"no tenure replica started its query; see {cluster.topology.logs}")
            time.sleep(0.1)
        with CommitTimeline(cluster.connect_string, cluster.group, interval_s=_POLL_S) as timeline, \
                _Watcher(cluster.data_root) as watcher:
            prefilled = _prefill(cluster.data_root, load)
            _producer(cluster.data_root, records, load).join()
            records += _prefill_records(load)
            deadline = time.monotonic() + _DRAIN_TIMEOUT_S
            while sum(c.written for c in timeline.snapshot()) < records:
                if not _all_alive(cluster) or time.monotonic() > deadline:
                    raise RuntimeError(f"tenure wrote {sum(c.written for c in timeline.snapshot())} of {records} "
                                       f"records; see {cluster.topology.logs}")
                time.sleep(0.1)
            commits = timeline.snapshot()
            # A batch that read no file publishes nothing: a new query's first trigger runs one before data lands.
            publishing = [c.batch_id for c in commits if c.files]
            deadline = time.monotonic() + 10  # the watcher polls table/ every _POLL_S: it sees the last publish soon
            while any(b not in watcher.visible for b in publishing) and time.monotonic() < deadline:
                time.sleep(_POLL_S)
            landed, visible = dict(watcher.landed), dict(watcher.visible)
        triggered = _offset_times(sorted(Layout(cluster.data_root).checkpoint.glob("epoch=*")))
    finally:
        cluster.stop()
    ids = [c.batch_id for c in commits]
    if ids and ids != list(range(ids[0], ids[0] + len(ids))):
        raise RuntimeError(f"the commit poller missed a batch (saw {ids}): poll faster")
    batches = [{"batch_id": c.batch_id, "files": list(c.files), "visible_at": visible.get(c.batch_id),
                "triggered_at": triggered.get(c.batch_id), "done_at": c.committed_at} for c in commits]
    missing = [b["batch_id"] for b in batches if b["visible_at"] is None and b["files"]]
    if missing:
        raise RuntimeError(f"batches {missing} were committed but never seen published in table/")
    return _figures(batches, landed, prefilled, skip)


def run_latency(ctx: BenchContext) -> Result:
    """At each load, alternate bare and tenure runs fed by the same producer; compare latency and batch cost."""
    seconds = 30 if ctx.quick else 90
    skip = 1 if ctx.quick else _SKIP_BATCHES
    rounds = ctx.rounds_or(2)
    loads = ["light"] if ctx.quick else list(_LOADS)
    result = Result(
        name="latency", title="End-to-end latency and batch duration: tenure's leader vs the bare query",
        command="python -m bench.run --only latency",
        params={"seconds_per_run": seconds, "rounds": rounds, "warm_up_batches_skipped": skip,
                "loads": {k: {"records_per_s": r, "records_per_file": n, "flush_interval_s": f}
                          for k, (r, n, f) in _LOADS.items() if k in loads},
                "spark": "career defaults: local[2], 2 shuffle partitions, UI off, RocksDB state"},
    )
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    for load in loads:
        records = int(_LOADS[load][0] * seconds)
        for index in range(rounds):
            if ctx.budget_s is not None and runs and time.monotonic() - started > ctx.budget_s:
                result.notes.append(f"Stopped after {len(runs)} runs within the time budget (--budget-min).")
                break
            for kind in (["bare", "tenure"] if index % 2 == 0 else ["tenure", "bare"]):
                work = ctx.work / f"{load}-{kind}-{index}"
                work.mkdir(parents=True)
                figures = (_run_bare if kind == "bare" else _run_tenure)(work, records, load, skip)
                runs.append({"load": load, "run": kind, "round": index + 1, **figures})
                print(f"bench: latency {load} {kind} round {index + 1}: latency {figures['latency_s']}, "
                      f"batch {figures['batch_s']}", file=sys.stderr, flush=True)
    summary: dict[str, dict[str, Any]] = {}
    for load in loads:
        for kind in ("bare", "tenure"):
            mine = [r for r in runs if r["load"] == load and r["run"] == kind]
            if not mine:
                continue
            latency = _stats([x for r in mine for x in r["latencies"]])
            batch = _stats([x for r in mine for x in r["durations"]])
            summary[f"{load}/{kind}"] = {"latency_s": latency, "batch_s": batch}
            result.table.append({"load": load, "run": kind, "batches": batch["n"],
                                 "batch p50 s": batch["p50"], "batch p90 s": batch["p90"],
                                 "latency p50 s": latency["p50"], "latency p99 s": latency["p99"],
                                 "latency max s": latency["max"]})
    light_t, light_b = summary.get("light/tenure"), summary.get("light/bare")

    def figure(section: dict[str, Any] | None, measure: str, stat: str) -> float | None:
        return None if section is None else section[measure][stat]

    def ratio(measure: str) -> float | None:
        t, b = figure(light_t, measure, "p50"), figure(light_b, measure, "p50")
        return round(t / b, 3) if t is not None and b else None

    batch_p50, lat_p50, lat_p99 = (figure(light_t, "batch_s", "p50"), figure(light_t, "latency_s", "p50"),
                                   figure(light_t, "latency_s", "p99"))
    batch_ratio, latency_ratio = ratio("batch_s"), ratio("latency_s")
    result.figures = {"summary": summary, "runs": runs, "ratio_batch_p50": batch_ratio,
                      "ratio_latency_p50": latency_ratio}
    result.targets += [
        Target("light: batch duration p50 (s)", batch_p50, f"≤ {_TARGETS['batch_p50_s']} s",
               batch_p50 is not None and batch_p50 <= _TARGETS["batch_p50_s"]),
        Target("light: latency p50 (s)", lat_p50, f"≤ {_TARGETS['latency_p50_s']} s",
               lat_p50 is not None and lat_p50 <= _TARGETS["latency_p50_s"]),
        Target("light: latency p99 (s)", lat_p99, f"≤ {_TARGETS['latency_p99_s']} s",
               lat_p99 is not None and lat_p99 <= _TARGETS["latency_p99_s"]),
        Target("light: batch p50 ratio tenure / bare", batch_ratio, f"≤ {_TARGETS['ratio']}",
               batch_ratio is not None and batch_ratio <= _TARGETS["ratio"]),
        Target("light: latency p50 ratio tenure / bare", latency_ratio, f"≤ {_TARGETS['ratio']}",
               latency_ratio is not None and latency_ratio <= _TARGETS["ratio"]),
    ]
    samples = {f"{key.replace('/', ' ')} (latency)": [x for r in runs if f"{r['load']}/{r['run']}" == key
                                                       for x in r["latencies"]] for key in summary}
    add_plot(result, ctx.out, lambda path: latency_plot(
        path, samples, {"p50 target": _TARGETS["latency_p50_s"], "p99 target": _TARGETS["latency_p99_s"]},
        "End-to-end latency: queue file landed → visible in table/ (CDF)", log_x=True))
    result.notes += [
        "Latency: a queue file's mtime (the producer writes it under a hidden name, fsyncs, renames it into "
        "`landing/`) → its batch visible in `table/` (tenure: the first 10 ms poll that sees the batch's published "
        "part files; bare: its `foreachBatch` write returned). One sample per queue file; every file holds the "
        "same number of records, so per file is per record.",
        "Batch duration: Spark's offset log entry for the batch (written at the trigger, after the source "
        "listing) → the fenced commit (tenure, `committed_at` of the commit record) or the write's end (bare).",
        f"Before the steady load, each run is fed rate × {_WINDOW_S:g} s of ids at once (the default dedup "
        "window): Spark scans its whole dedup state every batch, so the measured batches pay for the state a "
        "steady load keeps. Batches reading those files are left out.",
        f"The first {skip} steady batches of each run are left out (a new query's class loading and "
        "JIT); tenure's replica is warm (its warm-up ran the pipeline) and alone (no followers) on the 2 cores.",
    ]
    return result
