"""Run the benchmarks: ``python -m bench.run [--quick] [--only NAME ...] [--out DIR]``.

Results go to ``bench/results/<UTC date>/`` by default (``<UTC date>-quick`` with ``--quick``, whose sizes give no
figures to quote): ``<name>.json``, ``<name>.md`` and the benchmark's plots (``<name>.png``) per benchmark, which
a later run into the same folder overwrites only for the benchmarks it ran, and ``summary.json`` and
``SUMMARY.md``, merged by benchmark name: they describe every benchmark in the folder, each from its latest run.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._common import BenchContext, Result, machine, markdown_table, write_result
from tenure.service._logs import configure_logging

__all__ = ["BENCHMARKS", "main"]

_RESULTS = Path(__file__).resolve().parent / "results"

# name → "module:function"; modules load lazily, so the ZooKeeper-only benchmarks never import Spark.
BENCHMARKS: dict[str, str] = {
    "herd": "bench._herd:run_herd",
    "fence_latency": "bench._fence_latency:run_fence_latency",
    "handover": "bench._handover:run_handover",
    "failover": "bench._handover:run_failover",
    "election_failover": "bench._election_failover:run_election_failover",
    "targeted": "bench._targeted:run_targeted",
    "throughput": "bench._throughput:run_throughput",
    "latency": "bench._latency:run_latency",
    "dedup_state": "bench._dedup_state:run_dedup_state",
    "state_chain": "bench._state_chain:run_state_chain",
    "footprint": "bench._footprint:run_footprint",
    "cluster": "bench._on_cluster:run_cluster",
}


def _load(name: str) -> Callable[[BenchContext], Result]:
    module_name, _, attr = BENCHMARKS[name].partition(":")
    function: Callable[[BenchContext], Result] = getattr(importlib.import_module(module_name), attr)
    return function


def run_one(name: str, ctx: BenchContext) -> Result:
    """Run one benchmark; a failure becomes a result with ``error`` set, so the others still run."""
    started = time.monotonic()
    load_before = os.getloadavg()
    work = ctx.work / name
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = _load(name)(dataclasses.replace(ctx, work=work))
    except Exception as exc:
        traceback.print_exc()
        result = Result(name=name, title=name, command=f"python -m bench.run --only {name}",
                        error=f"{type(exc).__name__}: {exc}")
    result.seconds = round(time.monotonic() - started, 1)
    # Other work on the machine skews every figure; the 1-minute load average says how busy it was.
    result.params["load_avg_1m_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    if ctx.quick:
        result.command += " --quick"
    if ctx.rounds is not None:
        result.command += f" --rounds {ctx.rounds}"
    write_result(ctx.out, result)
    return result


def _merge_summary(out: Path, results: Sequence[Result], total_s: float, quick: bool,
                   argv: Sequence[str]) -> dict[str, Any]:
    """``out/summary.json`` with this invocation's benchmarks replacing their earlier entries (others kept) and
    the invocation appended to ``invocations``; an unreadable summary starts afresh."""
    path = out / "summary.json"
    try:
        summary: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        summary = {}
    if not isinstance(summary, dict):
        summary = {}
    finished_at = datetime.now(UTC).isoformat(timespec="seconds")
    benchmarks = dict(summary.get("benchmarks") or {})
    for r in results:
        benchmarks[r.name] = {"seconds": r.seconds, "error": r.error, "targets": [t.row() for t in r.targets],
                              "quick": quick, "command": r.command, "finished_at": finished_at}
    invocations = [*summary.get("invocations", []),
                   {"command": " ".join(["python -m bench.run", *argv]), "quick": quick,
                    "total_s": round(total_s, 1), "finished_at": finished_at, "benchmarks": [r.name for r in results]}]
    rank = {name: index for index, name in enumerate(BENCHMARKS)}  # the registry's order, then others by name
    ordered = dict(sorted(benchmarks.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])))
    return {"machine": machine(), "benchmarks": ordered, "invocations": invocations}


def _summary_markdown(out: Path, summary: dict[str, Any]) -> str:
    """SUMMARY.md: the machine, every invocation, the targets and each benchmark's markdown, from the folder's
    ``<name>.json`` files (a benchmark whose file is gone is named, not shown)."""
    results, missing = [], []
    for name in summary["benchmarks"]:
        try:
            results.append(Result.from_json(json.loads((out / f"{name}.json").read_text())))
        except (OSError, ValueError, TypeError):
            missing.append(name)
    quick = any(entry.get("quick") for entry in summary["benchmarks"].values())
    lines = [f"# tenure benchmarks: {out.name}" + (" (some --quick: tiny sizes, not figures to quote)" if quick
                                                    else ""), "",
             markdown_table([{"command": i["command"], "benchmarks": ", ".join(i["benchmarks"]),
                              "minutes": round(i["total_s"] / 60, 1), "finished (UTC)": i["finished_at"]}
                             for i in summary.get("invocations", [])]), "",
             markdown_table([summary["machine"]]), ""]
    targets = [{"benchmark": r.name, **t.row()} for r in results for t in r.targets]
    if targets:
        lines += ["## Targets", "", markdown_table(targets), ""]
    if missing:
        lines += [f"Listed in summary.json but without a readable result file: {', '.join(missing)}.", ""]
    lines += [result.to_markdown() for result in results]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run the chosen benchmarks in order, write results and SUMMARY.md; exit 1 on an error."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: seconds to minutes (the smoke test)")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), metavar="NAME",
                        help=f"run only these ({', '.join(BENCHMARKS)})")
    parser.add_argument("--out", type=Path, default=None,
                        help="where results go (default: bench/results/<UTC date>, or <UTC date>-quick with "
                             "--quick; a run into a folder with results replaces only the benchmarks it ran)")
    parser.add_argument("--work", type=Path, default=None,
                        help="scratch folder (default: a temporary one, removed afterwards)")
    parser.add_argument("--keep-work", action="store_true", help="keep the scratch folder (logs, data)")
    parser.add_argument("--budget-min", type=float, default=None,
                        help="per benchmark: start no new handover, crash or round past this many minutes "
                             "(for a busy machine; the result says how many were done)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of the benchmarks that alternate tenure and a baseline (throughput, latency; "
                             "default 2): more rounds average out the baseline's own spread")
    parser.add_argument("--recipes", nargs="+", default=None, metavar="RECIPE",
                        help="the handover benchmark's recipes to run (tenure-warm, naive, tenure-cold; "
                             "tenure-warm-state, warm with --standby-state on, and tenure-warm-state-fork-off, "
                             "the same with --fork-server off, only when named), or the "
                             "cluster benchmark's parts (throughput, cluster-2w, cluster-2w-no-standby, local); "
                             "default all: the targets that compare them need the ones they name")
    parser.add_argument("--log-level", default="warning", help="the bench process's own log level")
    args = parser.parse_args(args_list)
    configure_logging(args.log_level, json=False)
    names = [n for n in BENCHMARKS if args.only is None or n in args.only]
    work = args.work or Path(tempfile.mkdtemp(prefix="tenure-bench-"))
    if args.out is None:
        args.out = _RESULTS / (datetime.now(UTC).strftime("%Y-%m-%d") + ("-quick" if args.quick else ""))
    ctx = BenchContext(quick=args.quick, work=work, out=args.out,
                       budget_s=args.budget_min * 60 if args.budget_min else None, rounds=args.rounds,
                       recipes=tuple(args.recipes) if args.recipes else None)
    started = time.monotonic()
    results: list[Result] = []
    try:
        for name in names:
            print(f"bench: {name} …", file=sys.stderr, flush=True)
            result = run_one(name, ctx)
            results.append(result)
            verdicts = ", ".join(f"{t.name}: {t.row()['measured']} ({t.row()['verdict']})" for t in result.targets)
            print(f"bench: {name} done in {result.seconds:.0f} s"
                  + (f" — FAILED: {result.error}" if result.error else f" — {verdicts}"), file=sys.stderr, flush=True)
    finally:
        if args.work is None and not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    total_s = time.monotonic() - started
    args.out.mkdir(parents=True, exist_ok=True)
    summary = _merge_summary(args.out, results, total_s, args.quick, args_list)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "SUMMARY.md").write_text(_summary_markdown(args.out, summary))
    print(f"bench: {len(results)} benchmarks in {total_s / 60:.1f} min; see {args.out / 'SUMMARY.md'}", file=sys.stderr)
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
