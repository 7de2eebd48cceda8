"""Paired throughput runs: the throughput bench's records consumed several ways, every way once per round, the
order rotating, so that ways are compared within one run on one machine's speed of the moment.

A probe (``bench/probes/<name>.py``) names its ways and calls :func:`main`; it writes every run's figures to
``results.json`` in its results folder (``bench/results/<dir>/``) and, per way, the median over rounds of the
steady records/s, of the median read step and batch, and each way's ratio to the first way, to ``results.md``
(``--render`` writes ``results.md`` again from ``results.json``).
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench._throughput import _RECORDS_PER_FILE, produce_records
from tenure.career.queue import QueueLayout

__all__ = ["RECORDS", "Way", "main"]

RECORDS = 1_000_000
"""The throughput bench's full run: 100 files of 10 000 records, 20 batches at 5 files a trigger."""

Way = Callable[[Path, Path, int], dict[str, Any]]
"""One way of consuming the records: ``(work folder, folder of produced files, records) -> figures`` as the
throughput bench's run functions return them (``records_per_s``, ``read_s``, ``in_batch_s``, ``steps_s``, …)."""

_KEPT = ("records_per_s", "read_s", "in_batch_s", "steps_s", "batch_interval_s", "steady_batches", "cpu")


def _order(names: list[str], index: int) -> list[str]:
    """Round ``index``'s order: the ways rotated by one place a round, so each way runs first, second, … in turn."""
    shift = index % len(names)
    return names[shift:] + names[:shift]


def _measure(ways: Mapping[str, Way], rounds: int, command: str) -> dict[str, Any]:
    names = list(ways)
    scratch = Path(tempfile.mkdtemp(prefix="tenure-paired-"))
    try:
        source = scratch / "source"
        produce_records(source, RECORDS)
        landing = QueueLayout(source).landing
        runs: list[dict[str, Any]] = []
        for index in range(rounds):
            for way in _order(names, index):
                work = scratch / f"{re.sub(r'[^A-Za-z0-9]+', '-', way)}-{index}"
                work.mkdir()
                started = time.monotonic()
                figures = ways[way](work, landing, RECORDS)
                runs.append({"way": way, "round": index + 1, "seconds": round(time.monotonic() - started, 1),
                             **{k: figures.get(k) for k in _KEPT}})
                print(f"round {index + 1} {way}: {figures.get('records_per_s')} records/s", file=sys.stderr)
                shutil.rmtree(work, ignore_errors=True)
        return {"command": command, "records": RECORDS, "records_per_file": _RECORDS_PER_FILE, "rounds": rounds,
                "runs": runs}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _p50(run: dict[str, Any], key: str) -> float | None:
    figure = run.get(key) or (run.get("steps_s") or {}).get(key) or {}
    value = figure.get("p50")
    return float(value) if value is not None else None


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _fmt(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _render(results: dict[str, Any], title: str, ways: list[str]) -> str:
    runs = results["runs"]
    rate = {way: _median([r["records_per_s"] for r in runs if r["way"] == way]) for way in ways}
    lines = [
        f"# {title}",
        "",
        f"`{results['command']}`: {results['records']:,} records in files of {results['records_per_file']:,}, "
        f"{results['rounds']} rounds, the ways' order rotating. Medians over rounds (each run's own figures: "
        "steady records/s after its first 3 batches with data, and the p50 of its steady batches' read step and "
        "whole batch). Every run is in `results.json`.",
        "",
        f"| way | records/s | ratio to {ways[0]} | read p50 s | in foreachBatch p50 s | runs' records/s |",
        "|---|---|---|---|---|---|",
    ]
    base = rate[ways[0]]
    for way in ways:
        mine = [r for r in runs if r["way"] == way]
        mine_rate = rate[way]
        ratio = f"{mine_rate / base:.3f}" if mine_rate and base else ""
        read, batch = _median([_p50(r, "read_s") for r in mine]), _median([_p50(r, "in_batch_s") for r in mine])
        lines.append(f"| {way} | {_fmt(mine_rate, ',.0f')} | {ratio} | {_fmt(read, '.3f')} | {_fmt(batch, '.3f')} | "
                     + ", ".join(_fmt(r["records_per_s"], ",.0f") for r in mine) + " |")
    return "\n".join(lines) + "\n"


def main(module: str, out: Path, title: str, ways: Mapping[str, Way], *, default_rounds: int = 3) -> None:
    """Measure (``python -m <module> [ROUNDS]``) or render again (``--render``) into the folder ``out``."""
    here = out
    if sys.argv[1:] == ["--render"]:
        results = json.loads((here / "results.json").read_text())
    else:
        rounds = int(sys.argv[1]) if len(sys.argv) > 1 else default_rounds
        command = f".venv/bin/python -m {module} {rounds}"
        results = _measure(ways, rounds, command)
        (here / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (here / "results.md").write_text(_render(results, title, list(ways)))
