"""`tenure drill chaos`: K seeded random faults over a steady production, a recovery wait after each, one audit.

The run starts the drill topology (3 ZooKeeper servers, 3 warm replicas, each with a fault file) and, with the
Spark career, a producer writing at a steady rate for the whole production window (repeated ids and bad lines
included, files back to back). The seed draws the plan up front: K faults, one per equal slot of the production
window (so they are spread over it), each of one kind:

- ``sigkill`` / ``sigterm``: the leader is killed / stopped cleanly, then started again;
- ``pause``: the leader's whole process tree (Python and JVM) is stopped until a successor has committed (past
  its session timeout), then resumed;
- ``partition``: the leader's network namespace is cut off until a successor has committed, then healed (needs
  root and ``ip netns``: every replica then runs in a namespace of its own; skipped with the reason otherwise);
- ``zk-restart``: one ZooKeeper server (the ensemble's leader or a follower, drawn) is killed for one session
  timeout and started again; the quorum stays;
- ``inject``: a fault point (``service.replica._faults``) armed on the leader with ``pause`` or ``kill`` (``inaugurate``
  on the followers, then the leader hands over so that one of them reaches it); a killed replica is started
  again, a paused one resumed once a successor has committed.

Before each fault the run waits for its planned time and for a healthy topology (every replica ready, one
leader); after it, for recovery: a leader committing again (a new term's commit after a leader fault; any commit
after a ZooKeeper restart), each with a deadline. Then the producer finishes, the queue drains, everything stops
and ``tenure verify`` (or the counter audit) checks the whole output. What is measured reuses the drill's
monitor (commit record polled every 50 ms, /metrics) and the replicas' logs.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import structlog

from service.drill._drill import (
    Criterion,
    Drill,
    DrillError,
    DrillSettings,
    ScenarioResult,
    _stepped_down,
    _timeline,
    audit_counter,
    career_unavailable,
    plot_timeline,
    verdict,
)
from service.local import NetNamespace, NetnsError, ReplicaProcess, netns_unavailable
from service.ops import verify
from service.replica import FAULT_POINTS

__all__ = [
    "FAULT_KINDS",
    "ChaosSettings",
    "FaultOutcome",
    "PlannedFault",
    "plan_faults",
    "render_chaos",
    "run_chaos",
]

_log = structlog.get_logger("tenure.chaos")

#: The kinds a fault is drawn from, each equally likely.
FAULT_KINDS: Final = ("sigkill", "sigterm", "pause", "partition", "zk-restart", "inject")
#: Fault points each career reaches (the Spark career's batch windows and inauguration; any career's fence).
CAREER_POINTS: Final = {"spark": tuple(FAULT_POINTS), "counter": ("before_transaction",)}
INJECT_ACTIONS: Final = ("pause", "kill")
ZK_ROLES: Final = ("leader", "follower")
#: A planned fault lands at a uniform point of the middle of its slot: never two faults back to back.
_SLOT_MARGIN = 0.15


@dataclass(frozen=True)
class PlannedFault:
    """One fault of the plan: its kind, when (seconds from the production start) and its parameters."""

    index: int
    kind: str
    at_s: float
    point: str | None = None
    action: str | None = None
    zk_role: str | None = None

    @property
    def label(self) -> str:
        if self.kind == "inject":
            return f"inject {self.point} {self.action}"
        if self.kind == "zk-restart":
            return f"zk-restart ({self.zk_role})"
        return self.kind


def plan_faults(seed: int, count: int, window_s: float, *, career: str) -> list[PlannedFault]:
    """The seeded plan: ``count`` faults over ``[0, window_s)``, one per equal slot, kinds drawn uniformly.

    The same seed, count, window and career give the same plan wherever it runs: a kind that cannot run here
    (``partition`` without root) stays in the plan and is reported as skipped.
    """
    if count < 1:
        raise DrillError(f"--faults {count}: a chaos run needs at least one fault")
    rng = random.Random(seed)
    points = CAREER_POINTS.get(career, CAREER_POINTS["counter"])
    slot = window_s / count
    plan = []
    for i in range(count):
        at_s = slot * (i + rng.uniform(_SLOT_MARGIN, 1 - _SLOT_MARGIN))
        kind = rng.choice(FAULT_KINDS)
        # Every parameter is drawn for every fault, so one fault's kind never shifts the next one's draws.
        point, action, role = rng.choice(points), rng.choice(INJECT_ACTIONS), rng.choice(ZK_ROLES)
        plan.append(PlannedFault(i + 1, kind, round(at_s, 2), point=point if kind == "inject" else None,
                                 action=action if kind == "inject" else None,
                                 zk_role=role if kind == "zk-restart" else None))
    return plan


@dataclass(frozen=True)
class ChaosSettings:
    """A chaos run: the drill timings (``drill``), the fault count, the seed and the production window."""

    drill: DrillSettings
    faults: int
    seed: int
    #: faults are spread over [0, window_s) from the production start; the producer runs a little longer
    window_s: float

    @classmethod
    def make(cls, *, career: str, records: int | None, faults: int, seed: int | None,
             short: bool) -> ChaosSettings:
        """Spark needs about 30 s per fault (a session timeout, an inauguration, a batch; a restarted replica's
        warm-up comes on top), the counter about 10 s."""
        base = DrillSettings.make(career=career, records=records, short=short)
        spacing = (30.0 if short else 40.0) if career == "spark" else (10.0 if short else 15.0)
        window = faults * spacing
        drill = replace(base, produce_s=window + spacing / 2)
        drawn = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
        return cls(drill=drill, faults=faults, seed=drawn, window_s=window)


@dataclass
class FaultOutcome:
    """What one fault did: when (unix time and seconds from the production start), to whom, and the recovery."""

    index: int
    kind: str
    label: str
    planned_s: float
    status: str = "pending"  # "recovered", "failed" or "skipped"
    reason: str = ""
    at: float | None = None
    at_s: float | None = None
    target: str | None = None
    old_epoch: int | None = None
    recovery_s: float | None = None
    recovered_epoch: int | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AuditSummary:
    """The end-of-run audit: ``tenure verify`` (Spark) or the counter check; ids fields are None for the counter."""

    ok: bool = False
    ids_in: int | None = None
    ids_written: int | None = None
    quarantined: int | None = None
    late: int | None = None
    lost: int | None = None
    duplicated: int | None = None
    inversions: int | None = None
    detail: str = ""


@dataclass
class ChaosResult:
    settings: ChaosSettings
    plan: list[PlannedFault]
    faults: list[FaultOutcome] = field(default_factory=list)
    audit: AuditSummary = field(default_factory=AuditSummary)
    criteria: list[Criterion] = field(default_factory=list)
    status: str = "fail"
    error: str | None = None
    seconds: float = 0.0
    replicas_alive_at_end: int = 0
    namespaces: str = ""
    timeline: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.settings.seed, "status": self.status, "error": self.error,
            "seconds": round(self.seconds, 2), "faults_requested": self.settings.faults,
            "window_s": self.settings.window_s, "settings": asdict(self.settings.drill),
            "plan": [asdict(p) for p in self.plan], "faults": [o.to_dict() for o in self.faults],
            "audit": asdict(self.audit), "criteria": [asdict(c) for c in self.criteria],
            "replicas_alive_at_end": self.replicas_alive_at_end, "namespaces": self.namespaces,
            "timeline": self.timeline,
        }


class _FaultFailed(Exception):
    """One fault's step did not happen in time; the run restores the topology and goes on."""


