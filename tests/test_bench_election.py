"""Smoke test of the election failover benchmark: a --quick run end to end, its output keeps its shape.

Speed is never asserted: the target's verdict is the benchmark's to report, and the machines are noisy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run
from bench._common import BenchContext
from tenure.service.local import Ensemble


@pytest.mark.long
@pytest.mark.timeout(600)
def test_quick_election_failover_kills_at_both_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--quick` SIGKILLs the leader twice at the default tick and twice at the old 2000 ms, each on its own
    ensemble, and writes per-kill rows, a row per tick, the target, the plot and the JSON result."""
    monkeypatch.setitem(run.BENCHMARKS, "election_failover", "bench._election_failover:run_election_failover")
    out = tmp_path / "out"
    result = run.run_one("election_failover", BenchContext(quick=True, work=tmp_path / "work", out=out))
    assert result.error is None
    ticks = [Ensemble.DEFAULT_TICK_MS, 2000]
    kills = result.figures["kills"]
    assert sorted(r["tick_ms"] for r in kills) == sorted(ticks * 2)
    for row in kills:
        assert row["from"] != row["to"]
        assert row["kill_to_elected_s"] > 0
        assert row["session_on"] in ("leader", "follower", "?")
    assert [r["tickTime ms"] for r in result.table] == ticks
    assert [t.measured for t in result.targets] == [max(r["kill_to_elected_s"] for r in kills
                                                        if r["tick_ms"] == Ensemble.DEFAULT_TICK_MS)]
    assert (out / "election_failover.png").stat().st_size > 0
    assert any("election_failover.png" in note for note in result.notes)
    body = json.loads((out / "election_failover.json").read_text())
    assert body["figures"]["kills"] == kills
