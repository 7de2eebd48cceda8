"""Smoke test of bench/: the quickest benchmarks run end to end on tiny sizes, and their output keeps its shape.

Speed is never asserted here: these are benchmarks, and the machines are noisy. Only shapes and counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench._common import Result, Target, markdown_table, percentiles
from bench._throughput import _steady_rate

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([], {"n": 0, "p50": None, "max": None}, id="empty"),
        pytest.param([3.0], {"n": 1, "p50": 3.0, "p90": 3.0, "p99": 3.0, "max": 3.0}, id="one"),
        pytest.param([float(i) for i in range(1, 11)], {"n": 10, "p50": 5.0, "p90": 9.0, "p99": 10.0, "max": 10.0},
                     id="nearest-rank-of-ten"),
        pytest.param([5.0, 1.0, 3.0], {"p50": 3.0, "mean": 3.0}, id="unsorted-input"),
    ],
)
def test_percentiles_are_nearest_rank(values: list[float], expected: dict[str, float | None]) -> None:
    """percentiles() uses nearest rank on sorted data and gives None for an empty sample."""
    stats = percentiles(values)
    assert {k: stats[k] for k in expected} == expected


def test_markdown_table_unions_columns_and_marks_missing_cells() -> None:
    """Columns come from every row in first-seen order; a missing or None cell shows a dash."""
    table = markdown_table([{"a": 1, "b": 0.123456}, {"a": None, "c": "x"}])
    assert table.splitlines() == ["| a | b | c |", "|---|---|---|", "| 1 | 0.1235 | — |", "| — | — | x |"]


def test_steady_rate_skips_warm_up_batches_and_flags_gaps() -> None:
    """The steady rate counts batches after the warm-up ones over the time since the last warm-up batch ended."""
    batches = [{"batch_id": i, "committed_at": float(i), "written": 100} for i in range(10)]
    figures = _steady_rate(batches)
    assert figures["records_per_s"] == 100.0  # 6 batches of 100 records over 6 s (batch 3 to batch 9)
    assert figures["contiguous"] is True
    assert _steady_rate([b for b in batches if b["batch_id"] != 5])["contiguous"] is False


def test_result_renders_targets_and_errors() -> None:
    """A result's markdown names a missed target and a failure plainly."""
    result = Result(name="x", title="X", command="python -m bench.run --only x", error="TimeoutError: slow",
                    targets=[Target("gap p50 (s)", 2.5, "≤ 1 s", False)])
    text = result.to_markdown()
    assert "MISSED" in text
    assert "**Failed:** TimeoutError: slow" in text


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_run_of_herd_and_fence_latency_writes_json_and_markdown(tmp_path: Path) -> None:
    """`python -m bench.run --quick --only herd fence_latency` runs against a real ensemble and writes results."""
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "herd", "fence_latency", "--out", str(out),
         "--work", str(tmp_path / "work")],
        cwd=REPO, capture_output=True, text=True, timeout=840, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for name in ("herd", "fence_latency"):
        body = json.loads((out / f"{name}.json").read_text())
        assert body["name"] == name
        assert body["error"] is None
        assert {"params", "figures", "table", "targets", "notes", "seconds", "command"} <= set(body)
        assert all({"name", "measured", "target", "met"} <= set(t) for t in body["targets"])
        assert (out / f"{name}.md").read_text().startswith("### ")
    herd = json.loads((out / "herd.json").read_text())
    rows = herd["figures"]["changes"]
    assert {(r["recipe"], r["N"]) for r in rows} == {(recipe, n) for recipe in ("tenure", "children-watch")
                                                     for n in (5, 10)}
    for row in rows:
        # Counts, not speed: tenure wakes one successor; the children watch wakes every other contender.
        expected = 1 if row["recipe"] == "tenure" else row["N"] - 1
        assert row["deliveries (client)"] == expected
        assert row["fired (mntr) − leader's own"] == expected
    fence = json.loads((out / "fence_latency.json").read_text())
    assert fence["figures"]["fenced_ms"]["n"] == fence["params"]["commits"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["benchmarks"]) == {"herd", "fence_latency"}
    assert (out / "SUMMARY.md").exists()