class Chaos:
    """Runs a plan on a drill topology: faults, recoveries, restores."""

    def __init__(self, drill: Drill, settings: ChaosSettings, plan: list[PlannedFault], netns_why: str | None):
        self.d = drill
        self.settings = settings
        self.plan = plan
        self.netns_why = netns_why
        self.production_start = 0.0
        self.outcomes: list[FaultOutcome] = []

    @property
    def s(self) -> DrillSettings:
        return self.settings.drill

    # -- the run --------------------------------------------------------------------------------------------

    def run(self) -> None:
        d = self.d
        d.start_topology()
        d.wait_ready()
        self.production_start = time.time()
        d.start_work(seed=self.settings.seed)
        for fault in self.plan:
            outcome = FaultOutcome(fault.index, fault.kind, fault.label, fault.at_s)
            self.outcomes.append(outcome)
            if fault.kind == "partition" and self.netns_why:
                outcome.status, outcome.reason = "skipped", self.netns_why
                continue
            self._before(fault)
            try:
                self._inject(fault, outcome)
                outcome.status = "recovered"
            except (_FaultFailed, TimeoutError) as exc:
                outcome.status, outcome.reason = "failed", str(exc)
                _log.error("chaos_fault_failed", fault=fault.index, kind=fault.kind, reason=str(exc))
                self._restore()
            _log.info("chaos_fault", fault=fault.index, kind=fault.kind, status=outcome.status,
                      target=outcome.target, recovery_s=outcome.recovery_s)
        # The replica count recovers: every restarted replica warmed up and is back in the election.
        d.wait_ready()
        d.settle()

    def _before(self, fault: PlannedFault) -> None:
        """Wait for the fault's planned time, then for exactly one leader. A replica restarted by an earlier
        fault may still be warming up (30-100 s with Spark here): the run does not wait for it, or the faults
        would drift past the production; the count of ready replicas is checked at the end."""
        due = self.production_start + fault.at_s
        self.d.wait(lambda: time.time() >= due, fault.at_s + 1, f"the planned time of fault #{fault.index}")
        self._disarm_all()
        self.d.wait(lambda: len(self.d.topology.leaders()) == 1, self.s.startup_timeout_s, "exactly one leader")

    # -- helpers -----------------------------------------------------------------------------------------------

    def _fault(self, o: FaultOutcome, label: str, target: str | None, *, at: float | None = None) -> float:
        o.at = self.d.mark("fault", f"#{o.index} {label}", at=at)
        o.at_s = round(o.at - self.production_start, 2)
        o.target = target
        return o.at

    def _leader(self, o: FaultOutcome) -> ReplicaProcess:
        status = self.d.topology.wait_for_leader(self.s.startup_timeout_s)
        o.old_epoch = status.epoch
        return self.d.topology.replica(status.replica_id)

    def _epoch_of(self, replica: ReplicaProcess, since: float) -> int | None:
        """The epoch of the term ``replica`` began since ``since`` (its ``inaugurating`` event), if any."""
        for e in reversed(self.d.events()):
            if e.replica_id == replica.replica_id and e.event == "inaugurating" and e.at >= since - 1.0:
                epoch = e.fields.get("epoch")
                return int(epoch) if isinstance(epoch, int) else None
        return None

    def _recover(self, o: FaultOutcome, *, above_epoch: int | None, since: float) -> None:
        """Wait for a leader committing again: a commit observed since ``since`` (of an epoch above
        ``above_epoch``, when given). With the producer done and the queue drained there is nothing left to
        commit: a leader of such an epoch then counts instead."""
        d = self.d
        found: list[tuple[float, int, str]] = []

        def recovered() -> bool:
            commit = next((c for c in d.commits() if c.observed_at >= since
                           and (above_epoch is None or c.epoch > above_epoch)), None)
            if commit is not None:
                found.append((commit.observed_at, commit.epoch, "commit"))
                return True
            if d.drained():
                leaders = d.topology.leaders()
                if len(leaders) == 1 and (above_epoch is None or leaders[0].epoch > above_epoch):
                    found.append((time.time(), leaders[0].epoch, "queue drained: a new leader, nothing to commit"))
                    return True
            return False

        d.wait(recovered, self.s.session_timeout_s + self.s.work_timeout_s,
               f"a leader committing again after fault #{o.index}")
        at, epoch, how = found[0]
        o.recovery_s = round(at - (o.at or at), 2)
        o.recovered_epoch = epoch
        if how != "commit":
            o.detail = f"{o.detail}; {how}".lstrip("; ")

    def _wait_exit(self, replica: ReplicaProcess, timeout_s: float) -> None:
        self.d.wait(lambda: not replica.alive, timeout_s, f"{replica.replica_id} to exit")

    def _restart(self, replica_id: str, index: int | None = None) -> None:
        self.d.topology.restart(replica_id)
        self.d.mark("heal", f"{'' if index is None else f'#{index} '}restart {replica_id}")

    def _resume_and_rejoin(self, replica: ReplicaProcess, o: FaultOutcome) -> None:
        heal = self.d.mark("heal", f"#{o.index} resume {replica.replica_id}")
        replica.resume()
        self.d.wait(lambda: _stepped_down(self.d, replica.replica_id, heal) or not replica.alive,
                    self.s.work_timeout_s, f"{replica.replica_id} to rejoin as follower")

    def _disarm_all(self) -> None:
        for replica in self.d.topology.replicas:
            replica.disarm()

    def _restore(self) -> None:
        """After a failed fault: resume every tree, heal every link, restart dead servers and replicas."""
        d = self.d
        self._disarm_all()
        for replica in list(d.topology.replicas):
            replica.resume()
        for ns in d.namespaces.values():
            with contextlib.suppress(Exception):
                ns.heal()
        _route_to_zk(d)
        ensemble = d.topology.ensemble
        for server in ensemble.servers:
            if not server.running:
                ensemble.start_server(server, wait=True)
        for replica in list(d.topology.replicas):
            if not replica.alive:
                self._restart(replica.replica_id)
        d.mark("heal", "restored")

    # -- the faults --------------------------------------------------------------------------------------------

    def _inject(self, fault: PlannedFault, o: FaultOutcome) -> None:
        kinds: dict[str, Callable[[PlannedFault, FaultOutcome], None]] = {
            "sigkill": self._signal_fault, "sigterm": self._signal_fault, "pause": self._pause,
            "partition": self._partition, "zk-restart": self._zk_restart, "inject": self._point,
        }
        kinds[fault.kind](fault, o)

    def _signal_fault(self, fault: PlannedFault, o: FaultOutcome) -> None:
        leader = self._leader(o)
        sig = signal.SIGKILL if fault.kind == "sigkill" else signal.SIGTERM
        at = self._fault(o, f"{sig.name} {leader.replica_id}", leader.replica_id)
        leader.signal(sig)
        if sig == signal.SIGKILL:
            self.d.killed[leader.replica_id] = at
        self._wait_exit(leader, self.s.handover_timeout_s + 30)
        self._restart(leader.replica_id, o.index)
        o.detail = "restarted"
        self._recover(o, above_epoch=o.old_epoch, since=at)

    def _pause(self, fault: PlannedFault, o: FaultOutcome) -> None:
        leader = self._leader(o)
        at = self._fault(o, f"pause {leader.replica_id} (whole tree)", leader.replica_id)
        pids = leader.pause()
        o.detail = f"whole tree stopped ({len(pids)} process{'es' if len(pids) > 1 else ''})"
        self._recover(o, above_epoch=o.old_epoch, since=at)
        self._resume_and_rejoin(leader, o)

    def _partition(self, fault: PlannedFault, o: FaultOutcome) -> None:
        leader = self._leader(o)
        ns = self.d.namespaces[leader.replica_id]
        at = self._fault(o, f"cut {leader.replica_id} off", leader.replica_id)
        ns.cut()
        try:
            self._recover(o, above_epoch=o.old_epoch, since=at)
        finally:
            heal = self.d.mark("heal", f"#{o.index} heal {leader.replica_id}")
            ns.heal()
            _route_to_zk(self.d)
        self.d.wait(lambda: _stepped_down(self.d, leader.replica_id, heal), self.s.work_timeout_s,
                    f"{leader.replica_id} to rejoin as follower after the heal")

    def _zk_restart(self, fault: PlannedFault, o: FaultOutcome) -> None:
        status = self.d.topology.wait_for_leader(self.s.startup_timeout_s)
        ensemble = self.d.topology.ensemble
        server = ensemble.leader() if fault.zk_role == "leader" else ensemble.followers()[0]
        at = self._fault(o, f"SIGKILL ZooKeeper {fault.zk_role} {server.name}", server.name)
        o.old_epoch = status.epoch
        ensemble.kill(server)
        try:
            self._recover(o, above_epoch=None, since=at)  # the two others keep the quorum: commits go on
            down_until = at + self.s.session_timeout_s
            self.d.wait(lambda: time.time() >= down_until, self.s.session_timeout_s + 1,
                        f"{server.name} down for one session timeout")
        finally:
            heal = self.d.mark("heal", f"#{o.index} restart {server.name}")
            ensemble.start_server(server, wait=True)
        self.d.wait(lambda: any(c.observed_at >= heal for c in self.d.commits()) or self.d.drained(),
                    self.s.work_timeout_s, f"a commit after {server.name} is back")
        after = next((c.observed_at for c in self.d.commits() if c.observed_at >= heal), time.time())
        o.detail = f"{server.name} down {heal - at:.1f} s; next commit {after - heal:.2f} s after its restart"

    def _point(self, fault: PlannedFault, o: FaultOutcome) -> None:
        assert fault.point is not None and fault.action is not None
        d = self.d
        leader = self._leader(o)
        armed_at = time.time()
        if fault.point == "inaugurate":
            # Reached only by a new leader: arm the followers, then hand over.
            followers = [r for r in d.topology.replicas if r is not leader and r.alive]
            for follower in followers:
                follower.arm(fault.point, fault.action)
            d.mark("fault", f"#{o.index} SIGTERM {leader.replica_id} (followers armed: {fault.point} "
                   f"{fault.action})")
            leader.signal(signal.SIGTERM)
            self._wait_exit(leader, self.s.handover_timeout_s + 30)
            self._restart(leader.replica_id, o.index)
            candidates = followers
        else:
            leader.arm(fault.point, fault.action)
            candidates = [leader]
        hit: list[tuple[ReplicaProcess, float]] = []

        def reached() -> bool:
            for replica in candidates:
                event = d.injected(replica, fault.point or "", armed_at)
                if event is not None:
                    hit.append((replica, event.at))
                    return True
            return False

        try:
            d.wait(reached, self.s.session_timeout_s + self.s.work_timeout_s, f"{fault.point} to be reached")
        finally:
            for replica in candidates:
                replica.disarm()
        target, at = hit[0]
        self._fault(o, f"{target.replica_id}: {fault.point} {fault.action}", target.replica_id, at=at)
        above = max(o.old_epoch or 0, self._epoch_of(target, armed_at) or 0)
        if fault.action == "kill":
            self._wait_exit(target, 30)
            d.killed[target.replica_id] = at
            self._restart(target.replica_id, o.index)
            o.detail = "killed itself; restarted"
            self._recover(o, above_epoch=above, since=at)
        else:
            d.wait(target.stopped, 30, f"{target.replica_id}'s process to be stopped")
            o.detail = "paused itself (whole tree)"
            self._recover(o, above_epoch=above, since=at)
            self._resume_and_rejoin(target, o)


