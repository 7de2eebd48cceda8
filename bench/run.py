"""Run the benchmarks: ``python -m bench.run [--quick] [--only NAME ...] [--out bench/results]``."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from bench._common import BenchContext, Result, machine, markdown_table, write_result
from service.replica import configure_logging

__all__ = ["BENCHMARKS", "main"]

# name → "module:function"; modules load lazily, so the ZooKeeper-only benchmarks never import Spark.
BENCHMARKS: dict[str, str] = {
    "herd": "bench._herd:run_herd",
    "fence_latency": "bench._fence_latency:run_fence_latency",
    "handover": "bench._handover:run_handover",
    "failover": "bench._handover:run_failover",
    "targeted": "bench._targeted:run_targeted",
    "throughput": "bench._throughput:run_throughput",
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
        result = _load(name)(BenchContext(quick=ctx.quick, work=work, out=ctx.out, budget_s=ctx.budget_s))
    except Exception as exc:
        traceback.print_exc()
        result = Result(name=name, title=name, command=f"python -m bench.run --only {name}",
                        error=f"{type(exc).__name__}: {exc}")
    result.seconds = round(time.monotonic() - started, 1)
    # Other work on the machine skews every figure; the 1-minute load average says how busy it was.
    result.params["load_avg_1m_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    if ctx.quick:
        result.command += " --quick"
    write_result(ctx.out, result)
    return result


def _summary(results: Sequence[Result], total_s: float, quick: bool, argv: Sequence[str]) -> str:
    info = machine()
    lines = [
        "# tenure benchmarks" + (" (--quick: tiny sizes, not figures to quote)" if quick else ""), "",
        f"Command: `python -m bench.run {' '.join(argv)}`".rstrip() + f" — total {total_s / 60:.1f} min", "",
        markdown_table([info]), "",
    ]
    targets = [{"benchmark": r.name, **t.row()} for r in results for t in r.targets]
    if targets:
        lines += ["## Targets", "", markdown_table(targets), ""]
    for result in results:
        lines.append(result.to_markdown())
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run the chosen benchmarks in order, write results and SUMMARY.md; exit 1 on an error."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: seconds to minutes (the smoke test)")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), metavar="NAME",
                        help=f"run only these ({', '.join(BENCHMARKS)})")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="where JSON and markdown go")
    parser.add_argument("--work", type=Path, default=None,
                        help="scratch folder (default: a temporary one, removed afterwards)")
    parser.add_argument("--keep-work", action="store_true", help="keep the scratch folder (logs, data)")
    parser.add_argument("--budget-min", type=float, default=None,
                        help="per benchmark: start no new handover, crash or round past this many minutes "
                             "(for a busy machine; the result says how many were done)")
    parser.add_argument("--log-level", default="warning", help="the bench process's own log level")
    args = parser.parse_args(args_list)
    configure_logging(args.log_level, json=False)
    names = [n for n in BENCHMARKS if args.only is None or n in args.only]
    work = args.work or Path(tempfile.mkdtemp(prefix="tenure-bench-"))
    ctx = BenchContext(quick=args.quick, work=work, out=args.out,
                       budget_s=args.budget_min * 60 if args.budget_min else None)
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
    (args.out / "SUMMARY.md").write_text(_summary(results, total_s, args.quick, args_list))
    (args.out / "summary.json").write_text(json.dumps(
        {"total_s": round(total_s, 1), "quick": args.quick, "machine": machine(),
         "benchmarks": {r.name: {"seconds": r.seconds, "error": r.error,
                                 "targets": [t.row() for t in r.targets]} for r in results}},
        indent=2, sort_keys=True) + "\n")
    print(f"bench: {len(results)} benchmarks in {total_s / 60:.1f} min; see {args.out / 'SUMMARY.md'}", file=sys.stderr)
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
