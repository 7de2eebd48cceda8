"""`tenure drill chaos`, one run end to end: the plan executed on a drill topology, the audit, the criteria and the
report (the faults themselves are in ``_chaos``, the plan in ``_chaos_plan``)."""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from tenure.service.drill._chaos import Chaos, FaultOutcome, route_to_zk
from tenure.service.drill._chaos_plan import ChaosSettings, PlannedFault, plan_faults
from tenure.service.drill._context import Drill
from tenure.service.drill._criteria import Criterion, ScenarioResult, verdict
from tenure.service.drill._measures import audit_counter
from tenure.service.drill._readout import timeline
from tenure.service.drill._report import pass_fail, plot_timeline, render, table, write_json
from tenure.service.drill._settings import DrillError, career_unavailable
from tenure.service.local import NetNamespace, NetnsError, netns_unavailable
from tenure.service.ops import verify
from tenure.service.replica import ReplicaSpec

__all__ = ["AuditSummary", "ChaosResult", "judge_chaos", "render_chaos", "run_chaos"]

if TYPE_CHECKING:
    from rich.table import Table

_log = structlog.get_logger("tenure.chaos")


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
    """A chaos run's plan, what each fault did, the audit, the criteria and the timeline (for ``--json``)."""

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
            "seed": self.settings.seed, "queues": self.settings.queues, "status": self.status, "error": self.error,
            "seconds": round(self.seconds, 2), "faults_requested": self.settings.faults,
            "window_s": self.settings.window_s, "settings": asdict(self.settings.drill),
            "plan": [asdict(p) for p in self.plan], "faults": [o.to_dict() for o in self.faults],
            "audit": asdict(self.audit), "criteria": [asdict(c) for c in self.criteria],
            "replicas_alive_at_end": self.replicas_alive_at_end, "namespaces": self.namespaces,
            "timeline": self.timeline,
        }


def _audit(d: Drill) -> AuditSummary:
    """``tenure verify`` of the whole data root (every queue of a topic, and the whole), or the counter's audit of
    each queue against its last observed commit."""
    if d.settings.career == "spark":
        report = verify(d.topology.data_root)
        return AuditSummary(ok=report.ok, ids_in=report.ids_in, ids_written=report.ids_written,
                            quarantined=report.quarantined, late=report.ids_late, lost=report.lost,
                            duplicated=report.duplicated, inversions=report.inversions,
                            detail=f"unexpected {report.unexpected}, unquarantined {report.unquarantined}, "
                                   f"dead-lettered {report.ids_dead_lettered}, waiting {report.ids_waiting}, "
                                   f"not read yet {report.waiting}"
                                   + "".join(f"; queue {q['queue']}: rows written {q['rows_written']}, lost "
                                             f"{q['lost']}" for q in report.per_queue if d.queues > 1))
    commits = d.commits()
    lost = dup = inv = 0
    details = []
    for queue in range(d.queues):
        last = [c.batch for c in commits if c.queue == queue]
        q_lost, q_dup, q_inv, detail = audit_counter(d.topology.data_root, last[-1] if last else None, queue=queue,
                                                     queues=d.queues)
        lost, dup, inv = lost + q_lost, dup + q_dup, inv + q_inv
        details.append(detail if d.queues == 1 else f"queue {queue}: {detail}")
    return AuditSummary(ok=lost == dup == inv == 0, lost=lost, duplicated=dup, inversions=inv,
                        detail="; ".join(details))


def judge_chaos(result: ChaosResult) -> list[Criterion]:
    """The run's criteria: it completed, every fault that ran recovered (on every queue it moved), the replica
    count recovered, the audit is clean and each queue's commit epochs never went down."""
    ran = [o for o in result.faults if o.status != "skipped"]
    failed = [f"#{o.index} {o.label}: {o.reason}" for o in ran if o.status != "recovered"]
    a = result.audit
    audit = (f"ids in {a.ids_in}, written {a.ids_written}, quarantined {a.quarantined}, late {a.late}, "
             if a.ids_in is not None else "") + f"lost {a.lost}, duplicated {a.duplicated}, inversions {a.inversions}"
    commits = result.timeline.get("commits", [])
    monotonic = all(all(x <= y for x, y in itertools.pairwise(c["epoch"] for c in commits if c.get("queue", 0) == q))
                    for q in {c.get("queue", 0) for c in commits})
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


