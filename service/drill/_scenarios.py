"""The failover scenarios (issue 8's table): one fault each, injected for real on a fresh drill topology."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog
from kazoo.client import KazooClient

from election import group_status, read_history
from service.drill._context import Drill, is_ready
from service.drill._settings import DrillError
from service.local import NetNamespace, NetnsError, ReplicaProcess
from service.ops import connected, request_handover, wait_handover

__all__ = ["SCENARIOS", "Scenario", "expand"]

_log = structlog.get_logger("tenure.drill")


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
    """A named fault: ``inject`` runs after ``Drill.prepare`` (unless ``custom_start``) and before settling."""

    name: str
    fault: str
    inject: Callable[[Drill], None]
    netns: bool = False
    spark_only: bool = False
    custom_start: bool = False


def _handover(d: Drill) -> None:
    leader = d.leader()
    d.mark("fault", f"SIGTERM {leader.replica_id}")
    leader.signal(signal.SIGTERM)
    d.wait_successor_commit(d.settings.session_timeout_s + d.settings.work_timeout_s)
    assert leader.process is not None
    with contextlib.suppress(subprocess.TimeoutExpired):
        leader.process.wait(timeout=d.settings.handover_timeout_s + 10)
    d.wait_more_commits()


def _line(client: KazooClient, group: str) -> list[str]:
    """The replica ids in the election's line, the leader first."""
    return [c.identity.replica_id for c in group_status(client, group).contenders if c.identity is not None]


def _targeted_handover(d: Drill) -> None:
    """`tenure handover --to <last in line> --wait`, through the library calls the CLI makes: the leader hands
    over cleanly, every replica in line ahead of the target steps aside, the target's term commits; then the
    term history is read back and the old leader's place in the line."""
    leader = d.leader()
    group, replicas = d.topology.group, len(d.topology.replicas)
    # The line as the request will see it, the leader first; the target is the last in it, so at least one
    # replica stands between them (with 3 replicas exactly one) and must step aside.
    budget_s = d.settings.session_timeout_s + d.settings.work_timeout_s
    with connected(d.topology.ensemble.connect_string) as client:
        line: list[str] = []

        def full_line() -> bool:
            line[:] = _line(client, group)
            return len(line) == replicas and line[0] == leader.replica_id

        d.wait(full_line, d.settings.startup_timeout_s, f"all {replicas} replicas in line behind {leader.replica_id}")
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
]}


def expand(scenarios: list[str]) -> list[str]:
    """``all`` → every scenario in table order; an unknown name raises ``DrillError`` naming the choices."""
    names: list[str] = []
    for name in scenarios:
        if name == "all":
            names.extend(n for n in SCENARIOS if n not in names)
        elif name in SCENARIOS:
            if name not in names:
                names.append(name)
        else:
            raise DrillError(f"scenario {name!r} is unknown: choose from all, {', '.join(SCENARIOS)} "
                             "(or chaos, alone)")
    return names