def _route_to_zk(d: Drill) -> None:
    """Namespaces other than the first reach the ensemble (on the first one's host end) through their own
    host end: a /32 route to that one address, added again after a heal (a link going down drops it)."""
    spaces = list(d.namespaces.values())
    if len(spaces) < 2:
        return
    zk_address = spaces[0].host_address
    for ns in spaces[1:]:
        subprocess.run([*ns.exec_prefix, "ip", "route", "replace", f"{zk_address}/32", "via", ns.host_address],
                       capture_output=True, text=True, check=False, timeout=30)


# -- audit and verdict ------------------------------------------------------------------------------------------


def _audit(d: Drill) -> AuditSummary:
    if d.settings.career == "spark":
        report = verify(d.topology.data_root)
        return AuditSummary(ok=report.ok, ids_in=report.ids_in, ids_written=report.ids_written,
                            quarantined=report.quarantined, late=report.ids_late, lost=report.lost,
                            duplicated=report.duplicated, inversions=report.inversions,
                            detail=f"unexpected {report.unexpected}, unquarantined {report.unquarantined}, "
                                   f"dead-lettered {report.ids_dead_lettered}, waiting {report.ids_waiting}")
    commits = d.commits()
    lost, dup, inv, detail = audit_counter(d.topology.data_root, commits[-1].batch if commits else None)
    return AuditSummary(ok=lost == dup == inv == 0, lost=lost, duplicated=dup, inversions=inv, detail=detail)


