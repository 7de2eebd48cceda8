"""What a new query's first batch pays to load the dedup state, against the changelog chain it replays.

With RocksDB changelog checkpointing, each batch writes a changelog; a snapshot of the whole store reaches the
checkpoint only when Spark's state-store maintenance uploads one, every
``spark.sql.streaming.stateStore.maintenanceInterval`` (Spark's default: 60 s). A new query (a new leader's term)
loads the newest snapshot and replays every changelog after it, so if terms are shorter than the interval, the
chain grows with every term. One query per round on one checkpoint, in one JVM per policy: each round runs a
steady load for a while, stops, and starts a new query whose first batch is measured.

Run as a child: ``python -m bench._state_chain --out figures.json --maintenance 3600s --changelog true …``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench._common import BenchContext, Result
from bench._plots import add_plot, pyplot, save
from tenure.career.queue import QueueLayout
from tenure.career.spark._layout import Layout

__all__ = ["POLICIES", "main", "run_state_chain"]

# name → (changelog checkpointing, maintenance interval)
POLICIES: dict[str, tuple[str, str]] = {
    "changelog, no upload (maintenance 1 h)": ("true", "3600s"),
    "changelog, maintenance 60 s (Spark's default)": ("true", "60s"),
    "changelog, maintenance 5 s": ("true", "5s"),
    "snapshot every batch (no changelog)": ("false", "60s"),
}
_LIGHT_FILES = 5  # measured after each restart: one 1 000-record file a second


def _versions(state: Path) -> tuple[int | None, int | None]:
    """The newest version and the newest snapshot version over the state's partitions (lowest snapshot wins)."""
    newest, snapshots = None, []
    for partition in sorted(p for p in state.glob("0/*") if p.is_dir() and p.name.isdigit()):
        names = [p.name for p in partition.iterdir() if not p.name.startswith(".")]
        versions = [int(n.split(".")[0]) for n in names if n.endswith((".changelog", ".zip"))]
        if versions:
            newest = max(versions if newest is None else [newest, *versions])
        zips = [int(n.split(".")[0]) for n in names if n.endswith(".zip")]
        snapshots.append(max(zips) if zips else 0)
    return newest, (min(snapshots) if snapshots else None)


def _measure(changelog: str, maintenance: str, state_ids: int, rounds: int, round_files: int, out: Path) -> None:
    from bench._query import session, start_query
    from tenure.career.spark import SparkCareerConfig
    from tenure.service.ops import produce

    root = Path(tempfile.mkdtemp(prefix="tenure-state-chain-"))
    QueueLayout(root).landing.mkdir()
    conf = {"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": changelog,
            "spark.sql.streaming.stateStore.maintenanceInterval": maintenance}
    config = SparkCareerConfig(data_root=root, dedup_window="24 hours", spark_conf=conf)  # nothing expires
    spark = session(config, "state-chain")
    batches: list[dict[str, Any]] = []
    lock = threading.Lock()
    query_no = [0]

    def on_batch(batch: dict[str, Any]) -> None:
        with lock:
            batches.append({"query": query_no[0], "written": batch["written"],
                            "seconds": batch["committed_at"] - batch["started_at"]})

    def start() -> Any:
        query_no[0] += 1
        return start_query(spark, config, checkpoint=Layout(root).checkpoint, table=Layout(root).table,
                           quarantine=Layout(root).quarantine, on_batch=on_batch)

    fed, seed = 0, 0

    def feed(records: int, **kwargs: Any) -> None:
        nonlocal fed, seed
        seed += 1
        produce(root, records=records, keys=100, seed=seed, progress=False, **kwargs)
        fed += records
        deadline = time.monotonic() + 900
        while sum(b["written"] for b in batches) < fed:
            if time.monotonic() > deadline or not query.isActive:
                raise RuntimeError(f"the query wrote {sum(b['written'] for b in batches)} of {fed} records")
            time.sleep(0.1)

    query = start()
    rows = []
    try:
        feed(5000, rate=1000, batch_records=1000, flush_interval_s=1.0)  # JIT warm-up
        feed(state_ids, batch_records=50_000, batch_bytes=1 << 30, flush_interval_s=3600.0)
        for number in range(1, rounds + 1):
            mark = len(batches)
            feed(round_files * 500, rate=2000, batch_records=500, flush_interval_s=0.25)  # a term's steady load
            steady = [b["seconds"] for b in batches[mark:] if b["written"]]
            time.sleep(1.0)  # let a due maintenance run finish its upload, as a leader's last second would
            query.stop()
            newest, snapshot = _versions(Layout(root).checkpoint / "state")
            query = start()
            mark = len(batches)
            feed(_LIGHT_FILES * 1000, rate=1000, batch_records=1000, flush_interval_s=1.0)
            after = [b["seconds"] for b in batches[mark:] if b["written"]]
            rows.append({"round": number, "version": newest, "snapshot": snapshot,
                         "chain": None if newest is None or snapshot is None else newest - snapshot,
                         "steady_p50_s": round(statistics.median(steady), 3),
                         "first_s": round(after[0], 3), "later_p50_s": round(statistics.median(after[1:]), 3)})
            print(f"state_chain: {rows[-1]}", file=sys.stderr, flush=True)
    finally:
        query.stop()
        spark.stop()
    out.write_text(json.dumps({"rounds": rows}) + "\n")


