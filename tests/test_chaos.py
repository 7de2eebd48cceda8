"""`tenure drill chaos`, the fast parts: the seeded fault plan, the report, and whole-tree pauses of a replica."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tenure.service.drill import DrillError
from tenure.service.drill._chaos import FaultOutcome
from tenure.service.drill._chaos_plan import CAREER_POINTS, FAULT_KINDS, ChaosSettings, plan_faults
from tenure.service.drill._chaos_run import AuditSummary, ChaosResult, judge_chaos, render_chaos
from tenure.service.local import ReplicaProcess, wait_for
from tenure.service.replica import ReplicaSpec


@pytest.mark.parametrize(("seed", "count", "window_s", "career"),
                         [(12, 3, 90.0, "spark"), (38, 6, 60.0, "counter"), (7, 20, 800.0, "spark")])
def test_plan_is_seeded_spread_and_reproducible(seed: int, count: int, window_s: float, career: str) -> None:
    """The same seed gives the same plan; one fault per equal slot of the window, in its middle 70 %; kinds and
    points from the allowed sets (the counter career only reaches before_transaction)."""
    plan = plan_faults(seed, count, window_s, career=career)
    assert plan == plan_faults(seed, count, window_s, career=career)
    assert [f.index for f in plan] == list(range(1, count + 1))
    slot = window_s / count
    for i, fault in enumerate(plan):
        assert slot * (i + 0.15) - 0.01 <= fault.at_s <= slot * (i + 0.85) + 0.01, fault
        assert fault.kind in FAULT_KINDS
        if fault.kind == "inject":
            assert fault.point in CAREER_POINTS[career] and fault.action in ("pause", "kill")
        else:
            assert fault.point is None and fault.action is None
        assert (fault.zk_role in ("leader", "follower")) == (fault.kind == "zk-restart")
    assert [f.at_s for f in plan] == sorted(f.at_s for f in plan)


def test_plan_differs_by_seed_and_covers_every_kind() -> None:
    """Different seeds draw different plans; over many seeds every kind and every Spark point comes up."""
    plans = {seed: plan_faults(seed, 4, 120, career="spark") for seed in range(40)}
    assert len({tuple((f.kind, f.at_s) for f in p) for p in plans.values()}) == 40
    drawn = [f for p in plans.values() for f in p]
    assert {f.kind for f in drawn} == set(FAULT_KINDS)
    assert {f.point for f in drawn if f.point} == set(CAREER_POINTS["spark"])
    with pytest.raises(DrillError, match="at least one fault"):
        plan_faults(1, 0, 60, career="spark")


def test_ci_seed_plan() -> None:
    """The plan tests/test_drill.py's chaos run relies on."""
    settings = ChaosSettings.make(career="spark", records=3000, faults=3, seed=12, short=True)
    assert [f.label for f in plan_faults(12, 3, settings.window_s, career="spark")] == \
        ["inject inside_delta_commit pause", "pause", "zk-restart (leader)"]
    assert settings.drill.produce_s > settings.window_s  # the producer outlasts the last planned fault


def _result(**overrides: object) -> ChaosResult:
    settings = ChaosSettings.make(career="spark", records=3000, faults=2, seed=5, short=True)
    plan = plan_faults(5, 2, settings.window_s, career="spark")
    result = ChaosResult(settings=settings, plan=plan, replicas_alive_at_end=3,
                         audit=AuditSummary(ok=True, ids_in=3000, ids_written=3000, quarantined=12, late=0, lost=0,
                                            duplicated=0, inversions=0),
                         faults=[FaultOutcome(f.index, f.kind, f.label, f.at_s, status="recovered", at_s=f.at_s,
                                              target="replica-2", recovery_s=6.5) for f in plan],
                         timeline={"commits": [{"epoch": 1}, {"epoch": 1}, {"epoch": 3}]})
    for name, value in overrides.items():
        setattr(result, name, value)
    result.criteria = judge_chaos(result)
    return result


def test_judge_and_report() -> None:
    """A clean run passes; a failed recovery, a missing replica, a dirty audit or a falling epoch fails; the
    report names the seed, every fault with its offset, target and recovery, and the audit — no JSON lines."""
    good = _result()
    assert all(c.passed for c in good.criteria)
    text = render_chaos(good)
    assert "seed 5" in text and "ids in 3000, written 3000, quarantined 12, late 0, lost 0" in text
    assert "replica-2" in text and "6.5 s" in text and "recovered" in text
    assert not any(line.lstrip().startswith("{") for line in text.splitlines())
    failed_fault = FaultOutcome(1, "pause", "pause", 3.0, status="failed", reason="timed out")
    bad = _result(faults=[failed_fault, *good.faults[1:]], replicas_alive_at_end=2,
                  audit=AuditSummary(ok=False, lost=2, duplicated=0, inversions=0),
                  timeline={"commits": [{"epoch": 3}, {"epoch": 1}]})
    assert [c.name for c in bad.criteria if not c.passed] == [
        "every fault recovered (a leader commits again)", "the replica count recovers",
        "audit: nothing lost, duplicated or out of order", "commit epochs never go down"]
    skipped = FaultOutcome(2, "partition", "partition", 9.0, status="skipped", reason="needs root")
    assert all(c.passed for c in _result(faults=[good.faults[0], skipped]).criteria)


def test_pause_resume_and_kill_act_on_the_whole_tree(tmp_path: Path) -> None:
    """A replica's pause stops its process and its children (as a Spark JVM); resume restarts both; kill leaves
    no child behind, even a paused one."""
    replica = ReplicaProcess("r1", 0, ReplicaSpec(), tmp_path / "r1.log", zk="127.0.0.1:1")
    script = ("import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)")
    replica.process = subprocess.Popen([sys.executable, "-c", script])
    try:
        root = psutil.Process(replica.process.pid)
        wait_for(root.children, 10, "the child process")
        child = root.children()[0]
        replica.signal(signal.SIGSTOP)  # means the whole tree
        wait_for(lambda: replica.stopped() and child.status() == psutil.STATUS_STOPPED, 5, "both stopped")
        replica.resume()
        wait_for(lambda: not replica.stopped() and child.status() != psutil.STATUS_STOPPED, 5, "both running")
        replica.pause()
        started = time.monotonic()
        replica.kill(timeout_s=10)
        assert time.monotonic() - started < 10
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    finally:
        replica.kill(timeout_s=10)
