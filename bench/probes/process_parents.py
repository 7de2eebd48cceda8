"""Which of Spark's Python processes in a sampler's record (`python-processes.jsonl`) were new interpreters and
which were forks of a daemon already running: a fork's parent is a process with the same command line.

Run: `.venv/bin/python -m bench.probes.process_parents bench/results/issue-30-lazy/python-processes.jsonl` (prints
a Markdown table, one row per kind of process): the table of `bench/results/issue-30-lazy/process-parents.md`, which
`docs/performance/first-batch.md` quotes."""

import json
import sys
from collections import Counter


def main(path: str) -> None:
    with open(path) as lines:
        rows = [json.loads(line) for line in lines]
    by_pid = {row["pid"]: row for row in rows}
    counts: Counter[tuple[str, str]] = Counter()
    for row in rows:
        kind = next((mark for mark in ("create_data_source", "plan_data_source_read", "lookup_data_sources",
                                       "python_streaming_source_runner", "pyspark.worker")
                     if mark in row["cmd"]), None)
        if kind is None:
            continue
        parent = by_pid.get(row["ppid"])
        counts[kind, "fork of a running daemon" if parent and parent["cmd"] == row["cmd"] else "new interpreter"] += 1
    print("| process | new interpreter | fork of a running daemon |\n|---|---|---|")
    for kind in sorted({k for k, _ in counts}):
        print(f"| `{kind}` | {counts[kind, 'new interpreter']} | {counts[kind, 'fork of a running daemon']} |")


if __name__ == "__main__":
    main(sys.argv[1])
