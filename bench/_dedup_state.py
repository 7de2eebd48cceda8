"""What a remembered id costs: the bare query's batch duration at a light load as its dedup state grows.

Spark's ``dropDuplicatesWithinWatermark`` expires ids by scanning its whole state in every batch, so a batch
costs time in proportion to the ids remembered (``rate × dedup_window`` at equilibrium). One query (one JVM)
measures a light load's batches, then is fed a burst of new ids, then measures again, up to the largest size.

Run as a child: ``python -m bench._dedup_state --out figures.json --sizes 0 250000 …``.
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

from bench._common import BenchContext, Result, Target
from bench._plots import add_plot, pyplot, save
from tenure.career.queue import QueueLayout
from tenure.career.spark._layout import Layout

__all__ = ["main", "run_dedup_state"]

_LIGHT_FILES = 15  # measured batches per size: one 1 000-record file a second
_SKIP = 3  # the first batches after a burst (its last big batch may still be in flight)
_BURST_FILE = 50_000


def _measure(sizes: list[int], out: Path) -> None:
    from bench._query import session, start_query
    from tenure.career.spark import SparkCareerConfig
    from tenure.service.ops import produce

    root = Path(tempfile.mkdtemp(prefix="tenure-dedup-state-"))
    QueueLayout(root).landing.mkdir()
    config = SparkCareerConfig(data_root=root, dedup_window="24 hours")  # nothing expires during the run
    spark = session(config, "dedup-state")
    batches: list[dict[str, Any]] = []
    lock = threading.Lock()

    def on_batch(batch: dict[str, Any]) -> None:
        with lock:
            batches.append({"batch_id": batch["batch_id"], "written": batch["written"],
                            "seconds": batch["committed_at"] - batch["started_at"]})

    query = start_query(spark, config, checkpoint=Layout(root).checkpoint, table=Layout(root).table,
                        quarantine=Layout(root).quarantine, on_batch=on_batch)

    def wait_for(total: int) -> None:
        deadline = time.monotonic() + 900
        while sum(b["written"] for b in batches) < total:
            if time.monotonic() > deadline or not query.isActive:
                raise RuntimeError(f"the query wrote {sum(b['written'] for b in batches)} of {total} records")
            time.sleep(0.2)

    results, fed, seed = [], 0, 1
    try:
        produce(root, records=5000, keys=100, rate=1000, seed=seed, progress=False, batch_records=1000,
                flush_interval_s=1.0)  # JIT warm-up
        fed += 5000
        wait_for(fed)
        for size in sorted(sizes):
            if size > fed - 5000:
                burst = size - (fed - 5000)
                seed += 1
                produce(root, records=burst, keys=100, seed=seed, progress=False, batch_records=_BURST_FILE,
                        batch_bytes=1 << 30, flush_interval_s=3600.0)
                fed += burst
                wait_for(fed)
            mark = len(batches)
            seed += 1
            produce(root, records=_LIGHT_FILES * 1000, keys=100, rate=1000, seed=seed, progress=False,
                    batch_records=1000, flush_interval_s=1.0)
            fed += _LIGHT_FILES * 1000
            wait_for(fed)
            light = [b["seconds"] for b in batches[mark:] if b["written"]][_SKIP:]
            state = query.lastProgress["stateOperators"][0]["numRowsTotal"] if query.lastProgress else None
            results.append({"ids_remembered": size, "state_rows": state, "batches": len(light),
                            "batch_p50_s": round(statistics.median(light), 3) if light else None})
            print(f"dedup_state: {results[-1]}", file=sys.stderr, flush=True)
    finally:
        query.stop()
        spark.stop()
    out.write_text(json.dumps({"sizes": results}) + "\n")


def _slope(rows: list[dict[str, Any]]) -> float | None:
    """Least-squares seconds per million state rows."""
    points = [(r["state_rows"] / 1e6, r["batch_p50_s"]) for r in rows
              if r["state_rows"] is not None and r["batch_p50_s"] is not None]
    if len(points) < 2:
        return None
    mx, my = statistics.fmean(p[0] for p in points), statistics.fmean(p[1] for p in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return round(sum((x - mx) * (y - my) for x, y in points) / den, 3) if den else None


def _plot(rows: list[dict[str, Any]], slope: float | None, path: Path) -> None:
    """Batch p50 against state rows, with the least-squares line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    points = [(r["state_rows"] / 1e6, r["batch_p50_s"]) for r in rows if r["state_rows"] is not None]
    ax.plot([x for x, _ in points], [y for _, y in points], "o-", color="tab:green", label="bare pipeline, batch p50")
    if slope is not None and points:
        x0, y0 = points[0]
        ax.plot([x0, points[-1][0]], [y0, y0 + slope * (points[-1][0] - x0)], "--", color="grey",
                label=f"slope {slope:g} s per million rows")
    ax.axvline(0.12, color="tab:blue", linestyle=":", label="default window at 1 000 records/s (0.12 M)")
    ax.set_xlabel("dedup state rows (millions)")
    ax.set_ylabel("batch duration p50 (s)")
    ax.set_title("A light load's batch cost vs the ids the dedup state remembers", fontsize=10, loc="left")
    ax.legend(fontsize=8)
    save(fig, path)


