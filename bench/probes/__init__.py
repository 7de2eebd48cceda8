"""One-off measurements behind figures the docs quote, apart from the benchmarks (``bench.run``).

Each module measures one question once, is run from the repository root as ``.venv/bin/python -m
bench.probes.<name>``, and says in its docstring what it measures and which result under ``bench/results/`` it
made (and writes there, where it writes files at all). The docs that quote a figure name the command.
"""

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["results_folder", "run_header"]


def results_folder(name: str) -> Path:
    """``bench/results/<name>/``: where a probe writes its results, created if need be."""
    folder = Path(__file__).resolve().parents[1] / "results" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_header(module: str, argv: Sequence[str] | None) -> dict[str, Any]:
    """What a probe's results begin with: the command that made them (``argv``, or the process's own), the machine
    and its load average before the run."""
    from bench._common import machine

    args = sys.argv[1:] if argv is None else argv
    return {"command": f"python -m bench.probes.{module} {' '.join(args)}".strip(), "machine": machine(),
            "load_before": [round(x, 2) for x in os.getloadavg()]}
