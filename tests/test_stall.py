"""A leader keeps its lock only while it makes progress: a hung loop, a full event queue, and the watchdog's rules.

Real `tenure run` processes on the shared ensemble (the counter career: fast to elect, same runner as Spark's);
the Spark faults — a frozen JVM, a hung row function, a poison batch — are in ``test_stall_spark.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry

from tenure.career.lifecycle import HANDING_OVER, LEADERSHIP_SUSPENDED, LEFT_ELECTION, STALLED, Stall, StallReason
from tenure.election import GroupPaths, read_history
from tenure.service.local import wait_for
from tenure.service.ops._status import fetch_status, format_status_table
from tenure.service.replica import ReplicaSpec
from tenure.service.replica._lifecycle import EXIT_HANDOVER_OVERRUN, EXIT_STALLED
from tenure.service.replica._metrics import Metrics
from tenure.service.replica._progress import ProgressClock, ProgressView
from tenure.service.replica._watchdog import Watchdog, WatchdogSettings, find_stall, loop_live
from tests._flaky_link import flaky_link
from tests._replicas import (
    REPO,
    Replica,
    ReplicaSet,
    counter_exactly_once,
    counter_replica_set,
    process_running,
)

#: What ``tests.careers:freezes_when_told`` says once frozen, as the runner's reason to leave.
_FROZEN = "unhealthy: Spark's JVM did not answer within 1 s (frozen, or stuck in a long GC pause)"
LIMITS = WatchdogSettings(liveness_timeout_s=30.0, stall_timeout_s=120.0, first_batch_allowance_s=60.0)


def _view(**changes: object) -> ProgressView:
    """A healthy leader at t=1000 that finished a batch a second ago with work waiting; ``changes`` on top."""
    values: dict[str, object] = dict(now=1000.0, last_tick=999.0, inaugurating_since=None, worked=1000.0,
                                     working_since=800.0,
                                     first_batch_done=True, waiting_since=950.0, last_progress=999.0, in_flight=7,
                                     backlog_files=3)
    values.update(changes)
    return ProgressView(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("view", "expected"), [
    pytest.param(_view(), None, id="healthy leader"),
    pytest.param(_view(now=1030.0, last_progress=1020.0), StallReason.CONTROL_LOOP, id="loop past its deadline"),
    pytest.param(_view(now=1029.0, last_progress=1020.0), None, id="loop exactly at its deadline"),
    pytest.param(_view(now=1059.0, last_progress=1050.0, inaugurating_since=999.0), None,
                 id="an inauguration within its allowance"),
    pytest.param(_view(now=1060.0, last_progress=1050.0, inaugurating_since=999.0), StallReason.CONTROL_LOOP,
                 id="an inauguration past its allowance"),
    pytest.param(_view(last_progress=870.0), None, id="progress long ago but input waits only 50 s"),
    pytest.param(_view(waiting_since=870.0, last_progress=870.0), StallReason.NO_PROGRESS,
                 id="input waited 130 s, no batch since"),
    pytest.param(_view(waiting_since=870.0, last_progress=881.0), None, id="a batch 119 s ago"),
    pytest.param(_view(waiting_since=None, last_progress=0.0), None, id="nothing waits: an idle leader"),
    pytest.param(_view(working_since=None, waiting_since=0.0, last_progress=0.0), None, id="following"),
    pytest.param(_view(working_since=875.0, waiting_since=0.0, last_progress=0.0), StallReason.NO_PROGRESS,
                 id="leading 125 s without a batch"),
    pytest.param(_view(working_since=875.0, waiting_since=0.0, last_progress=0.0, first_batch_done=False), None,
                 id="first batch has its allowance"),
    pytest.param(_view(working_since=815.0, waiting_since=0.0, last_progress=0.0, first_batch_done=False),
                 StallReason.NO_PROGRESS, id="first batch past stall timeout plus allowance"),
    pytest.param(_view(working_since=990.0, waiting_since=0.0, last_progress=0.0), None,
                 id="a term begun 10 s of work ago"),
    pytest.param(_view(worked=880.0, waiting_since=870.0, last_progress=870.0), None,
                 id="input waited 130 s, 120 of them paused"),
    pytest.param(_view(now=5000.0, last_tick=4999.0, worked=1000.0, waiting_since=870.0, last_progress=870.0),
                 StallReason.NO_PROGRESS, id="130 s of work owed, however long the pauses between"),
])
def test_find_stall(view: ProgressView, expected: StallReason | None) -> None:
    """The watchdog's rules: the loop past its deadline (the liveness timeout, an inauguration's allowance), or a
    leader owing progress past its limit."""
    stall = find_stall(view, LIMITS)
    assert (stall.reason if stall else None) is expected
    if stall is not None:
        assert stall.batch_id == 7 and stall.describe().endswith("(batch 7 in flight)")


def test_livez_counts_the_liveness_timeout_only() -> None:
    """``/livez`` fails once the loop has not come round for the liveness timeout, an inauguration or not (the
    watchdog's allowance is for giving the lock up, not for health)."""
    assert loop_live(_view(now=1028.0), LIMITS)
    assert not loop_live(_view(now=1029.0), LIMITS)
    assert not loop_live(_view(now=1029.0, inaugurating_since=1000.0), LIMITS)


def test_the_progress_owed_stands_still_while_paused_and_goes_on_after() -> None:
    """The progress clock across suspensions: a pause neither counts towards the progress owed nor restarts it;
    a finished batch does, and a term's end closes the account (a follower owes nothing)."""
    now = [100.0]
    progress = ProgressClock(Metrics(CollectorRegistry(), replica_id="r1", group="g"), clock=lambda: now[0])
    progress.working(True, new_term=True)
    progress.queue(0).backlog(1)
    progress.queue(0).batch_started(1)
    for i in range(10):  # 10 × (3 s working, 5 s paused)
        now[0] += 3.0
        progress.working(False, paused=True)
        now[0] += 5.0
        assert progress.view().stalled_for() == pytest.approx(3.0 * (i + 1))
        progress.working(True)
    assert progress.view().stalled_for() == pytest.approx(30.0)
    now[0] += 1.0
    progress.queue(0).batch_finished("committed", 1.0, {})
    now[0] += 2.0
    assert progress.view().stalled_for() == pytest.approx(2.0)
    progress.working(False)
    assert progress.view().stalled_for() == 0.0


def test_a_queues_stall_is_revoked_alone_and_is_the_replicas_only_when_it_outlasts_the_liveness_timeout() -> None:
    """Two queues, queue 1's batch stuck: past the stall timeout the watchdog hands queue 1's stall to ``revoke``,
    once, and reports no stall of the replica while queue 0 progresses; still stalled a liveness timeout after that
    (the term never ended), it is the replica's stall, naming queue 1. A queue whose term ended owes nothing, so its
    next stall is revoked anew."""
    now = [100.0]
    metrics = Metrics(CollectorRegistry(), replica_id="r1", group="g", queues=2, default_collectors=False)
    progress = ProgressClock(metrics, clock=lambda: now[0])
    revoked: list[Stall] = []
    limits = WatchdogSettings(liveness_timeout_s=30.0, stall_timeout_s=10.0, first_batch_allowance_s=0.0)
    watchdog = Watchdog(progress, limits, on_stall=lambda _stall: None, revoke=revoked.append, clock=lambda: now[0])

    def seconds(n: int) -> Stall | None:
        stall = None
        for _ in range(n):
            now[0] += 1.0
            progress.tick()
            progress.queue(0).batch_finished("committed", 0.1, {"written": 1})
            stall = watchdog.check() or stall
        return stall

    for q in (0, 1):
        progress.working(True, new_term=True, queue=q)
        progress.queue(q).backlog(1)
    progress.queue(1).batch_started(4)
    assert seconds(10) is None and revoked == []
    assert seconds(1) is None
    assert [(s.queue, s.batch_id, s.reason) for s in revoked] == [(1, 4, StallReason.NO_PROGRESS)]
    assert seconds(30) is None and len(revoked) == 1, "handed over once, and not the replica's yet"
    stall = seconds(1)
    assert stall is not None and stall.queue == 1 and "not revoked within the liveness timeout" in stall.detail
    progress.working(False, queue=1)  # the term ended after all
    assert seconds(1) is None
    progress.working(True, new_term=True, queue=1)
    progress.queue(1).batch_started(5)
    assert seconds(11) is None and [s.batch_id for s in revoked] == [4, 5]


#: Short watchdog limits for the counter replicas here.
_STALL: dict[str, object] = {"liveness_timeout_s": 4.0, "probe_timeout_s": 1.0, "stall_timeout_s": 30.0}


def _handover_record(client: KazooClient, group: str) -> dict[str, object]:
    data, _ = client.get(GroupPaths(group).handover)
    return dict(json.loads(data))


def test_a_hung_control_loop_gives_the_lock_up_and_exits(counter_replicas: ReplicaSet, zk_client: KazooClient,
                                                          zk_hosts: str,
                                                          zk_group: str, tmp_path: Path) -> None:
    """A leader whose control thread hangs (a call that never returns, here inside its fence) keeps its ZooKeeper
    session alive from kazoo's thread; the watchdog sees the loop stop coming round, writes why, closes the
    session so the node goes at once, and exits 4: the follower commits within the liveness timeout plus a few
    seconds, and the count stays exactly once."""
    fault = tmp_path / "fault-r1"
    r1 = counter_replicas.start("r1", fault_file=fault, **_STALL)
    wait_for(r1.is_leader, 30, "r1 to lead")
    r2 = counter_replicas.start("r2", **_STALL)
    wait_for(lambda: r2.get("/readyz")[0] == 200, 30, "r2 to be in line")
    fault.write_text("before_transaction hang\n")
    hung_at = time.monotonic()
    assert r1.wait(timeout_s=30) == EXIT_STALLED
    gave_up_s = time.monotonic() - hung_at
    wait_for(r2.is_leader, 10, "r2 to lead after r1 gave up")
    took_over_s = time.monotonic() - hung_at
    # 4 s liveness + 1 s watchdog period; a session timeout (3 s here) would come on top without the close
    assert gave_up_s < 4 + 1 + 2, f"r1 gave up after {gave_up_s:.1f} s"
    assert took_over_s < gave_up_s + 2, f"r2 led {took_over_s - gave_up_s:.1f} s after r1 exited"
    before = len(counter_exactly_once(tmp_path / "data"))
    wait_for(lambda: len(counter_exactly_once(tmp_path / "data")) > before + 5, 15, "r2 to count on")
    stalled = [e for e in r1.log_events() if e.get("event") == STALLED]
    assert stalled and stalled[0]["reason"] == StallReason.CONTROL_LOOP.value
    terms = read_history(zk_client, zk_group)
    ended = next(t for t in terms if t.replica_id == "r1")
    assert ended.ended == "stalled" and ended.reason and "control loop" in ended.reason
    shown = format_status_table(fetch_status(zk_hosts, zk_group))
    assert f"epoch {ended.epoch} stalled: the control loop" in shown, shown
    record = _handover_record(zk_client, zk_group)
    assert record["replica_id"] == "r2" or "stalled" in str(record.get("reason")), record


def test_a_hung_leader_whose_zookeeper_link_flaps_still_gives_its_lock_up(zk_hosts: str, zk_client: KazooClient,
                                                                          zk_group: str, tmp_path: Path) -> None:
    """A leader whose batch hangs while input waits, and whose ZooKeeper link is cut every 1.5 s (each cut a real
    connection loss: the term is suspended, then resumed on the same session), still gives its lock up: the
    pauses stop the stall clock but do not restart it, so after 4 s of work without progress it stalls
    (no_progress) less than 4 s after its last pause, closes its session and exits 4."""
    host, _, port = zk_hosts.split(",", maxsplit=1)[0].rpartition(":")
    with flaky_link((host, int(port))) as link:
        replicas = counter_replica_set(f"127.0.0.1:{link.port}", zk_group, tmp_path, session_timeout_s=6.0)
        try:
            r1 = replicas.start("r1", career="tests.careers:hangs_in_a_batch", stall_timeout_s=4.0,
                                first_batch_allowance_s=0.0, liveness_timeout_s=4.0, probe_timeout_s=1.0)
            wait_for(r1.is_leader, 30, "r1 to lead")
            link.flap(every_s=1.5, down_s=0.3)
            assert r1.wait(timeout_s=60) == EXIT_STALLED
            cuts = link.cuts
        finally:
            replicas.reap_all()
    events = r1.log_events()
    suspended = [e for e in events if e.get("event") == LEADERSHIP_SUSPENDED]
    stalled = [e for e in events if e.get("event") == STALLED]
    assert stalled and stalled[0]["reason"] == StallReason.NO_PROGRESS.value, stalled
    at = datetime.fromisoformat(stalled[0]["timestamp"])
    paused = [datetime.fromisoformat(e["timestamp"]) for e in suspended if datetime.fromisoformat(e["timestamp"]) < at]
    assert cuts >= 2 and len(paused) >= 2, (cuts, len(paused))
    # A clock restarted by each pause could not stall sooner than stall_timeout_s after the last one.
    assert (at - paused[-1]).total_seconds() < 4.0, (at, paused)
    # Its session closed at exit, or, when the link was cut just then, expired: the lock is free within the timeout.
    wait_for(lambda: not zk_client.get_children(GroupPaths(zk_group).election), 6.0 + 2.0,
             "r1's node to go with its session")


def test_a_full_event_queue_is_a_fail_stop(zk_hosts: str, zk_client: KazooClient, zk_group: str,
                                           tmp_path: Path) -> None:
    """No election event is ever dropped: with the control thread hung and a queue of eight, the ninth event
    (operators' drain requests here) makes the replica give its lock up and exit 4 with reason event_queue_full,
    long before the liveness timeout would."""
    fault = tmp_path / "fault"
    script = ("import sys\n"
              "from tenure.career.lifecycle import _runner\n"
              "init = _runner.Runner.__init__\n"
              "def small_queue(self, *args, **kwargs):\n"
              "    init(self, *args, **{**kwargs, 'queue_size': 8})\n"
              "_runner.Runner.__init__ = small_queue\n"
              "from tenure.service.cli import main\n"
              "sys.argv[0] = 'tenure'\n"
              "main()\n")
    log = tmp_path / "r1.log"
    with log.open("wb") as out:
        spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "data", career="counter", session_timeout_s=3,
                           handover_timeout_s=2, liveness_timeout_s=60)
        proc = subprocess.Popen(
            [sys.executable, "-c", script, "run",
             *spec.argv(zk=zk_hosts, replica_id="r1", metrics_port=0, fault_file=fault)],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        paths = GroupPaths(zk_group)

        def counting() -> bool:
            data = zk_client.exists(paths.commit) and zk_client.get(paths.commit)[0]
            return bool(data) and bool(json.loads(data).get("n"))

        wait_for(counting, 30, "r1 to count")
        fault.write_text("before_transaction hang\n")
        wait_for(lambda: not fault.exists(), 10, "the control thread to reach the hang (the fault file is taken)")
        zk_client.ensure_path(paths.drained)
        for i in range(16):  # each toggle posts a DrainChanged the hung loop never reads
            node = paths.drained_node("r1")
            if i % 2 == 0:
                zk_client.create(node, b'{"reason": "test", "since": 0}')
            else:
                zk_client.delete(node)
            time.sleep(0.1)  # paced: each change fires the watch the runner re-arms, one event each
        assert proc.wait(timeout=20) == EXIT_STALLED
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    stalled = [e for e in events if e.get("event") == STALLED]
    assert stalled and stalled[0]["reason"] == StallReason.EVENT_QUEUE_FULL.value, log.read_text()[-2000:]
    assert not zk_client.get_children(paths.election), "the node should have gone with the closed session"


def _freezable_leader_and_follower(replicas: ReplicaSet) -> tuple[Replica, Replica]:
    """r1 leading with the career ``tests.careers:freezes_when_told``, r2 in line behind it."""
    r1 = replicas.start("r1", career="tests.careers:freezes_when_told")
    wait_for(r1.is_leader, 30, "r1 to lead")
    r2 = replicas.start("r2")
    wait_for(lambda: r2.get("/readyz")[0] == 200, 30, "r2 to be in line")
    return r1, r2


def test_a_leader_whose_health_check_finds_its_jvm_frozen_gives_the_lock_up_as_a_stall(
        zk_hosts: str, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """The periodic health check, not a call of the work, is the first to find the leader's JVM frozen: the
    leader leaves the election, and its hand-over cannot stop a query in a JVM that does not answer. It must
    not report a clean handover and wait as unhealthy beside a live query: it fails stop (exit 4, reason
    spark_unresponsive), its term ends "stalled" in the history and nowhere "clean", and the follower leads."""
    replicas = counter_replica_set(zk_hosts, zk_group, tmp_path)
    data = tmp_path / "data"
    try:
        r1, r2 = _freezable_leader_and_follower(replicas)
        (data / "frozen-r1").write_text("")
        assert r1.wait(timeout_s=30) == EXIT_STALLED
        wait_for(r2.is_leader, 10, "r2 to lead")
    finally:
        replicas.reap_all()
    assert r1.has_event(HANDING_OVER, outcome="clean", reason=_FROZEN), "the health check found it first"
    assert not r1.has_event(LEFT_ELECTION), "a stalled replica does not wait as unhealthy: it exits"
    stalled = [e for e in r1.log_events() if e.get("event") == STALLED]
    assert stalled and stalled[0]["reason"] == StallReason.SPARK_UNRESPONSIVE.value
    assert "while handing over" in stalled[0]["detail"]
    terms = [t for t in read_history(zk_client, zk_group) if t.replica_id == "r1"]
    assert [t.ended for t in terms] == ["stalled"], terms
    assert terms[0].reason and "Spark's JVM" in terms[0].reason
    record = _handover_record(zk_client, zk_group)
    assert record["replica_id"] == "r2" or "stalled" in str(record.get("reason")), record
    counter_exactly_once(data)


def test_a_leader_whose_jvm_freezes_as_it_is_told_to_stop_records_a_stall_not_a_clean_stop(
        zk_hosts: str, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """SIGTERM asks the leader to hand over, and its hand-over finds the JVM frozen (no health check did). The
    runner is already STOPPING then, yet the term is still open: the stall is recorded as the term's end
    ("stalled" in the history, the handover record says so), the process exits 4, not 0 or 1, and it neither
    writes a clean handover record nor releases the node ahead of the fail-stop's record."""
    replicas = counter_replica_set(zk_hosts, zk_group, tmp_path)
    data = tmp_path / "data"
    try:
        r1, r2 = _freezable_leader_and_follower(replicas)
        (data / "frozen-at-hand-over-r1").write_text("")
        r1.signal(signal.SIGTERM)
        assert r1.wait(timeout_s=30) == EXIT_STALLED
        wait_for(r2.is_leader, 10, "r2 to lead")
    finally:
        replicas.reap_all()
    assert r1.has_event(HANDING_OVER, outcome="clean"), "SIGTERM began a clean handover"
    stalled = [e for e in r1.log_events() if e.get("event") == STALLED]
    assert stalled and stalled[0]["reason"] == StallReason.SPARK_UNRESPONSIVE.value
    assert "while handing over" in stalled[0]["detail"]
    assert not r1.has_event("stall_not_recorded")
    terms = [t for t in read_history(zk_client, zk_group) if t.replica_id == "r1"]
    assert [t.ended for t in terms] == ["stalled"], terms
    record = _handover_record(zk_client, zk_group)
    assert record["replica_id"] == "r2" or "stalled" in str(record.get("reason")), record
    counter_exactly_once(data)


def test_a_handover_past_its_budget_closes_the_session_before_it_exits(zk_hosts: str, zk_group: str,
                                                                      tmp_path: Path) -> None:
    """A SIGTERMed leader whose control thread hangs (here inside its fence) cannot finish its handover: past
    the budget (handover timeout + 2 s) it exits 3 — and closes its ZooKeeper session first, so the follower
    leads at once instead of a whole session timeout (10 s here) later."""
    replicas = counter_replica_set(zk_hosts, zk_group, tmp_path, session_timeout_s=10.0)
    try:
        fault = tmp_path / "fault-r1"
        r1 = replicas.start("r1", fault_file=fault)
        wait_for(r1.is_leader, 30, "r1 to lead")
        r2 = replicas.start("r2")
        wait_for(lambda: r2.get("/readyz")[0] == 200, 30, "r2 to be in line")
        fault.write_text("before_transaction hang\n")
        wait_for(lambda: not fault.exists(), 10, "r1 to reach the hang")
        r1.signal(signal.SIGTERM)
        termed = time.monotonic()
        assert r1.wait(timeout_s=30) == EXIT_HANDOVER_OVERRUN
        exited_s = time.monotonic() - termed
        wait_for(r2.is_leader, 10, "r2 to lead")
        led_s = time.monotonic() - termed
    finally:
        replicas.reap_all()
    assert exited_s < 2 + 2 + 2, f"r1 exited {exited_s:.1f} s after SIGTERM (budget 2 s + 2 s grace)"
    assert led_s < exited_s + 3, f"r2 led {led_s - exited_s:.1f} s after r1 exited: the session was not closed"


def _stuck_in_close(replicas: ReplicaSet, data: Path) -> tuple[Replica, int]:
    """r1 leading with ``tests.careers:stuck_in_close``; returns it and its career's child process."""
    r1 = replicas.start("r1", career="tests.careers:stuck_in_close")
    wait_for(r1.is_leader, 30, "r1 to lead")
    return r1, int((data / "child-r1").read_text())


def test_a_career_that_cannot_close_is_ended_by_the_stop_budget_with_its_processes(
        zk_hosts: str, zk_group: str, tmp_path: Path) -> None:
    """SIGTERM: the handover is clean and quick, then the career's ``close`` waits on its child for ever (as
    stopping Spark waits on a frozen JVM). Closing has the stop's budget (handover timeout 2 s + 2 s): past it
    the replica exits 3 (``close_overrun``) and kills the child. Before, the budget ended with the control loop,
    and the replica waited until something killed it."""
    replicas = counter_replica_set(zk_hosts, zk_group, tmp_path)
    child: int | None = None
    try:
        r1, child = _stuck_in_close(replicas, tmp_path / "data")
        r1.signal(signal.SIGTERM)
        stopping = time.monotonic()
        assert r1.wait(timeout_s=30) == EXIT_HANDOVER_OVERRUN
        assert time.monotonic() - stopping < 2 + 2 + 3
        wait_for(lambda: not process_running(child), 10, "the career's child to be killed")
    finally:
        replicas.reap_all()
        if child is not None:
            _kill(child)
    assert r1.has_event("handed_over") and r1.has_event("close_overrun", replica_id="r1")


def test_a_second_signal_exits_at_once_and_takes_the_careers_processes(
        zk_hosts: str, zk_group: str, tmp_path: Path) -> None:
    """A second SIGTERM while the first one's stop waits (here on a career that cannot close): the replica exits
    143 at once and kills its career's child, which an exit alone would leave behind (a frozen JVM does not see
    its parent go)."""
    replicas = counter_replica_set(zk_hosts, zk_group, tmp_path)
    child: int | None = None
    try:
        r1, child = _stuck_in_close(replicas, tmp_path / "data")
        r1.signal(signal.SIGTERM)
        wait_for(lambda: r1.has_event("election_closed"), 10, "the stop to reach the career's close")
        r1.signal(signal.SIGTERM)
        assert r1.wait(timeout_s=5) == 128 + signal.SIGTERM
        wait_for(lambda: not process_running(child), 10, "the career's child to be killed")
    finally:
        replicas.reap_all()
        if child is not None:
            _kill(child)
    assert r1.has_event("second_signal_exit") and not r1.has_event("close_overrun")


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
