"""`tenure drill chaos --queues N`: the plan's queues, the per-queue recovery and audit, and seeded runs on a topic of
three queues (the counter career in CI, the Spark career as a `long` test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tenure.service.drill import run_chaos
from tenure.service.drill._chaos import FaultOutcome, QueueRecovery, recovering_commits
from tenure.service.drill._chaos_plan import LEADER_KINDS, ChaosSettings, plan_faults
from tenure.service.drill._chaos_run import AuditSummary, ChaosResult, judge_chaos, render_chaos
from tenure.service.drill._monitor import CommitSample
from tenure.service.drill._settings import career_unavailable
from tests._replicas import tenure


@pytest.mark.parametrize(("seed", "count", "window_s", "career"),
                         [(12, 3, 90.0, "spark"), (38, 6, 60.0, "counter"), (4, 3, 30.0, "counter"),
                          (7, 20, 800.0, "spark")])
def test_plan_on_one_queue_is_the_plan_of_before_queues(seed: int, count: int, window_s: float, career: str) -> None:
    """``queues=1`` (the default) draws exactly the plan of the old signature: no fault names a queue, the labels
    are unchanged."""
    plan = plan_faults(seed, count, window_s, career=career)
    assert plan == plan_faults(seed, count, window_s, career=career, queues=1)
    assert all(f.queue is None and "queue" not in f.label for f in plan)


@pytest.mark.parametrize("queues", [2, 3, 5])
def test_plan_on_several_queues_names_a_queue_for_each_leader_fault(queues: int) -> None:
    """On a topic of several queues the plan is reproducible; every leader's fault names a queue in [0, N) (the
    ZooKeeper restarts none) and says it in its label; the kinds, times and parameters are those of the same seed's
    plan on one queue (the queues come from a stream of their own); over many seeds every queue is drawn."""
    drawn = set()
    for seed in range(30):
        plan = plan_faults(seed, 4, 120.0, career="spark", queues=queues)
        assert plan == plan_faults(seed, 4, 120.0, career="spark", queues=queues)
        one = plan_faults(seed, 4, 120.0, career="spark")
        assert [(f.kind, f.at_s, f.point, f.action, f.zk_role) for f in plan] == \
            [(f.kind, f.at_s, f.point, f.action, f.zk_role) for f in one]
        for fault in plan:
            if fault.kind in LEADER_KINDS:
                assert fault.queue is not None and 0 <= fault.queue < queues, fault
                assert fault.label.endswith(f"(queue {fault.queue})")
                drawn.add(fault.queue)
            else:
                assert fault.queue is None, fault
    assert drawn == set(range(queues))


def test_queues_is_an_option_of_chaos_only(tmp_path: Path) -> None:
    """`--queues` with another scenario is refused in one line (exit 2) before anything starts; out of range, by
    click."""
    directory = tmp_path / "d"
    done = tenure("drill", "crash", "--queues", "3", "--short", "--dir", str(directory), timeout_s=60)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "tenure: error: --faults, --seed and --queues are options of `tenure drill chaos` only"], done.stderr
    assert not directory.exists()
    zero = tenure("drill", "chaos", "--queues", "0", "--dir", str(directory), timeout_s=60)
    assert zero.returncode == 2 and "--queues" in zero.stderr, zero.stderr


def _commit(at: float, epoch: int, queue: int) -> CommitSample:
    return CommitSample(observed_at=at, version=int(at), epoch=epoch, committed_at=at, batch=None, queue=queue)


def test_a_queue_recovers_by_its_own_commits_only() -> None:
    """A fault on the leader of queue 2 (epoch 7 there) recovers when queue 2 commits above epoch 7 after the
    fault: queue 0 committing at a higher epoch (its epochs are counted apart), or queue 2 committing before the
    fault or at its old epoch, is no recovery of queue 2. A watcher of queue 0 alone would call it recovered."""
    fault_at = 100.0
    commits = [_commit(99.0, 9, 2), _commit(101.0, 12, 0), _commit(101.5, 7, 2), _commit(102.0, 13, 0)]
    assert recovering_commits(commits, {2: 7}, fault_at) == {}
    assert recovering_commits(commits, {0: 11, 2: 7}, fault_at) == {0: commits[1]}
    recovery = _commit(103.0, 8, 2)
    assert recovering_commits([*commits, recovery, _commit(104.0, 8, 2)], {0: 11, 2: 7}, fault_at) == \
        {0: commits[1], 2: recovery}
    # After a ZooKeeper restart (no epoch given) any commit since counts, each queue's own.
    assert recovering_commits(commits, {0: None, 2: None}, fault_at) == {0: commits[1], 2: commits[2]}


def test_judge_and_report_on_a_topic() -> None:
    """On a topic of three queues the report names the topic, and per fault the queues its target led with each
    one's recovery and new leader; commit epochs are judged per queue (queues interleave epochs of their own), and
    a fault is failed if one queue it moved did not recover."""
    settings = ChaosSettings.make(career="counter", records=None, faults=2, seed=4, short=True, queues=3)
    plan = plan_faults(4, 2, settings.window_s, career="counter", queues=3)
    moved = [QueueRecovery(0, 5, 4.2, 6, "replica-2", "commit"), QueueRecovery(2, 3, 3.9, 4, "replica-1", "commit")]
    faults = [FaultOutcome(f.index, f.kind, f.label, f.at_s, status="recovered", at_s=f.at_s, target="replica-3",
                           recovery_s=4.2, queue=f.queue, led=[0, 2], moved=moved) for f in plan]
    interleaved = {"commits": [{"epoch": 5, "queue": 0}, {"epoch": 3, "queue": 2}, {"epoch": 6, "queue": 0},
                               {"epoch": 4, "queue": 2}]}
    result = ChaosResult(settings=settings, plan=plan, faults=faults, replicas_alive_at_end=3,
                         audit=AuditSummary(ok=True, lost=0, duplicated=0, inversions=0), timeline=interleaved)
    result.criteria = judge_chaos(result)
    assert all(c.passed for c in result.criteria), result.criteria
    text = render_chaos(result, width=200)
    assert "a topic of 3 queues" in text and "sigkill (queue 2)" in text
    assert "led 0, 2: q0 4.2 s → replica-2; q2 3.9 s → replica-1" in text
    result.timeline = {"commits": [*interleaved["commits"], {"epoch": 3, "queue": 2}]}
    assert [c.name for c in judge_chaos(result) if not c.passed] == ["commit epochs never go down"]
    assert result.to_dict()["queues"] == 3 and result.to_dict()["faults"][0]["moved"][1]["queue"] == 2


def _assert_every_queue_recovered(doc: dict[str, Any], queues: int) -> None:
    """Every fault ran and recovered; each queue it moved shows, in the run's commits, a commit of that queue at the
    recovered epoch, above the queue's epoch at the fault; a ZooKeeper restart moved every queue."""
    commits = doc["timeline"]["commits"]
    for fault in doc["faults"]:
        assert fault["status"] == "recovered", fault
        assert fault["moved"], fault
        if fault["kind"] == "zk-restart":
            assert [r["queue"] for r in fault["moved"]] == list(range(queues)), fault
            continue
        assert fault["queue"] in fault["led"] and {r["queue"] for r in fault["moved"]} >= set(fault["led"]), fault
        for r in fault["moved"]:
            assert r["recovery_s"] is not None and r["epoch"] > r["old_epoch"] and r["leader"], fault
            if r["how"] == "commit":
                assert any(c["queue"] == r["queue"] and c["epoch"] == r["epoch"] for c in commits), r


