"""One-off measurements behind figures the docs quote, apart from the benchmarks (``bench.run``).

Each module measures one question once, is run from the repository root as ``.venv/bin/python -m
bench.probes.<name>``, and says in its docstring what it measures and which result under ``bench/results/`` it
made (and writes there, where it writes files at all). The docs that quote a figure name the command.
"""

from pathlib import Path

__all__ = ["results_folder"]


def results_folder(name: str) -> Path:
    """``bench/results/<name>/``: where a probe writes its results, created if need be."""
    folder = Path(__file__).resolve().parents[1] / "results" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder
