"""What a batch's Delta step costs as its output folder fills up: listing the folder, or the files the record names.

`.venv/bin/python -m bench.probes.publish_cost [BATCHES]` (from the repository root, nothing else
running) builds, for each folder size, an output folder holding a Delta table and that many published part files
(empty files of batch 0, which the table covers: only their names matter to a listing), then publishes BATCHES
batches of one small real part file each with `tenure.career.output.publish_batch`, alternating the two ways
batch by batch: a record of the earlier release (no `parts`: the folder is listed) and a record that names its
files (`parts`). It reports the median and 90th percentile of each way's call, and a bare `os.listdir` of the
folder, and writes `results.json` and `results.md` to `bench/results/issue-29-listing/`: the figures
`docs/performance/delta-output.md` quotes for naming a batch's files in its record (issue 29).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.probes import results_folder
from tenure.career.output import publish_batch

_HERE = results_folder("issue-29-listing")
_SIZES = (0, 100_000, 300_000)
_WAYS = ("listed (no parts)", "named (parts)")


def _part(folder: Path, batch: int) -> str:
    name = f"batch-{batch:012d}-part-00000.parquet"
    pq.write_table(pa.table({"id": [f"{batch}-0"], "_epoch": [7], "_batch": [batch]}), folder / name)
    return name


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _measure(size: int, batches: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "table"
        folder.mkdir()
        publish_batch(folder, 0, epoch=7, replica_id="bench", parts=[_part(folder, 0)])
        for i in range(size):
            (folder / f"batch-{0:012d}-filler-{i:07d}.parquet").touch()
        times: dict[str, list[float]] = {way: [] for way in (*_WAYS, "os.listdir")}
        for batch in range(1, batches + 1):
            way = _WAYS[batch % 2]
            name = _part(folder, batch)
            started = time.perf_counter()
            made = publish_batch(folder, batch, epoch=7, replica_id="bench",
                                 parts=[name] if way == _WAYS[1] else None)
            times[way].append(time.perf_counter() - started)
            assert made is not None, f"batch {batch} added no version"
            started = time.perf_counter()
            os.listdir(folder)
            times["os.listdir"].append(time.perf_counter() - started)
        return {way: {"p50_ms": round(1000 * statistics.median(t), 2), "p90_ms": round(1000 * _quantile(t, 0.9), 2)}
                for way, t in times.items()}


def main() -> None:
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    results = {str(size): _measure(size, batches) for size in _SIZES}
    (_HERE / "results.json").write_text(json.dumps({"batches": batches, "by_folder_size": results}, indent=2) + "\n")
    lines = [
        "# A batch's Delta step against the size of its output folder",
        "",
        f"`.venv/bin/python -m bench.probes.publish_cost {batches}`: {batches} batches per folder "
        "size, the two ways alternating batch by batch; milliseconds per `publish_batch` call (the Delta commit, "
        "its fsyncs and, for a record without `parts`, the folder's listing).",
        "",
        "| files in the folder | way | p50 ms | p90 ms |",
        "|---|---|---|---|",
    ]
    for size, ways in results.items():
        for way, figures in ways.items():
            lines.append(f"| {int(size):,} | {way} | {figures['p50_ms']} | {figures['p90_ms']} |")
    (_HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