def _run_passing(tmp_path: Path, *, records: int | None, faults: int, seed: int,
                 career: str) -> tuple[str, dict[str, Any]]:
    """A short chaos run on three queues that must exit 0: its report and its JSON."""
    lines: list[str] = []
    json_out = tmp_path / "chaos.json"
    code = run_chaos(directory=tmp_path / "runs", records=records, faults=faults, seed=seed, career=career,
                     short=True, queues=3, json_out=json_out, echo=lines.append)
    report = "\n".join(lines)
    doc = json.loads(json_out.read_text())
    failed = [f"{c['name']}: {c['detail']}" for c in doc["criteria"] if not c["passed"]]
    assert code == 0, f"chaos failed: {failed}\n{report}"
    return report, doc


#: Seed 4 on three queues: SIGKILL of queue 2's leader twice, then a ZooKeeper leader restart. The first fault
#: comes a few seconds into the production, before the balance (10 s settle) has spread the queues: the replica
#: it kills leads two or three of them.
COUNTER_QUEUES_SEED = 4


@pytest.mark.timeout(300)
def test_chaos_on_three_queues_counter_career(tmp_path: Path) -> None:
    """A short seeded chaos run on a topic of three queues (counter career): every fault recovers on every queue its
    target led, at least one SIGKILL moves two queues or more, each queue's audit is clean, exit 0."""
    report, doc = _run_passing(tmp_path, records=None, faults=3, seed=COUNTER_QUEUES_SEED, career="counter")
    assert doc["queues"] == 3 and [f["label"] for f in doc["faults"]] == \
        ["sigkill (queue 2)", "sigkill (queue 2)", "zk-restart (leader)"]
    _assert_every_queue_recovered(doc, 3)
    assert any(f["kind"] == "sigkill" and len(f["moved"]) >= 2 for f in doc["faults"]), doc["faults"]
    assert doc["audit"]["ok"] and all(f"queue {q}:" in doc["audit"]["detail"] for q in range(3)), doc["audit"]
    assert "a topic of 3 queues" in report and "chaos: OK" in report


#: Seed 9 with the Spark career on three queues: a whole-tree pause of queue 1's leader, then SIGKILL of queue 2's.
SPARK_QUEUES_SEED = 9


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_chaos_on_three_queues_spark_career(tmp_path: Path) -> None:
    """A short seeded chaos run with the Spark career on a topic of three queues (the producer routes by key),
    3000 records, 2 faults: every fault recovers on every queue its target led, 3 replicas alive at the end, and
    `tenure verify` finds every queue and the whole exactly once and in order."""
    if why := career_unavailable("spark"):
        pytest.skip(why)
    _report, doc = _run_passing(tmp_path, records=3000, faults=2, seed=SPARK_QUEUES_SEED, career="spark")
    assert [f["label"] for f in doc["faults"]] == ["pause (queue 1)", "sigkill (queue 2)"]
    _assert_every_queue_recovered(doc, 3)
    audit = doc["audit"]
    assert audit["ok"] and audit["ids_in"] == 3000 and audit["lost"] == audit["duplicated"] == audit["inversions"] == 0
    assert all(f"queue {q}: rows written" in audit["detail"] for q in range(3)), audit
    assert doc["replicas_alive_at_end"] == 3
