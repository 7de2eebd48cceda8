"""What a Spark replica's start-up and warm-up cost under the tests' JVM settings, against the JDK's defaults.

`.venv/bin/python -m bench.probes.warmup_cpu [ROUNDS]` (from the repository root, nothing else running)
starts, ROUNDS times for each setting in alternation, a fresh process that builds the Spark career of a warm
replica (`SparkCareer.prepare`: the SparkSession, then the real pipeline once over the scratch sample) and
reports the wall time of both steps and the CPU its process tree spent (the driver JVM and Spark's Python
processes included). The settings are the JDK's defaults and the tests' `JDK_JAVA_OPTIONS`
(`tests/conftest.py`). It writes `results.json` and `results.md` to `bench/results/test-jvm/`: the figures
`docs/development/index.md` quotes for the tests' JVM settings.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Any

from bench.probes import results_folder

_HERE = results_folder("test-jvm")
_SETTINGS = {"JDK defaults": "", "tests (C1, serial GC)": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}

# One replica's preparation, in a process of its own; prints one JSON line.
_CHILD = """
import json, os, sys, tempfile, time
from pathlib import Path
import psutil
from tenure.career.spark._career import SparkCareer
from tenure.career.spark._config import SparkCareerConfig

class _Quiet:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None

career = SparkCareer(SparkCareerConfig(data_root=Path(tempfile.mkdtemp()), keep_warm_interval_s=0), _Quiet(),
                     replica_id="measure")
started = time.monotonic()
career._ensure_session()
session_s = time.monotonic() - started
career.prepare()
prepared_s = time.monotonic() - started
me = psutil.Process()
cpu = sum(sum(p.cpu_times()[:2]) for p in [me, *me.children(recursive=True)])
print(json.dumps({"session_s": session_s, "warmup_s": prepared_s - session_s, "total_s": prepared_s,
                  "tree_cpu_s": cpu}), flush=True)
os._exit(0)
"""


def _once(options: str) -> dict[str, float]:
    env = {**os.environ, "JDK_JAVA_OPTIONS": options} if options else {
        k: v for k, v in os.environ.items() if k != "JDK_JAVA_OPTIONS"}
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600,
                          check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("{"))
    return {k: float(v) for k, v in json.loads(line).items()}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in _SETTINGS}
    for _ in range(rounds):
        for name, options in _SETTINGS.items():
            runs[name].append(_once(options))
            print(name, runs[name][-1], flush=True)
    (_HERE / "results.json").write_text(json.dumps(runs, indent=1) + "\n")
    rows = ["| setting | session s | warm-up s | total s | CPU of the process tree s |", "|---|---|---|---|---|"]
    medians: dict[str, dict[str, float]] = {}
    for name, samples in runs.items():
        medians[name] = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
        m = medians[name]
        rows.append(f"| {name} | {m['session_s']:.1f} | {m['warmup_s']:.1f} | {m['total_s']:.1f} | "
                    f"{m['tree_cpu_s']:.1f} |")
    base, tests = (medians[name] for name in _SETTINGS)
    summary: dict[str, Any] = {k: round(tests[k] / base[k], 2) for k in base}
    text = (f"# A warm replica's preparation under the tests' JVM settings\n\n"
            f"`.venv/bin/python -m bench.probes.warmup_cpu {rounds}`: medians of {rounds} runs each, "
            f"in alternation, one replica alone on the machine.\n\n" + "\n".join(rows) +
            f"\n\nRatios, tests / defaults: {json.dumps(summary)}.\n")
    (_HERE / "results.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