def run_dedup_state(ctx: BenchContext) -> Result:
    """Batch duration against remembered ids, in a child process (a fresh JVM)."""
    sizes = [0, 50_000] if ctx.quick else [0, 250_000, 500_000, 1_000_000, 2_000_000]
    result = Result(
        name="dedup_state", title="Batch duration vs ids remembered by the dedup state (bare pipeline)",
        command="python -m bench.run --only dedup_state",
        params={"sizes": sizes, "light_load": "1 000 records/s, one file a second", "burst_file_records": _BURST_FILE,
                "spark": "career defaults: local[2], 2 shuffle partitions, UI off, RocksDB state",
                "query": "bench._query.start_query, the bare query the latency and throughput baselines run"},
    )
    out = ctx.work / "dedup-state.json"
    with (ctx.work / "dedup-state.log").open("ab") as log:
        subprocess.run([sys.executable, "-m", "bench._dedup_state", "--out", str(out), "--sizes",
                        *map(str, sizes)], stdout=log, stderr=subprocess.STDOUT, check=True, timeout=3600)
    rows = json.loads(out.read_text())["sizes"]
    slope = _slope(rows)
    result.table = [{"ids remembered": r["ids_remembered"], "state rows": r["state_rows"],
                     "batches": r["batches"], "batch p50 s": r["batch_p50_s"]} for r in rows]
    result.figures = {"sizes": rows, "seconds_per_million_state_rows": slope}
    default_rows = 1000 * 120  # the default window (2 minutes) at the light load
    extra = round(slope * default_rows / 1e6, 3) if slope is not None else None
    result.targets.append(Target("batch cost of the default window at 1 000 records/s (s)", extra,
                                 "≤ 0.1 s", extra is not None and extra <= 0.1))
    add_plot(result, ctx.out, lambda path: _plot(rows, slope, path))
    result.notes += notes(slope)
    return result


def notes(slope: float | None) -> list[str]:
    """What the slope means for the default window and the old one."""
    old = "—" if slope is None else f"about {slope * 86.4:.1g} s"
    return [
        f"Slope: {slope} s of batch time per million state rows (least squares over the sizes). At equilibrium "
        "the state holds rate × dedup_window ids (plus one row per queue file and per bad line).",
        f"The old default window, 24 hours, holds 86.4 million ids at 1 000 records/s: by this slope {old} more "
        "per batch, more than the producer's second per file, so the consumer would fall ever further behind. "
        "The default is now 2 minutes.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._dedup_state")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", type=int, nargs="+", required=True)
    args = parser.parse_args(argv)
    _measure(args.sizes, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
