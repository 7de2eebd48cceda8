"""Benchmarks of tenure against baselines run side by side: ``python -m bench.run [--quick] [--only NAME ...]``.

Each benchmark writes ``<out>/<name>.json`` and ``<out>/<name>.md``; ``SUMMARY.md`` gathers them with the
machine they ran on. Speed is a ratio against a baseline measured in the same run, never an absolute claim.
"""

__all__: list[str] = []
