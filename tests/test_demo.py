"""The README's main job, `tenure demo`, end to end: a topic of four queues on three Spark replicas, a producer, the
replica leading the most queues killed midway; and the report of who led which queues and how long each moved queue
went without a commit, on recorded figures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tenure.service.local import TOPOLOGY_STOPPED
from tenure.service.local._demo import Move, format_leads, format_moves
from tenure.service.ops import VERIFIED
from tests._replicas import tenure


@pytest.mark.fleet
@pytest.mark.timeout(600)
def test_demo_kills_the_leader_and_audits_exactly_once(tmp_path: Path) -> None:
    """`tenure demo` exits 0: every queue of four had a leader, the replica leading the most was SIGKILLed, each of
    its queues got a new leader that committed, reported with its time without a commit; the drain was told as
    progress, and verify found every id exactly once."""
    result = tenure("demo", "--dir", str(tmp_path / "demo"), "--records", "6000", "--rate", "1500", timeout_s=580)
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-4000:]
    print(out)
    assert "on a topic of 4 queues" in out and "SIGKILL" in out
    killed = re.search(r"SIGKILL (replica-\d) \(pid \d+\), leader of queues? ([\d, ]+), after", out)
    assert killed is not None, out
    name, moved = killed.group(1), [int(q) for q in killed.group(2).split(", ")]
    for queue in moved:
        line = re.search(rf"queue {queue}: {name} → (replica-\d), .*the new leader's first (\d+\.\d) s after", out)
        assert line is not None and line.group(1) != name, out
        assert 0 < float(line.group(2)) < 120, line.group(0)
    assert re.search(r"now: replica-\d leads", out) and f"{name} leads" not in out.split("now: ")[1].splitlines()[0]
    assert "verify: OK — 6000 ids in, 6000 written, 0 lost, 0 duplicated, 0 inversions" in out
    # While the queue drains the demo reports progress, not audits that fail until the end: one audit, at the end.
    assert "written 6000 of 6000 records, 0 queue files waiting" in out
    # The terminal holds the report only; the demo's own events are in its log, next to the replicas' logs.
    terminal = result.stdout.splitlines() + result.stderr.splitlines()
    assert not [line for line in terminal if line.lstrip().startswith('{"')], result.stderr[-4000:]
    events = [json.loads(line) for line in (tmp_path / "demo" / "logs" / "demo.log").read_text().splitlines()]
    assert [e["event"] for e in events].count(VERIFIED) == 1
    assert TOPOLOGY_STOPPED in {e["event"] for e in events}


def test_the_report_names_who_leads_which_queues() -> None:
    """Who leads which queues is one line, replicas in order, each with its queues; queues without a leader last."""
    assert format_leads({0: "replica-2", 1: "replica-1", 2: "replica-2", 3: "replica-3"}) == \
        "replica-1 leads 1; replica-2 leads 0, 2; replica-3 leads 3"
    assert format_leads({0: "replica-1", 1: None, 2: "replica-1", 3: None}) == \
        "replica-1 leads 0, 2; no leader for 1, 3"


def test_the_report_of_moved_queues_gives_each_its_time_without_a_commit() -> None:
    """Each queue the killed replica led: its new leader and how long it went without a commit, split at the kill
    (none known when the killed term never committed), then the longest."""
    lines = format_moves("replica-1", [Move(0, "replica-2", 0.5, 7.25), Move(2, "replica-3", 2.0, 6.0),
                                       Move(3, "replica-2", None, 9.0)])
    assert lines == ["queue 0: replica-1 → replica-2, 7.8 s without a commit (replica-1's last 0.5 s before the "
                     "SIGKILL, the new leader's first 7.2 s after)",
                     "queue 2: replica-1 → replica-3, 8.0 s without a commit (replica-1's last 2.0 s before the "
                     "SIGKILL, the new leader's first 6.0 s after)",
                     "queue 3: replica-1 → replica-2, no commit of replica-1's before the SIGKILL, the new leader's "
                     "first 9.0 s after",
                     "3 queues moved; the longest went 8.0 s without a commit (after the SIGKILL: the session "
                     "timeout, the successor's inauguration and its first batch)"]
    assert Move(1, None, 1.0, None).without_commit_s is None
    assert format_moves("replica-1", [Move(1, None, 1.0, None)]) == [
        "queue 1: replica-1 → no leader, no commit of replica-1's before the SIGKILL, the new leader's first unknown "
        "after"]