def _plot(by_policy: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """First batch after a restart against the changelogs replayed, per policy."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, rows in by_policy.items():
        points = [(r["chain"], r["first_s"]) for r in rows if r["chain"] is not None]
        ax.plot([x for x, _ in points], [y for _, y in points], "o-", label=name)
    ax.set_xlabel("changelogs replayed by the new query (newest version − newest snapshot)")
    ax.set_ylabel("the new query's first batch (s)")
    ax.set_title("A restart's first batch vs the state's changelog chain", fontsize=10, loc="left")
    ax.legend(fontsize=8)
    save(fig, path)


def run_state_chain(ctx: BenchContext) -> Result:
    """Every policy in a child process (a fresh JVM: the maintenance interval is fixed at the JVM's first use)."""
    rounds, round_files, state_ids = (2, 10, 10_000) if ctx.quick else (5, 40, 240_000)
    result = Result(
        name="state_chain", title="A new query's first batch vs the dedup state's changelog chain",
        command="python -m bench.run --only state_chain",
        params={"policies": {name: {"changelogCheckpointing": c, "maintenanceInterval": m}
                             for name, (c, m) in POLICIES.items()},
                "ids_in_state": state_ids, "rounds": rounds,
                "round": f"{round_files} files of 500 records at 2 000 records/s, stop, start a new query, "
                         f"{_LIGHT_FILES} files of 1 000 at one a second",
                "query": "bench._query.start_query, the bare query the latency and throughput baselines run"},
    )
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for index, (name, (changelog, maintenance)) in enumerate(POLICIES.items()):
        out = ctx.work / f"policy-{index}.json"
        with (ctx.work / f"policy-{index}.log").open("ab") as log:
            subprocess.run([sys.executable, "-m", "bench._state_chain", "--out", str(out), "--changelog", changelog,
                            "--maintenance", maintenance, "--state-ids", str(state_ids), "--rounds", str(rounds),
                            "--round-files", str(round_files)],
                           stdout=log, stderr=subprocess.STDOUT, check=True, timeout=3600)
        by_policy[name] = json.loads(out.read_text())["rounds"]
    result.table = [{"policy": name, "round": r["round"], "version": r["version"], "newest snapshot": r["snapshot"],
                     "changelogs replayed": r["chain"], "steady batch p50 s": r["steady_p50_s"],
                     "first batch after restart s": r["first_s"], "later batches p50 s": r["later_p50_s"]}
                    for name, rows in by_policy.items() for r in rows]
    result.figures = {"policies": by_policy}
    add_plot(result, ctx.out, lambda path: _plot(by_policy, path))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._state_chain")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--changelog", choices=["true", "false"], required=True)
    parser.add_argument("--maintenance", required=True)
    parser.add_argument("--state-ids", type=int, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--round-files", type=int, required=True)
    args = parser.parse_args(argv)
    _measure(args.changelog, args.maintenance, args.state_ids, args.rounds, args.round_files, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