def judge_chaos(result: ChaosResult) -> list[Criterion]:
    """The run's criteria: it completed, every fault that ran recovered, the replica count recovered, the audit
    is clean and the commit epochs never went down."""
    ran = [o for o in result.faults if o.status != "skipped"]
    failed = [f"#{o.index} {o.label}: {o.reason}" for o in ran if o.status != "recovered"]
    a = result.audit
    audit = (f"ids in {a.ids_in}, written {a.ids_written}, quarantined {a.quarantined}, late {a.late}, "
             if a.ids_in is not None else "") + f"lost {a.lost}, duplicated {a.duplicated}, inversions {a.inversions}"
    epochs = [c["epoch"] for c in result.timeline.get("commits", [])]
    monotonic = all(x <= y for x, y in itertools.pairwise(epochs))
    return [
        Criterion("ran to completion", result.error is None, result.error or "ok"),
        Criterion("every fault recovered (a leader commits again)", not failed and len(result.faults) ==
                  len(result.plan), "; ".join(failed) or f"{len(ran)} of {len(ran)} recovered"),
        Criterion("the replica count recovers", result.replicas_alive_at_end == 3,
                  f"{result.replicas_alive_at_end} of 3 alive at the end, every one ready before the audit"
                  if result.error is None else f"{result.replicas_alive_at_end} of 3 alive at the end"),
        Criterion("audit: nothing lost, duplicated or out of order", a.ok, audit + (f"; {a.detail}" if a.detail
                                                                                       else "")),
        Criterion("commit epochs never go down", monotonic,
                  "monotonic" if monotonic else "a lower epoch committed after a higher one"),
    ]


def run_chaos_once(settings: ChaosSettings, directory: Path) -> ChaosResult:
    """One chaos run in ``directory`` (wiped first); never raises for a failed run: the result says it."""
    plan = plan_faults(settings.seed, settings.faults, settings.window_s, career=settings.drill.career)
    result = ChaosResult(settings=settings, plan=plan)
    if directory.exists():
        shutil.rmtree(directory)
    started = time.monotonic()
    wants_netns = any(f.kind == "partition" for f in plan)
    netns_why = netns_unavailable() if wants_netns else None
    spaces: dict[str, NetNamespace] = {}
    _log.info("chaos_starting", seed=settings.seed, faults=settings.faults, career=settings.drill.career,
              plan=[f.label for f in plan], directory=str(directory))
    try:
        if wants_netns and netns_why is None:
            try:
                for i in range(1, 4):
                    spaces[f"replica-{i}"] = NetNamespace.create()
            except NetnsError as exc:
                netns_why = f"network namespaces could not be created: {exc}"
                for ns in spaces.values():
                    ns.close()
                spaces = {}
            result.namespaces = ", ".join(f"{rid} in {ns.name}" for rid, ns in spaces.items())
        drill = Drill("chaos", settings.drill, directory, None, namespaces=spaces)
        _route_to_zk(drill)
        chaos = Chaos(drill, settings, plan, netns_why)
        try:
            chaos.run()
        except Exception as exc:  # a step of the run itself (start, settle) failed: reported, not raised
            result.error = f"{type(exc).__name__}: {exc}"
            _log.error("chaos_failed", error=result.error)
        finally:
            result.replicas_alive_at_end = sum(1 for r in drill.topology.replicas if r.alive)
            drill.ended_at = time.time()
            if drill.monitor is not None:
                drill.monitor.stop()
            drill.topology.stop()
        result.faults = chaos.outcomes
        for planned in plan[len(chaos.outcomes):]:
            result.faults.append(FaultOutcome(planned.index, planned.kind, planned.label, planned.at_s,
                                              status="failed", reason="not reached: the run stopped before it"))
    finally:
        for ns in spaces.values():
            ns.close()
    try:
        result.audit = _audit(drill)
    except Exception as exc:
        result.audit = AuditSummary(ok=False, detail=f"audit failed: {type(exc).__name__}: {exc}")
    result.timeline = _timeline(drill)
    result.criteria = judge_chaos(result)
    result.status = verdict(result.criteria)
    result.seconds = time.monotonic() - started
    _log.info("chaos_finished", status=result.status, seconds=round(result.seconds, 1))
    return result


# -- presenting ------------------------------------------------------------------------------------------------


def _num(value: float | None, unit: str = "s", sign: str = "") -> str:
    return "—" if value is None else f"{value:{sign}.1f} {unit}"


def render_chaos(result: ChaosResult, *, width: int = 120) -> str:
    """The terminal report: the seed and settings, one row per fault, the audit, every criterion."""
    from rich.console import Console
    from rich.table import Table

    s = result.settings
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(f"tenure drill chaos — seed {s.seed}, career {s.drill.career}, 3 replicas, "
                  f"{s.faults} faults over {s.window_s:.0f} s of production"
                  + (f", {s.drill.records} records at {s.drill.rate:.0f}/s" if s.drill.career == "spark" else "")
                  + f", session timeout {s.drill.session_timeout_s:g} s")
    if result.namespaces:
        console.print(f"network namespaces: {result.namespaces}")
    faults = Table(title="faults", title_justify="left")
    for column in ("#", "at", "planned", "fault", "target", "result", "recovery", "detail"):
        faults.add_column(column, justify="right" if column in ("#", "at", "planned", "recovery") else "left")
    for o in result.faults:
        colour = {"recovered": "green", "skipped": "yellow"}.get(o.status, "red")
        faults.add_row(str(o.index), _num(o.at_s, sign="+"), _num(o.planned_s, sign="+"), o.label, o.target or "",
                       f"[{colour}]{o.status}[/]", _num(o.recovery_s), o.reason or o.detail)
    console.print(faults)
    a = result.audit
    if a.ids_in is not None:
        console.print(f"audit (tenure verify): ids in {a.ids_in}, written {a.ids_written}, quarantined "
                      f"{a.quarantined}, late {a.late}, lost {a.lost}, duplicated {a.duplicated}, inversions "
                      f"{a.inversions} — {'OK' if a.ok else 'FAILED'}")
    else:
        console.print(f"audit (counter): lost {a.lost}, duplicated {a.duplicated}, inversions {a.inversions} "
                      f"({a.detail}) — {'OK' if a.ok else 'FAILED'}")
    checks = Table(title="criteria", title_justify="left")
    for column in ("criterion", "", "measured"):
        checks.add_column(column)
    for c in result.criteria:
        checks.add_row(c.name, "[green]PASS[/]" if c.passed else "[red]FAIL[/]", c.detail)
    console.print(checks)
    counts = {k: sum(o.status == k for o in result.faults) for k in ("recovered", "failed", "skipped")}
    console.print(f"chaos: {'OK' if result.status == 'pass' else 'FAILED'} — seed {s.seed}, "
                  f"{counts['recovered']} recovered, {counts['failed']} failed, {counts['skipped']} skipped, "
                  f"audit {'clean' if a.ok else 'NOT clean'}, {result.seconds:.0f} s")
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


def run_chaos(*, directory: Path, records: int | None, faults: int, seed: int | None, career: str = "spark",
              short: bool = False, json_out: Path | None = None, plot_out: Path | None = None,
              echo: Callable[[str], None] = print) -> int:
    """``tenure drill chaos``: run, print the report, write JSON and the plot; 1 when any criterion failed."""
    if why := career_unavailable(career):
        raise DrillError(why)
    settings = ChaosSettings.make(career=career, records=records, faults=faults, seed=seed, short=short)
    result = run_chaos_once(settings, directory / "chaos")
    echo(render_chaos(result))
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result.to_dict(), indent=2, default=str))
    if plot_out is not None:
        plot_timeline([ScenarioResult("chaos", f"{faults} faults, seed {settings.seed}", result.status,
                                      seconds=result.seconds, timeline=result.timeline)], plot_out)
    return 0 if result.status == "pass" else 1
