"""What one archive sweep costs as the archive fills up: the reason it runs beside the control loop.

`.venv/bin/python -m bench.probes.sweep_cost [ROUNDS]` (from the repository root, nothing else
running) fills an archive with empty queue files, none past retention, and times
`tenure.career.spark._archive.sweep_archive` over it ROUNDS times per size (it stats every file and deletes none).
The default retention, 7 days, keeps 1.2 million files of a queue that lands 2 files a second. It writes
`results.json` and `results.md` to `bench/results/archive-sweep/`: the figures `docs/concepts/pipeline.md` quotes
(why the sweep runs on a thread of its own).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.probes import results_folder
from tenure.career.spark._archive import sweep_archive
from tenure.career.spark._layout import Layout

_HERE = results_folder("archive-sweep")
_SIZES = (10_000, 100_000, 300_000)
_RETENTION_S = 7 * 24 * 3600.0


def _measure(size: int, rounds: int) -> list[float]:
    with tempfile.TemporaryDirectory() as scratch:
        layout = Layout(Path(scratch))
        layout.archive.mkdir(parents=True)
        for i in range(size):
            (layout.archive / f"q-{i:08d}.jsonl").touch()
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            assert sweep_archive(layout.queue, _RETENTION_S, time.time()) == 0
            times.append(time.perf_counter() - started)
        return times


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    results = {str(size): [round(t, 3) for t in _measure(size, rounds)] for size in _SIZES}
    (_HERE / "results.json").write_text(json.dumps({"rounds": rounds, "seconds_by_files": results}, indent=2) + "\n")
    lines = [
        "# One archive sweep against the size of the archive",
        "",
        f"`.venv/bin/python -m bench.probes.sweep_cost {rounds}`: seconds per sweep that deletes "
        "nothing (every file stat'ed), each size swept "
        f"{rounds} times in a row.",
        "",
        "| archived files | median s | each round s |",
        "|---|---|---|",
    ]
    for size, times in results.items():
        lines.append(f"| {int(size):,} | {statistics.median(times):.3f} | {', '.join(f'{t:.3f}' for t in times)} |")
    (_HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
