"""Does the warm-up slow the leader's steady state? The throughput bench's runs, with a cold-standby replica added.

`.venv/bin/python bench/results/issue-29-standby/standby.py [ROUNDS]` (from the repository root, nothing else
running) produces the throughput bench's records (1 000 000 in files of 10 000), then, ROUNDS times in a rotating
order, runs the bench's three ways over hard links of them (`bench/_throughput.py`):

- `bare`: the bare query (`bench/_bare.py`);
- `tenure warm`: one `tenure run --career spark` replica with the default warm standby, whose JVM ran the warm-up's
  query over a scratch sample (`career/spark/_warmup.py`) before it led;
- `tenure cold`: the same replica with `--standby cold`, whose JVM starts at inauguration and runs only the
  leader's query.

It writes every run's figures to `results.json` and, per way, the median over rounds of its steady records/s and of
its median read step and batch, with each tenure way's ratio to the bare query, to `results.md`
(`standby.py --render` writes `results.md` again from `results.json`).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_WAYS = ("bare", "tenure warm", "tenure cold")
_RECORDS, _PER_FILE = 1_000_000, 10_000


def _measure(rounds: int) -> dict[str, Any]:
    sys.path.insert(0, str(_HERE.parents[2]))  # the repository root: `bench` is not an installed package
    from bench._throughput import _run_bare, _run_tenure
    from tenure.career.queue import QueueLayout
    from tenure.service.ops import produce

    scratch = Path(tempfile.mkdtemp(prefix="tenure-standby-"))
    try:
        source = scratch / "source"
        produce(source, records=_RECORDS, keys=100, seed=4, progress=False, batch_records=_PER_FILE,
                batch_bytes=1 << 30, flush_interval_s=3600.0)
        runs: list[dict[str, Any]] = []
        for index in range(rounds):
            order = _WAYS[index % 3:] + _WAYS[:index % 3]
            for way in order:
                work = scratch / f"{way.replace(' ', '-')}-{index}"
                work.mkdir()
                landing = QueueLayout(source).landing
                started = time.monotonic()
                if way == "bare":
                    figures = _run_bare(work, landing, _RECORDS)
                else:
                    figures = _run_tenure(work, landing, _RECORDS, standby=way.split()[1])
                runs.append({"way": way, "round": index + 1, "seconds": round(time.monotonic() - started, 1),
                             **{k: figures.get(k) for k in ("records_per_s", "read_s", "in_batch_s", "steps_s",
                                                           "batch_interval_s", "steady_batches", "cpu")}})
                print(f"round {index + 1} {way}: {figures.get('records_per_s')} records/s", file=sys.stderr)
                shutil.rmtree(work, ignore_errors=True)
        return {"command": f".venv/bin/python bench/results/issue-29-standby/standby.py {rounds}",
                "records": _RECORDS, "records_per_file": _PER_FILE, "rounds": rounds, "runs": runs}
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


def _render(results: dict[str, Any]) -> str:
    runs = results["runs"]
    rate = {way: _median([r["records_per_s"] for r in runs if r["way"] == way]) for way in _WAYS}
    lines = [
        "# Does the warm-up slow the leader's steady state?",
        "",
        f"`{results['command']}`: {results['records']:,} records in files of {results['records_per_file']:,}, "
        f"{results['rounds']} rounds, the ways' order rotating. Medians over rounds (each run's own figures: "
        "steady records/s after its first 3 batches with data, and the p50 of its steady batches' read step and "
        "whole batch). Every run is in `results.json`.",
        "",
        "| way | records/s | ratio to bare | read p50 s | in foreachBatch p50 s | runs' records/s |",
        "|---|---|---|---|---|---|",
    ]
    bare = rate["bare"]
    for way in _WAYS:
        mine = [r for r in runs if r["way"] == way]
        mine_rate = rate[way]
        ratio = f"{mine_rate / bare:.3f}" if mine_rate and bare else ""
        read, batch = _median([_p50(r, "read_s") for r in mine]), _median([_p50(r, "in_batch_s") for r in mine])
        lines.append(f"| {way} | {_fmt(mine_rate, ',.0f')} | {ratio} | {_fmt(read, '.3f')} | {_fmt(batch, '.3f')} | "
                     + ", ".join(_fmt(r["records_per_s"], ",.0f") for r in mine) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if sys.argv[1:] == ["--render"]:
        results = json.loads((_HERE / "results.json").read_text())
    else:
        results = _measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
        (_HERE / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (_HERE / "results.md").write_text(_render(results))


if __name__ == "__main__":
    main()