def _run_chaos_once(settings: ChaosSettings, directory: Path) -> ChaosResult:
    """One chaos run in ``directory`` (wiped first); never raises for a failed run: the result says it."""
    plan = plan_faults(settings.seed, settings.faults, settings.window_s, career=settings.drill.career,
                       queues=settings.queues)
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
        drill = Drill("chaos", settings.drill, directory, None, namespaces=spaces,
                      replica_spec=ReplicaSpec(queues=settings.queues) if settings.queues > 1 else None)
        route_to_zk(drill)
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
    result.timeline = timeline(drill)
    result.criteria = judge_chaos(result)
    result.status = verdict(result.criteria)
    result.seconds = time.monotonic() - started
    _log.info("chaos_finished", status=result.status, seconds=round(result.seconds, 1))
    return result


def _num(value: float | None, unit: str = "s", sign: str = "") -> str:
    return "—" if value is None else f"{value:{sign}.1f} {unit}"


def _moved(o: FaultOutcome) -> str:
    """A fault's queues on a topic of several: those its target led, and each recovery (queue, time, leader)."""
    each = [f"q{r.queue} " + (f"{r.recovery_s:.1f} s → {r.leader or '?'}" if r.recovery_s is not None
                              else "not recovered") for r in o.moved]
    return (f"led {', '.join(map(str, o.led))}" if o.led else "") + (": " if o.led and each else "") + "; ".join(each)


def render_chaos(result: ChaosResult, *, width: int = 120) -> str:
    """The terminal report: the seed and settings, one row per fault (on a topic of several queues, the queues its
    target led and each one's recovery), the audit, every criterion."""
    s = result.settings
    several = s.queues > 1
    parts: list[str | Table] = [
        f"tenure drill chaos — seed {s.seed}, career {s.drill.career}, 3 replicas, "
        + (f"a topic of {s.queues} queues, " if several else "")
        + f"{s.faults} faults over {s.window_s:.0f} s of production"
        + (f", {s.drill.records} records at {s.drill.rate:.0f}/s" if s.drill.career == "spark" else "")
        + f", session timeout {s.drill.session_timeout_s:g} s"]
    if result.namespaces:
        parts.append(f"network namespaces: {result.namespaces}")
    faults = table("faults", ("#", "at", "planned", "fault", "target", "result", "recovery",
                              *(("queues moved",) if several else ()), "detail"),
                   right=("#", "at", "planned", "recovery"))
    for o in result.faults:
        colour = {"recovered": "green", "skipped": "yellow"}.get(o.status, "red")
        faults.add_row(str(o.index), _num(o.at_s, sign="+"), _num(o.planned_s, sign="+"), o.label, o.target or "",
                       f"[{colour}]{o.status}[/]", _num(o.recovery_s), *((_moved(o),) if several else ()),
                       o.reason or o.detail)
    parts.append(faults)
    a = result.audit
    if a.ids_in is not None:
        parts.append(f"audit (tenure verify): ids in {a.ids_in}, written {a.ids_written}, quarantined "
                     f"{a.quarantined}, late {a.late}, lost {a.lost}, duplicated {a.duplicated}, inversions "
                     f"{a.inversions} — {'OK' if a.ok else 'FAILED'}")
    else:
        parts.append(f"audit (counter): lost {a.lost}, duplicated {a.duplicated}, inversions {a.inversions} "
                     f"({a.detail}) — {'OK' if a.ok else 'FAILED'}")
    checks = table("criteria", ("criterion", "", "measured"))
    for c in result.criteria:
        checks.add_row(c.name, pass_fail(c.passed), c.detail)
    parts.append(checks)
    counts = {k: sum(o.status == k for o in result.faults) for k in ("recovered", "failed", "skipped")}
    parts.append(f"chaos: {'OK' if result.status == 'pass' else 'FAILED'} — seed {s.seed}, "
                 f"{counts['recovered']} recovered, {counts['failed']} failed, {counts['skipped']} skipped, "
                 f"audit {'clean' if a.ok else 'NOT clean'}, {result.seconds:.0f} s")
    return render(parts, width=width)


def run_chaos(*, directory: Path, records: int | None, faults: int, seed: int | None, career: str = "spark",
              short: bool = False, queues: int = 1, json_out: Path | None = None, plot_out: Path | None = None,
              echo: Callable[[str], None] = print) -> int:
    """``tenure drill chaos``: run (on a topic of ``queues``), print the report, write JSON and the plot; 1 when
    any criterion failed."""
    if why := career_unavailable(career):
        raise DrillError(why)
    settings = ChaosSettings.make(career=career, records=records, faults=faults, seed=seed, short=short,
                                  queues=queues)
    result = _run_chaos_once(settings, directory / "chaos")
    echo(render_chaos(result))
    if json_out is not None:
        write_json(json_out, result.to_dict())
    if plot_out is not None:
        plot_timeline([ScenarioResult("chaos", f"{faults} faults, seed {settings.seed}", result.status,
                                      seconds=result.seconds, timeline=result.timeline)], plot_out)
    return 0 if result.status == "pass" else 1
