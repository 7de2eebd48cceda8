"""The failover scenarios (issue 8's table, and issue 26's stuck leaders): one fault each, injected for real on a
fresh drill topology; ``expand`` turns names, ``all`` and groups (``stuck-leader``) into the scenarios to run.

Longer than the other modules because it is a catalogue: one function per scenario, each read alone, beside the
table (``SCENARIOS``) that names them all; the drill's machinery is in ``_context``, ``_monitor`` and ``_run``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from tenure.career.drills import POISON_PILL
from tenure.career.output import SET_ASIDE
from tenure.election import ZooKeeperClient, connected, read_contenders, read_history
from tenure.service.drill._context import Drill, is_ready
from tenure.service.drill._measures import commit_interval
from tenure.service.drill._settings import (
    CLUSTER_COMMITS,
    HEALTH_CHECK_EVERY_S,
    MASTER_DOWN_S,
    SPARK_WORKER_TIMEOUT_S,
    DrillError,
    DrillSettings,
)
from tenure.service.local import NetNamespace, NetnsError, ReplicaProcess, SparkCluster, SparkClusterError
from tenure.service.ops import request_handover, wait_handover, write_lines
from tenure.service.replica import ReplicaSpec

__all__ = ["CLUSTER_SCENARIOS", "GROUPS", "SCENARIOS", "Scenario", "cluster_refusal", "expand"]

_log = structlog.get_logger("tenure.drill")

#: An executor's log lines for a task it starts, and for one it finishes or gives up (by task id)
_TASK_STARTED = re.compile(r"INFO Executor: Running task \S+ in stage \S+ \(TID (\d+)\)")
_TASK_ENDED = re.compile(r"(?:Finished task|Exception in task|Executor killed task|Executor interrupted and "
                         r"killed task) \S+ in stage \S+ \(TID (\d+)\)")


def _java_children(pid: int) -> list[int]:
    """The java processes among the children of ``pid`` (via /proc/<pid>/task/*/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{child}/comm").read_text().strip() == "java":
                        found.append(int(child))
    return found


@dataclass(frozen=True)
class Scenario:
    """A named fault: ``inject`` runs after ``Drill.prepare`` (unless ``custom_start``) and before settling.

    ``spark_only``: it needs the Spark career, for what ``spark_need`` says (the reason when it is skipped).
    ``cluster``: it faults the embedded Spark cluster (``--spark-cluster``), so ``all`` includes it only on one.
    ``produce_s``: the production lasts at least this long (the records spread over it), so that the work
    outlasts the fault and what the criteria count after it.
    ``replica_spec``: the scenario's own replica settings, made from the run's settings (the stuck-leader
    drills: the progress watchdog's limits, misbehaving user code); ``hang_files``: each replica runs with a hang
    file of its own (``Drill.hang_file``).
    """

    name: str
    fault: str
    inject: Callable[[Drill], None]
    netns: bool = False
    spark_only: bool = False
    spark_need: str = "a JVM to kill"
    custom_start: bool = False
    cluster: bool = False
    produce_s: float | None = None
    replica_spec: Callable[[DrillSettings], ReplicaSpec] | None = None
    hang_files: bool = False


def _handover(d: Drill) -> None:
    leader = d.leader()
    d.mark("fault", f"SIGTERM {leader.replica_id}")
    leader.signal(signal.SIGTERM)
    d.wait_successor_commit(d.settings.session_timeout_s + d.settings.work_timeout_s)
    assert leader.process is not None
    with contextlib.suppress(subprocess.TimeoutExpired):
        leader.process.wait(timeout=d.settings.handover_timeout_s + 10)
    d.wait_more_commits()


def _line(client: ZooKeeperClient, group: str) -> list[str]:
    """The replica ids in the election's line, the leader first."""
    return [c.identity.replica_id for c in read_contenders(client, group) if c.identity is not None]


def _full_line(d: Drill, client: ZooKeeperClient, leader: ReplicaProcess) -> list[str]:
    """Wait until every replica stands in the election's line behind ``leader``; returns the line, leader first."""
    group, replicas = d.topology.group, len(d.topology.replicas)
    line: list[str] = []

    def full() -> bool:
        line[:] = _line(client, group)
        return len(line) == replicas and line[0] == leader.replica_id

    d.wait(full, d.settings.startup_timeout_s, f"all {replicas} replicas in line behind {leader.replica_id}")
    return line


def _targeted_handover(d: Drill) -> None:
    """`tenure handover --to <last in line> --wait`, through the library calls the CLI makes: the leader hands
    over cleanly, every replica in line ahead of the target steps aside, the target's term commits; then the
    term history is read back and the old leader's place in the line."""
    leader = d.leader()
    group = d.topology.group
    # The line as the request will see it, the leader first; the target is the last in it, so at least one
    # replica stands between them (with 3 replicas exactly one) and must step aside.
    budget_s = d.settings.session_timeout_s + d.settings.work_timeout_s
    with connected(d.topology.ensemble.connect_string) as client:
        line = _full_line(d, client, leader)
        target, ahead = line[-1], line[1:-1]
        d.m.handover_target, d.m.handover_ahead = target, ahead
        d.mark("fault", f"tenure handover --to {target} (ahead of it: {', '.join(ahead)})")
        request = request_handover(client, group, to=target, timeout_s=budget_s)
        done = wait_handover(client, group, request, timeout_s=budget_s)
        if done is None:
            raise RuntimeError(f"no term after epoch {request.epoch} committed within {budget_s:g} s of the "
                             f"handover request to {target}")
        d.m.handover_new_leader, d.m.handover_gap_s = done.new.replica_id, done.gap_s
        old = leader.replica_id
        d.wait(lambda: d.stepped_down(old, d.m.fault_at or 0.0), d.settings.work_timeout_s,
               f"{old} to rejoin the election as follower")
        d.wait_more_commits()
        # Read after more commits: the old term's end was written before its node's release, long before.
        ended = next((t for t in read_history(client, group) if t.epoch == request.epoch), None)
        if ended is not None:
            d.m.old_term_ended, d.m.old_term_reason = ended.ended, ended.reason
        line = _line(client, group)
        d.m.old_line_position = line.index(old) + 1 if old in line else None
    d.m.replicas_down = [r.replica_id for r in d.topology.replicas if not r.alive]


def _crash(d: Drill) -> None:
    leader = d.leader()
    d.mark("fault", f"SIGKILL {leader.replica_id}")
    leader.signal(signal.SIGKILL)
    d.killed[leader.replica_id] = time.time()
    d.wait_successor_commit(d.settings.session_timeout_s + d.settings.work_timeout_s)
    d.wait_more_commits()


def _zombie(d: Drill) -> None:
    """Arm ``before_transaction pause`` on the leader: its whole tree (Python and JVM) stops inside the fence,
    its leadership checks passed and its commit transaction about to be sent. Keep it stopped past its session
    timeout until a successor has committed, then resume it: the transaction it sends must be fenced."""
    leader = d.leader()
    armed_at = time.time()
    leader.arm("before_transaction", "pause")
    event = d.wait_paused_at(leader, "before_transaction", armed_at, d.settings.work_timeout_s)
    d.mark("fault", f"{leader.replica_id} paused at before_transaction (whole tree)", at=event.at)
    d.wait_successor_commit(d.settings.session_timeout_s + d.settings.work_timeout_s)
    d.mark("heal", f"resume {leader.replica_id} (whole tree)")
    leader.resume()
    heal = d.m.heal_at or 0.0
    d.wait(lambda: d.stepped_down(leader.replica_id, heal), d.settings.work_timeout_s, "the zombie to step down")
    d.wait_more_commits()


def _namespaced_leader(d: Drill, action: str) -> tuple[ReplicaProcess, NetNamespace]:
    """The leader and its namespace: network drills need replica-1, the one replica in a namespace of its own."""
    assert d.ns is not None
    leader = d.leader()
    if leader.replica_id != "replica-1":
        raise RuntimeError(f"{leader.replica_id} leads, not the namespaced replica-1: cannot {action}")
    return leader, d.ns


def _partition(d: Drill) -> None:
    leader, ns = _namespaced_leader(d, "cut it off")
    d.mark("fault", f"cut {leader.replica_id} off")
    ns.cut()
    d.wait_successor_commit(d.settings.session_timeout_s + d.settings.work_timeout_s)
    time.sleep(1.0)
    d.mark("heal", "heal link")
    ns.heal()
    heal = d.m.heal_at or 0.0
    d.wait(lambda: d.stepped_down(leader.replica_id, heal), d.settings.work_timeout_s,
           "the cut-off leader to rejoin as follower")
    d.wait_more_commits()


def _short_partition(d: Drill) -> None:
    leader, ns = _namespaced_leader(d, "cut it off")
    cut_s = 0.3 * d.settings.safe_until_s
    d.mark("fault", f"cut {leader.replica_id} off for {cut_s:.1f} s")
    ns.cut()
    time.sleep(cut_s)
    d.mark("heal", "heal link")
    ns.heal()
    time.sleep(d.settings.session_timeout_s)
    d.wait_more_commits()


def _zk_loss(which: str) -> Callable[[Drill], None]:
    def inject(d: Drill) -> None:
        d.leader()
        ensemble = d.topology.ensemble
        server = ensemble.leader() if which == "leader" else ensemble.followers()[0]
        d.mark("fault", f"SIGKILL ZooKeeper {which} {server.name}")
        ensemble.kill(server)
        time.sleep(2 * d.settings.session_timeout_s)
        d.mark("heal", f"restart {server.name}")
        ensemble.start_server(server, wait=True)
        d.wait_more_commits()

    return inject


def _quorum_loss(d: Drill) -> None:
    d.leader()
    ensemble = d.topology.ensemble
    victims = [ensemble.leader(), ensemble.followers()[0]]
    d.mark("fault", f"SIGKILL {' and '.join(s.name for s in victims)}")
    for server in victims:
        ensemble.kill(server)
    time.sleep(d.settings.session_timeout_s + 2)
    d.mark("heal", "restart both")
    for server in victims:
        ensemble.start_server(server)
    ensemble.wait_serving(60, victims)
    d.wait(lambda: len(d.topology.leaders()) == 1, d.settings.session_timeout_s + d.settings.work_timeout_s,
           "one leader after the outage")
    d.wait_more_commits()
    counts = []
    for _ in range(10):
        counts.append(len(d.topology.leaders()))
        time.sleep(0.2)
    d.m.leaders_after = max(counts) if min(counts) == max(counts) else -1


def _flaky_link(d: Drill) -> None:
    _, ns = _namespaced_leader(d, "shape its link")
    duration_s = 3 * d.settings.session_timeout_s
    try:
        ns.shape(delay_ms=150, jitter_ms=50, loss_pct=10)
    except NetnsError as exc:
        # Kernels without sch_netem (containers, minimal VMs): flap the link instead, short outages at
        # random, each well below the safe-until deadline — loss in bursts rather than per packet.
        _log.warning("netem_unavailable", reason=str(exc), fallback="link flapping")
        down_max = 0.4 * d.settings.safe_until_s
        d.mark("fault", f"link flapping (no netem here): down 0.1–{down_max:.1f} s, up 0.3–1.2 s")
        rng = random.Random(8)
        until = time.monotonic() + duration_s
        while time.monotonic() < until:
            ns.cut()
            time.sleep(rng.uniform(0.1, down_max))
            ns.heal()
            time.sleep(rng.uniform(0.3, 1.2))
        d.mark("heal", "flapping stopped")
    else:
        d.mark("fault", "netem 150±50 ms, 10% loss")
        time.sleep(duration_s)
        d.mark("heal", "netem removed")
        ns.unshape()
    d.wait_more_commits()


def _spark_death(d: Drill) -> None:
    leader = d.leader()
    assert leader.pid is not None
    jvms = _java_children(leader.pid)
    if not jvms:
        raise RuntimeError(f"{leader.replica_id} (pid {leader.pid}) has no java child process to kill")
    d.mark("fault", f"SIGKILL Spark JVM of {leader.replica_id}")
    for pid in jvms:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    d.wait_successor_commit(d.settings.session_timeout_s + d.settings.work_timeout_s)
    d.wait_more_commits()


def _cold_start(d: Drill) -> None:
    d.start_topology(all_at_once=True)
    d.wait_ready()
    d.start_work()


def _rolling_restart(d: Drill) -> None:
    d.leader()
    for replica_id in [r.replica_id for r in d.topology.replicas]:
        d.restarts.append((d.mark("fault", f"restart {replica_id}"), replica_id))
        new = d.topology.restart(replica_id)
        d.wait(functools.partial(is_ready, new), d.settings.startup_timeout_s, f"{replica_id} ready again")
        d.wait(lambda: len(d.topology.leaders()) == 1, d.settings.startup_timeout_s, "one leader")
        d.wait_more_commits(2)


def _cluster(d: Drill) -> SparkCluster:
    cluster = d.topology.spark
    if cluster is None:
        raise RuntimeError(f"{d.name} faults the Spark cluster, and this drill runs none: add --spark-cluster 2")
    return cluster


def _master_state(cluster: SparkCluster) -> dict[str, Any] | None:
    """The master's JSON, or None while it does not answer (down, starting)."""
    try:
        return cluster.state()
    except SparkClusterError:
        return None


def _alive_workers(cluster: SparkCluster, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """This cluster's workers the master has ALIVE, by name, with their entries (``coresused`` …)."""
    alive = {(w.get("host"), w.get("port")): w for w in state.get("workers", []) if w.get("state") == "ALIVE"}
    return {w.name: alive[(w.host, w.port)] for w in cluster.workers if (w.host, w.port) in alive}


def _executor_on(cluster: SparkCluster, name: str) -> bool:
    """The master has worker ``name`` ALIVE with a core in use (only the leader's application runs here)."""
    state = _master_state(cluster)
    worker = _alive_workers(cluster, state).get(name) if state is not None else None
    return worker is not None and int(worker.get("coresused", 0)) >= 1


def _wait_steady(d: Drill, cluster: SparkCluster) -> None:
    """Wait until the master serves one application (the leader's) with an executor on every running worker,
    then for ``CLUSTER_COMMITS`` commits from there: the leader's steady cadence, which the budgets build on."""
    running = [w.name for w in cluster.workers if w.running]

    def spread() -> bool:
        state = _master_state(cluster)
        if state is None or state.get("status") != "ALIVE" or len(state.get("activeapps", [])) != 1:
            return False
        alive = _alive_workers(cluster, state)
        return all(name in alive and int(alive[name].get("coresused", 0)) >= 1 for name in running)

    d.wait(spread, d.settings.startup_timeout_s, "the leader's application with an executor on every worker")
    d.m.cadence_from = time.time()
    d.wait(lambda: d.commits_between(d.m.cadence_from or 0.0, math.inf) >= CLUSTER_COMMITS,
           d.settings.work_timeout_s, f"{CLUSTER_COMMITS} commits on the whole cluster before the fault")


def _steady_interval(d: Drill) -> float | None:
    """The leader's median commit interval since its application spread over the cluster (``_wait_steady``)."""
    since = d.m.cadence_from or 0.0
    return commit_interval([c for c in d.commits() if c.observed_at >= since], d.m.old_epoch or 0)


def _worker_loss(d: Drill) -> None:
    """SIGKILL a worker and its executor in the middle of a batch: Spark reruns the lost tasks on the surviving
    workers, the term goes on. Then the worker is started again and the application gets an executor on it."""
    cluster = _cluster(d)
    d.leader()
    _wait_steady(d, cluster)
    # _wait_steady returns on a commit: the next batch has just begun; strike while its tasks run.
    time.sleep(0.4 * (_steady_interval(d) or 0.0))
    state = _master_state(cluster) or {}
    busy = [name for name, w in _alive_workers(cluster, state).items() if int(w.get("coresused", 0)) >= 1]
    victim = busy[0] if busy else cluster.workers[0].name
    d.m.lost_worker = victim
    fault = d.mark("fault", f"SIGKILL Spark {victim} and its executor")
    cluster.kill_worker(victim)
    dropped: list[float] = []

    def dropped_yet() -> bool:
        if not dropped:
            now = time.time()
            state = _master_state(cluster)
            if state is not None and victim not in _alive_workers(cluster, state):
                dropped.append(now)
        return bool(dropped)

    def progressed() -> bool:
        dropped_yet()
        return d.commits_between(fault, math.inf) >= CLUSTER_COMMITS or d.drained()

    d.m.tasks_lost = _tasks_cut_short(cluster, victim)  # read before the restart adds an executor's log
    d.wait(progressed, d.settings.work_timeout_s, f"{CLUSTER_COMMITS} commits after {victim}'s loss")
    d.wait(dropped_yet, SPARK_WORKER_TIMEOUT_S + 10, f"the master to drop {victim}")
    d.m.worker_dropped_s = dropped[0] - fault
    heal = d.mark("heal", f"restart {victim}")
    cluster.start_worker(victim, wait=True, timeout_s=d.settings.startup_timeout_s)
    d.m.worker_back_s = time.time() - heal
    with contextlib.suppress(TimeoutError):  # a fact for the report, not a criterion
        d.wait(lambda: _executor_on(cluster, victim), SPARK_WORKER_TIMEOUT_S, f"an executor on {victim} again")
        d.m.executor_back_s = time.time() - heal
    d.wait_more_commits()


def _tasks_cut_short(cluster: SparkCluster, worker: str) -> int:
    """Tasks the executors of ``worker`` started and never finished, from their logs (``Running task … (TID n)``
    without ``Finished task … (TID n)``): after its SIGKILL, the tasks Spark has to run again elsewhere. (The
    driver logs an executor's loss at INFO, which the replica's log leaves out.)"""
    cut = 0
    for log in sorted(cluster.worker(worker).directory.glob("work/*/*/stderr")):
        with contextlib.suppress(OSError):
            text = log.read_text(errors="replace")
            cut += len(set(_TASK_STARTED.findall(text)) - set(_TASK_ENDED.findall(text)))
    return cut


def _master_loss(d: Drill) -> None:
    """SIGKILL the Spark master, hold it down while batches run (the driver talks to its executors directly),
    restart it: it recovers its workers and the running application from its FILESYSTEM state; the term goes
    on. Down for ``MASTER_DOWN_S``, or two of the leader's steady commit intervals if longer (a loaded machine):
    at least one whole batch runs without a master."""
    cluster = _cluster(d)
    d.leader()
    _wait_steady(d, cluster)
    down_s = max(MASTER_DOWN_S, 2 * (_steady_interval(d) or 0.0))
    fault = d.mark("fault", f"SIGKILL the Spark master (down {down_s:.0f} s)")
    cluster.kill_master()
    time.sleep(max(0.0, fault + down_s - time.time()))
    heal = d.mark("heal", "restart the Spark master (recovery from its FILESYSTEM state)")
    d.m.master_down_s = heal - fault
    cluster.start_master(wait=False)
    apps: list[dict[str, Any]] = []

    def back() -> bool:
        if not cluster.master.running:
            raise RuntimeError(f"the restarted Spark master exited: see {cluster.master.log}")
        state = _master_state(cluster)
        if state is None or state.get("status") != "ALIVE" or len(state.get("activeapps", [])) != 1:
            return False
        apps[:] = state["activeapps"]
        return True

    d.wait(back, SPARK_WORKER_TIMEOUT_S + d.settings.work_timeout_s, "the application back on the restarted master")
    d.m.app_back_s = time.time() - heal
    d.m.app_state_after = str(apps[0].get("state"))
    cluster.wait_workers(timeout_s=d.settings.startup_timeout_s)
    d.wait_more_commits()


# -- the stuck-leader drills (issue 26): a replica's work hangs while its Python process and ZooKeeper session live ---

#: poison-batch's queue file; its ids and key are its own (the producer's are ``<run>-<i>`` over keys ``k<j>``)
_POISON_FILE = "drill-poison.jsonl"
_POISON_KEY = "drill-poison"


def _hung_row_spec(s: DrillSettings) -> ReplicaSpec:
    """The watchdog's limits, a row function that hangs where told, and enough attempts that no record is
    dead-lettered before the hung leader gives its lock up (``DrillSettings.retry_attempts``)."""
    return s.watchdog_spec() | ReplicaSpec(row_function="tenure.career.drills:hang_when_told",
                                           retry_attempts=s.retry_attempts)


def _leader_alone(s: DrillSettings) -> ReplicaSpec:
    """The cluster drills watch the leader's application alone on the master (its executor on every worker, the
    one application the restarted master recovers): followers hold no standby executors there."""
    return ReplicaSpec(standby_executors=0)


def _poison_spec(s: DrillSettings) -> ReplicaSpec:
    return s.watchdog_spec() | ReplicaSpec(transform="tenure.career.drills:fail_on_poison_pill")


def _wait_exit(d: Drill, replica: ReplicaProcess, timeout_s: float, why: str) -> int | None:
    """Wait for ``replica``'s process to exit on its own (``why``), end its term there on the timeline, and
    return its exit code."""
    d.wait(lambda: not replica.alive, timeout_s, f"{replica.replica_id} to exit ({why})")
    d.killed[replica.replica_id] = time.time()
    return replica.process.returncode if replica.process is not None else None


def _took_over(d: Drill, since: float) -> None:
    """Wait for another replica's first commit (an epoch above the stuck leader's) and measure it from ``since``,
    the fault that moved the lock."""
    d.wait_successor_commit(d.settings.session_timeout_s + d.settings.work_timeout_s)
    commit = d.successor_commit()
    assert commit is not None
    d.m.fault_to_commit_s = commit.committed_at - since


def _restart_as_follower(d: Drill, replica_id: str, label: str) -> None:
    """Start the replica that gave its lock up again (a supervisor's job; the drill topology has none) and wait
    until it stands in the line as a follower."""
    heal = d.mark("heal", label)
    d.topology.restart(replica_id)
    # Once a second: it warms up first (tens of seconds with Spark), and each look reads every replica's log.
    d.topology.wait_for(lambda: d.stepped_down(replica_id, heal), d.settings.startup_timeout_s,
                        f"{replica_id} to rejoin as follower", interval_s=1.0)


def _thaw(pids: list[int]) -> None:
    """SIGCONT ``pids``, those still there: a replica that gave its lock up killed its frozen JVM itself, and once
    its process is gone ``ReplicaProcess.resume`` no longer reaches them."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _frozen_jvm(d: Drill) -> None:
    """SIGSTOP the leader's Spark JVM and its Python workers, not the replica's own process: its ZooKeeper
    session stays alive, and only its next call into Spark, missing the probe deadline, tells. It must give its
    lock up and exit 4 (``spark_unresponsive``), and another replica commit; then it is restarted and rejoins."""
    leader = d.leader()
    d.m.stuck_replica = leader.replica_id
    s = d.settings
    at = d.mark("fault", f"freeze the Spark JVM of {leader.replica_id} (its Python runs on)")
    frozen = leader.freeze_spark()
    if not frozen:
        raise RuntimeError(f"{leader.replica_id} (pid {leader.pid}) has no Spark JVM to freeze")
    d.m.stuck_exit_code = _wait_exit(d, leader, s.probe_timeout_s + s.liveness_timeout_s + s.work_timeout_s,
                                     "its JVM frozen")
    _took_over(d, at)
    _thaw(frozen)
    _restart_as_follower(d, leader.replica_id, f"thaw and restart {leader.replica_id}")


def _write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path`` through a hidden name and a rename: a reader sees all of it or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}")
    partial.write_text(text)
    partial.replace(path)


def _hung_row_function(d: Drill) -> None:
    """The leader's row function (only the leader's: its hang file) waits on a socket that accepts and never
    answers, a dependency called without a timeout. Each call runs into ``--row-timeout-s``, its records wait for
    retry, the batches stop making progress, and after the stall timeout the leader must give its lock up and
    exit 4 (``no_progress``) before any record is dead-lettered; another replica commits. Then the hang file is
    removed (the fault lifted) and the old leader restarted."""
    leader = d.leader()
    d.m.stuck_replica = leader.replica_id
    s = d.settings
    hang = d.hang_file(leader.replica_id)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # the kernel completes connections into the backlog; nobody ever reads or answers
        # Strike as a batch begins, just after a commit: that batch then hangs whole, and the stall clock runs
        # from the fault (a batch struck near its end would still finish, with progress, and restart the clock).
        since = time.time()
        d.wait(lambda: d.commits_between(since, math.inf) >= 1, s.work_timeout_s, "a commit to strike after")
        at = d.mark("fault", f"the row function of {leader.replica_id} hangs on a socket that never answers")
        _write_atomically(hang, f"socket 127.0.0.1:{listener.getsockname()[1]}\n")
        try:
            d.m.stuck_exit_code = _wait_exit(
                d, leader, s.stall_timeout_s + s.first_batch_allowance_s + s.work_timeout_s, "its row function hung")
            _took_over(d, at)
        finally:
            hang.unlink(missing_ok=True)
    _restart_as_follower(d, leader.replica_id, f"lift the hang, restart {leader.replica_id}")


def _frozen_next_in_line(d: Drill) -> None:
    """SIGSTOP the Spark JVM of the follower next in line: its health probe gets no answer, so it must leave the
    line (within the probe timeout and one health check); then the leader is SIGTERMed, and the third replica,
    the healthy one, must take over and commit — a frozen next in line costs no more than a stuck leader. Then
    the frozen follower is thawed (it rejoins once healthy) and the old leader restarted."""
    leader = d.leader()
    s = d.settings
    with connected(d.topology.ensemble.connect_string) as client:
        line = _full_line(d, client, leader)
        frozen, third = d.topology.replica(line[1]), d.topology.replica(line[2])
        d.m.stuck_replica, d.m.healthy_successor = frozen.replica_id, third.replica_id
        at = d.mark("fault", f"freeze the Spark JVM of {frozen.replica_id}, next in line (its Python runs on)")
        pids = frozen.freeze_spark()
        if not pids:
            raise RuntimeError(f"{frozen.replica_id} (pid {frozen.pid}) has no Spark JVM to freeze")
        d.wait(lambda: frozen.replica_id not in _line(client, d.topology.group),
               s.probe_timeout_s + HEALTH_CHECK_EVERY_S + s.work_timeout_s,
               f"{frozen.replica_id} to leave the election's line")
        d.m.left_line_s = time.time() - at
        sigterm = d.mark("fault", f"SIGTERM {leader.replica_id} ({third.replica_id} next in line now)")
        leader.signal(signal.SIGTERM)
        _took_over(d, sigterm)
        assert leader.process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            leader.process.wait(timeout=s.handover_timeout_s + 10)
        d.mark("heal", f"thaw {frozen.replica_id}, restart {leader.replica_id}")
        frozen.resume()
        d.topology.restart(leader.replica_id)
        d.topology.wait_for(lambda: len(_line(client, d.topology.group)) == len(d.topology.replicas),
                            s.startup_timeout_s,
                            f"{frozen.replica_id} (thawed) and {leader.replica_id} (restarted) back in line",
                            interval_s=1.0)


def _poison_batch(d: Drill) -> None:
    """Land one queue file holding a record with the poison pill while the producer runs: the transform fails
    its whole batch on every leader. Each failing replica must release and back off, not exit; the term that
    reaches the batch after ``max_batch_attempts`` failed terms and ``set_aside_after_s`` of failing splits it: the
    pill's record is set aside (its line and a manifest under ``set-aside/``), the rest of its batch is written,
    and the queue moves on. The term history tells how many terms failed before."""
    d.leader()
    s = d.settings
    now_ms = int(time.time() * 1000)
    records = [{"id": f"{_POISON_KEY}-{i}", "key": _POISON_KEY, "seq": i + 1, "ts": now_ms,
                "payload": {POISON_PILL: True} if i == 2 else {"n": i}} for i in range(5)]
    at = d.mark("fault", f"land {_POISON_FILE}: {len(records)} records, one with the poison pill")
    write_lines(d.topology.data_root / "landing", [json.dumps(r).encode() for r in records], _POISON_FILE)
    found: list[Path] = []

    def set_aside() -> bool:
        found[:] = sorted((d.topology.data_root / SET_ASIDE).glob("batch-*-manifest.json"))
        return bool(found)

    d.wait(set_aside, (s.max_batch_attempts + 1) * s.work_timeout_s + s.set_aside_after_s,
           "the poison batch to be split")
    manifest = json.loads(found[0].read_text())
    d.m.set_aside_epoch, d.m.set_aside_batch = int(manifest["epoch"]), int(manifest["batch_id"])
    d.m.set_aside_s = float(manifest["set_aside_at"]) - at
    _took_over(d, at)
    d.wait_more_commits()
    with connected(d.topology.ensemble.connect_string) as client:
        terms = read_history(client, d.topology.group)
    first = d.m.old_epoch or 0
    d.m.failed_terms = sum(1 for t in terms if first <= t.epoch < d.m.set_aside_epoch and t.ended == "failed")
    d.m.replicas_down = [r.replica_id for r in d.topology.replicas if not r.alive]


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("handover", "SIGTERM the leader", _handover),
    Scenario("targeted-handover", "tenure handover --to the replica last in line", _targeted_handover),
    Scenario("crash", "SIGKILL the leader", _crash),
    Scenario("zombie", "pause the leader's whole tree at before_transaction past its session timeout, then "
             "resume it", _zombie),
    Scenario("partition", "cut the leader's namespace off ZooKeeper, then heal", _partition, netns=True),
    Scenario("short-partition", "the same, shorter than the safe-until deadline", _short_partition, netns=True),
    Scenario("zk-follower-loss", "kill a ZooKeeper follower", _zk_loss("follower")),
    Scenario("zk-leader-loss", "kill the ZooKeeper leader", _zk_loss("leader")),
    Scenario("quorum-loss", "kill 2 of 3 ZooKeeper servers, then restart them", _quorum_loss),
    Scenario("flaky-link", "delay and loss on the leader's link (tc netem)", _flaky_link, netns=True),
    Scenario("spark-death", "kill the leader's Spark JVM", _spark_death, spark_only=True),
    Scenario("cold-start", "all replicas start at once", _cold_start, custom_start=True),
    Scenario("rolling-restart", "restart every replica in turn", _rolling_restart),
    Scenario("worker-loss", "SIGKILL a Spark worker and its executor while batches run, later restart it",
             _worker_loss, spark_only=True, cluster=True, produce_s=40.0, replica_spec=_leader_alone),
    Scenario("master-loss", f"SIGKILL the Spark master, restart it {MASTER_DOWN_S:g} s later (or two commit "
             "intervals, if longer)", _master_loss,
             spark_only=True, cluster=True, produce_s=40.0, replica_spec=_leader_alone),
    # The stuck-leader drills produce for 40 s at least: work must wait when the stuck leader gives its lock up.
    Scenario("frozen-jvm", "freeze the leader's Spark JVM (SIGSTOP), its Python process running on", _frozen_jvm,
             spark_only=True, spark_need="a JVM to freeze", produce_s=40.0, replica_spec=DrillSettings.watchdog_spec),
    Scenario("hung-row-function", "the leader's row function hangs on a socket that never answers",
             _hung_row_function, spark_only=True, spark_need="a row function", produce_s=40.0,
             replica_spec=_hung_row_spec, hang_files=True),
    Scenario("frozen-next-in-line", "freeze the Spark JVM of the follower next in line, then SIGTERM the leader",
             _frozen_next_in_line, spark_only=True, spark_need="a JVM to freeze", produce_s=40.0,
             replica_spec=DrillSettings.watchdog_spec),
    Scenario("poison-batch", "a queue file whose poison pill fails its batch on every leader", _poison_batch,
             spark_only=True, spark_need="a transform", produce_s=40.0, replica_spec=_poison_spec),
]}

#: named groups of scenarios, for ``expand``: ``tenure drill stuck-leader`` runs a replica whose work hangs while
#: its process and ZooKeeper session live (issue 26)
GROUPS: dict[str, list[str]] = {
    "stuck-leader": ["frozen-jvm", "hung-row-function", "frozen-next-in-line", "poison-batch"],
}

#: the scenarios that fault the Spark cluster: they need ``--spark-cluster``
CLUSTER_SCENARIOS = [name for name, spec in SCENARIOS.items() if spec.cluster]


def expand(scenarios: list[str], *, spark_cluster: bool = False) -> list[str]:
    """``all`` → every scenario in table order (those faulting the Spark cluster only with ``spark_cluster``); a
    group (``GROUPS``) → its scenarios in its order; each name once. An unknown name raises ``DrillError``
    naming the choices."""
    names: list[str] = []
    for name in scenarios:
        if name == "all":
            chosen = [n for n, spec in SCENARIOS.items() if spark_cluster or not spec.cluster]
        elif name in GROUPS:
            chosen = GROUPS[name]
        elif name in SCENARIOS:
            chosen = [name]
        else:
            raise DrillError(f"scenario {name!r} is unknown: choose from all, {', '.join(GROUPS)}, "
                             f"{', '.join(SCENARIOS)} (or chaos, alone)")
        names.extend(n for n in chosen if n not in names)
    return names


def cluster_refusal(names: list[str], *, career: str, spark_workers: int) -> str | None:
    """Why these scenarios cannot run with this career and ``--spark-cluster`` (one line, the fix in it), or
    ``None``. Checked before anything starts."""
    if spark_workers and career != "spark":
        return (f"--spark-cluster runs the Spark career's application on a cluster, and the {career} career has "
                "none: drop --spark-cluster, or drop --career " + career)
    faulting = [n for n in names if SCENARIOS[n].cluster]
    if faulting and not spark_workers:
        also = f" and the Spark career (drop --career {career})" if career != "spark" else ""
        verb = "faults" if len(faulting) == 1 else "fault"
        return f"{' and '.join(faulting)} {verb} the Spark cluster: add --spark-cluster 2{also}"
    if "worker-loss" in faulting and spark_workers < 2:
        return (f"worker-loss needs a worker to survive the one it kills (the batch goes on there), and "
                f"--spark-cluster {spark_workers} gives one: use --spark-cluster 2")
    return None
