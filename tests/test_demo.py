"""The README's main job, `tenure demo`, end to end: three Spark replicas, a producer, the leader killed midway."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenure.service.local import TOPOLOGY_STOPPED
from tenure.service.ops import VERIFIED
from tests._replicas import tenure


@pytest.mark.fleet
@pytest.mark.timeout(600)
def test_demo_kills_the_leader_and_audits_exactly_once(tmp_path: Path) -> None:
    """`tenure demo` exits 0: a follower took over after the SIGKILL, the drain was told as progress, and verify
    found every id exactly once."""
    result = tenure("demo", "--dir", str(tmp_path / "demo"), "--records", "6000", "--rate", "1500", timeout_s=580)
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-4000:]
    assert "SIGKILL" in out and "took over with epoch" in out
    assert "verify: OK — 6000 ids in, 6000 written, 0 lost, 0 duplicated, 0 inversions" in out
    # While the queue drains the demo reports progress, not audits that fail until the end: one audit, at the end.
    assert "written 6000 of 6000 records, 0 queue files waiting" in out
    # The terminal holds the report only; the demo's own events are in its log, next to the replicas' logs.
    terminal = result.stdout.splitlines() + result.stderr.splitlines()
    assert not [line for line in terminal if line.lstrip().startswith('{"')], result.stderr[-4000:]
    events = [json.loads(line) for line in (tmp_path / "demo" / "logs" / "demo.log").read_text().splitlines()]
    assert [e["event"] for e in events].count(VERIFIED) == 1
    assert TOPOLOGY_STOPPED in {e["event"] for e in events}
