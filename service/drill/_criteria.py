"""The criteria: PASS/FAIL lines judged on a scenario's measurements (pure), and a scenario's result."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tenure.service.drill._measures import Measurements
from tenure.service.drill._settings import (
    ABOUT_ONE_S,
    CLUSTER_COMMITS,
    FLAKY_MAX_CHANGES,
    HEALTH_CHECK_EVERY_S,
    SAFE_UNTIL_SLACK_S,
    SPARK_WORKER_TIMEOUT_S,
    STUCK_SLACK_S,
    DrillSettings,
    worker_loss_budget_s,
)
from tenure.service.replica import EXIT_STALLED, StallReason

__all__ = ["Criterion", "ScenarioResult", "judge", "verdict"]


@dataclass(frozen=True)
class Criterion:
    """One PASS/FAIL line of the report."""

    name: str
    passed: bool
    detail: str


def _at_most(name: str, value: float | None, limit: float, unit: str = "s") -> Criterion:
    if value is None:
        return Criterion(name, False, f"not observed (limit {limit:g} {unit})")
    return Criterion(name, value <= limit, f"{value:.2f} {unit} (limit {limit:g} {unit})")


def _handover_budget(name: str, value: float | None, m: Measurements) -> Criterion:
    """``value`` within a graceful handover's budget: about 1 s, plus one commit interval of the successor."""
    interval = m.commit_interval_s or 0.0
    limit = ABOUT_ONE_S + interval
    budget = f"limit {ABOUT_ONE_S:g} s + commit interval {interval:.2f} s = {limit:.2f} s"
    if value is None:
        return Criterion(name, False, f"not observed ({budget})")
    return Criterion(name, value <= limit, f"{value:.2f} s ({budget})")


def _clean_handover(m: Measurements) -> Criterion:
    """The old leader's ``handover_recorded`` after the fault says clean."""
    return Criterion("clean handover record", m.clean_handover is True,
                     {True: "clean=true", False: "not clean", None: "no handover_recorded"}[m.clean_handover])


def _first_commit_criterion(m: Measurements) -> Criterion:
    return _handover_budget("successor's first commit: about 1 s after the handover, plus one batch",
                            m.handover_to_commit_s, m)


def _targeted_handover_criteria(m: Measurements) -> list[Criterion]:
    """`tenure handover --to <last in line>`: the target leads, the old term ended clean on the request, every
    replica ahead stepped aside, nobody failed, the gap fits a graceful handover's budget, the old leader is back
    in line."""
    target, old = m.handover_target, m.old_leader
    requested = "never logged handover_requested" if m.handover_requested_to is None else \
        f"handover_requested to={m.handover_requested_to}"
    missing = [r for r in m.handover_ahead if r not in m.stepped_aside]
    failures = {"backed off": m.backed_off, "process gone": m.replicas_down}
    trouble = [f"{what}: {', '.join(ids)}" for what, ids in failures.items() if ids]
    if m.career_failures or m.processes_exited:
        trouble.append(f"career failures {m.career_failures}, processes restarted {m.processes_exited}")
    position = m.old_line_position
    return [
        Criterion("the named target leads the new term", target is not None and m.handover_new_leader == target,
                  f"target {target or '—'}, new term led by {m.handover_new_leader or 'nobody'}"),
        Criterion("the old leader's term ended clean (term history)",
                  m.old_term_ended == "clean" and target is not None and m.handover_requested_to == target,
                  f"epoch {m.old_epoch} ({old}): ended {m.old_term_ended or 'not recorded'}"
                  + (f" ({m.old_term_reason})" if m.old_term_reason else "") + f"; {requested}"),
        Criterion("every replica ahead of the target stepped aside", bool(m.handover_ahead) and not missing,
                  f"ahead {', '.join(m.handover_ahead) or 'none'}; stepped aside "
                  f"{', '.join(m.stepped_aside) or 'none'}" + (f"; missing {', '.join(missing)}" if missing else "")),
        Criterion("no replica crashed or backed off", not trouble, "; ".join(trouble) or "none"),
        _handover_budget("handover gap (term history): about 1 s, plus one batch", m.handover_gap_s, m),
        Criterion("the old leader is back in the election as a follower",
                  m.old_rejoined_as_follower is True and position is not None and position > 1,
                  f"rejoined {str(m.old_rejoined_as_follower).lower()}, "
                  + ("not in line" if position is None else f"place {position} in line")),
    ]


def _term_goes_on(m: Measurements) -> Criterion:
    """The fault on the cluster leaves the term alone: no term begun after it, every commit after it the old
    epoch's."""
    epochs = ", ".join(str(e) for e in m.epochs_after_fault) or "none"
    ok = m.old_epoch is not None and m.leadership_changes == 0 and m.epochs_after_fault == [m.old_epoch]
    return Criterion("the leader's term goes on (same epoch, no leader change)", ok,
                     f"epoch {m.old_epoch} ({m.old_leader}); leadership changes {m.leadership_changes}; "
                     f"epochs committed after the fault: {epochs}")


def _worker_loss_criteria(m: Measurements, s: DrillSettings) -> list[Criterion]:
    interval, workers, value = m.interval_before_s, s.spark_workers, m.commits_after_loss_s
    name = f"{CLUSTER_COMMITS} commits after the worker's loss, within the budget"
    measured = "not observed" if value is None else f"{value:.2f} s"
    if interval is None or workers < 2:
        commits = Criterion(name, False, f"{measured} (no budget: {workers} workers, commit interval before the "
                            f"fault {'not observed' if interval is None else f'{interval:.2f} s'})")
    else:
        limit = worker_loss_budget_s(workers, interval)
        budget = (f"limit {ABOUT_ONE_S:g} s + (1 + {CLUSTER_COMMITS} × {workers}/{workers - 1}) × commit interval "
                  f"{interval:.2f} s = {limit:.2f} s")
        rerun = "" if m.tasks_lost is None else f"; {m.tasks_lost} task(s) cut short on the lost executor, run again"
        commits = Criterion(name, value is not None and value <= limit, f"{measured} ({budget}){rerun}")
    dropped = m.worker_dropped_s
    executor = "no executor granted on it yet" if m.executor_back_s is None else \
        f"the master granted an executor on it after {m.executor_back_s:.2f} s"
    back = "" if m.worker_back_s is None else f"; restarted: ALIVE after {m.worker_back_s:.2f} s, {executor}"
    return [
        _term_goes_on(m),
        commits,
        Criterion("the master drops the lost worker", dropped is not None and dropped <= SPARK_WORKER_TIMEOUT_S,
                  f"{m.lost_worker or '—'}: " + ("not observed" if dropped is None else f"{dropped:.2f} s")
                  + f" after the kill (limit spark.worker.timeout {SPARK_WORKER_TIMEOUT_S:g} s){back}"),
    ]


def _master_loss_criteria(m: Measurements) -> list[Criterion]:
    down = "—" if m.master_down_s is None else f"{m.master_down_s:.1f} s"
    during, value = m.commits_master_down, m.app_back_s
    start = "" if m.cluster_start_s is None else f"; the cluster's own start took {m.cluster_start_s:.2f} s"
    return [
        Criterion("commits go on while the master is down", during is not None and during >= 1,
                  f"{'not observed' if during is None else during} commit(s) in the {down} it was down"),
        Criterion("the application is back on the restarted master",
                  value is not None and value <= SPARK_WORKER_TIMEOUT_S,
                  ("not observed" if value is None else f"{value:.2f} s after the restart, {m.app_state_after}")
                  + f" (limit spark.worker.timeout {SPARK_WORKER_TIMEOUT_S:g} s{start})"),
        _term_goes_on(m),
    ]


def _stuck_budget(name: str, value: float | None, timeout: str, timeout_s: float, m: Measurements) -> Criterion:
    """``value`` within a stuck leader's budget (issue 26): the timeout that catches it (``timeout``,
    ``timeout_s``), plus one commit interval of the successor, plus ``STUCK_SLACK_S``."""
    interval = m.commit_interval_s or 0.0
    limit = timeout_s + interval + STUCK_SLACK_S
    budget = (f"limit {timeout} {timeout_s:g} s + commit interval {interval:.2f} s + {STUCK_SLACK_S:g} s = "
              f"{limit:.2f} s")
    if value is None:
        return Criterion(name, False, f"not observed ({budget})")
    return Criterion(name, value <= limit, f"{value:.2f} s ({budget})")


def _gave_up(m: Measurements, reason: StallReason) -> Criterion:
    """The stuck leader gave its lock up for ``reason`` (its ``stalled`` event) and exited ``EXIT_STALLED``."""
    code = "no exit observed" if m.stuck_exit_code is None else f"exit code {m.stuck_exit_code}"
    stalled = "no stalled event" if m.stall_reason is None else f"stalled: {m.stall_reason}"
    if m.stalled_s is not None:
        stalled += f", {m.stalled_s:.2f} s after the fault"
    return Criterion(f"the stuck leader gives its lock up and exits {EXIT_STALLED} ({reason.value})",
                     m.stuck_exit_code == EXIT_STALLED and m.stall_reason == reason.value,
                     f"{m.stuck_replica or '—'}: {code}; {stalled}")


def _rejoined(m: Measurements) -> Criterion:
    return Criterion("restarted, the old leader rejoins as follower", m.old_rejoined_as_follower is True,
                     str(m.old_rejoined_as_follower).lower())


def _frozen_next_in_line_criteria(m: Measurements, s: DrillSettings) -> list[Criterion]:
    """The frozen follower leaves the line in time, the healthy third replica takes the term over from the
    SIGTERMed leader, which hands over cleanly, and it costs no more than a stuck leader would."""
    left, limit = m.left_line_s, s.probe_timeout_s + HEALTH_CHECK_EVERY_S + ABOUT_ONE_S
    budget = (f"limit probe timeout {s.probe_timeout_s:g} s + health check every {HEALTH_CHECK_EVERY_S:g} s + "
              f"{ABOUT_ONE_S:g} s = {limit:.2f} s")
    healthy, measured = m.healthy_successor, "not observed" if left is None else f"{left:.2f} s"
    return [
        Criterion("the frozen follower leaves the election's line within the probe timeout and one health check",
                  left is not None and left <= limit, f"{m.stuck_replica or '—'}: {measured} ({budget})"),
        Criterion("the healthy replica last in line takes over and commits",
                  healthy is not None and m.new_leader == healthy and m.successor_committed,
                  f"expected {healthy or '—'}, new term led by {m.new_leader or 'nobody'}, "
                  f"committed {str(m.successor_committed).lower()}"),
        _clean_handover(m),
        _stuck_budget("the leader's SIGTERM → the healthy replica's first commit: no more than a stuck leader's "
                      f"(probe timeout, one batch and {STUCK_SLACK_S:g} s)", m.fault_to_commit_s, "probe timeout",
                      s.probe_timeout_s, m),
    ]


def _poison_batch_criteria(m: Measurements, s: DrillSettings) -> list[Criterion]:
    """The poison batch is split after at least ``max_batch_attempts`` failed terms (and ``set_aside_after_s`` of
    failing, which may take more terms), only its failing record is set aside, it is the only batch with any, the
    queue moves on, and the replicas that failed it backed off without exiting."""
    attempts, failed = s.max_batch_attempts, m.failed_terms
    if m.set_aside_epoch is None:
        where = "never set aside"
    else:
        later = "" if m.fault_to_commit_s is None else f", committed {m.fault_to_commit_s:.2f} s after it"
        when = "" if m.set_aside_s is None else f" {m.set_aside_s:.2f} s after the landing{later}"
        where = f"batch {m.set_aside_batch} split by epoch {m.set_aside_epoch}{when}"
    down = ", ".join(m.replicas_down) or "none"
    return [
        Criterion(f"the poison batch is split after at least {attempts} failed terms and {s.set_aside_after_s:g} s "
                  "(--max-batch-attempts, --set-aside-after-s)",
                  m.set_aside_epoch is not None and failed is not None and failed >= attempts,
                  f"{where}; failed terms before it: {'not read' if failed is None else failed}"),
        Criterion("only the poison record is set aside, the rest of its batch written (audit)",
                  m.ids_set_aside == 1, f"{m.ids_set_aside} ids set aside"),
        Criterion("exactly one batch set aside, its ids accounted for (audit)",
                  m.set_aside_batches == 1 and (m.ids_set_aside or 0) > 0,
                  f"{m.set_aside_batches} batch(es), {m.ids_set_aside} ids set aside"),
        Criterion("the queue moves on after it", (m.batches_after_set_aside or 0) >= 1,
                  f"{m.batches_after_set_aside} batch(es) committed after batch {m.set_aside_batch}"),
        Criterion("the replicas that failed it back off, none exits",
                  bool(m.backed_off) and not m.replicas_down and m.processes_exited == 0,
                  f"backed off: {', '.join(m.backed_off) or 'none'}; process gone: {down}; "
                  f"processes restarted {m.processes_exited}"),
    ]


def _stuck_leader_criteria(m: Measurements, reason: StallReason, limit_name: str, limit_s: float) -> list[Criterion]:
    """A stuck leader gives its lock up for ``reason``, and another replica commits within ``limit_s`` (the
    watchdog's limit that applies), one batch and the slack."""
    return [_gave_up(m, reason),
            _stuck_budget(f"another replica's first commit: within the {limit_name}, one batch and "
                          f"{STUCK_SLACK_S:g} s", m.fault_to_commit_s, limit_name, limit_s, m)]


def judge(m: Measurements, s: DrillSettings) -> list[Criterion]:
    """The criteria of ``m.scenario`` (issue 8's table) plus the common ones, evaluated on ``m`` (pure)."""
    out = [Criterion("ran to completion", m.error is None, m.error or "ok")]
    audit = "not run" if m.audit_ok is None else (
        f"lost {m.audit_lost}, duplicated {m.audit_duplicated}, inversions {m.audit_inversions}"
        + (f"; {m.audit_detail}" if m.audit_detail else ""))
    out.append(Criterion("audit: nothing lost, duplicated or out of order", m.audit_ok is True, audit))
    out.append(Criterion("commit epochs never go down", m.epochs_monotonic,
                         "monotonic" if m.epochs_monotonic else "a lower epoch committed after a higher one"))
    name = m.scenario
    if name == "handover":
        out.append(_clean_handover(m))
        out.append(_first_commit_criterion(m))
    elif name == "targeted-handover":
        out.extend(_targeted_handover_criteria(m))
    elif name == "crash":
        out.append(_at_most("new leader within session timeout + 1 s", m.new_leader_s, s.session_timeout_s + 1))
        out.append(Criterion("successor commits", m.successor_committed, str(m.successor_committed).lower()))
    elif name == "zombie":
        attempted, committed = m.old_attempted_after_fault or 0, m.old_committed_after_fault
        outcomes = f"fenced {m.old_fenced_after_fault}, outcome unknown {m.old_unknown_after_fault}"
        out.append(Criterion("the zombie attempts a commit and none lands", attempted >= 1 and committed == 0,
                             f"attempted {m.old_attempted_after_fault}, committed {committed} ({outcomes})"))
        late = m.old_landed_before_pause or 0
        out.append(Criterion("the fence turns the zombie's commit away", (m.old_fenced_after_fault or 0) >= 1
                             and (m.old_unknown_after_fault or 0) == 0 and late == 0,
                             outcomes + (f"; the paused commit landed before the successor's ({late}): the pause "
                                         "took effect after its transaction was sent" if late else "")))
        out.append(Criterion("successor commits", m.successor_committed, str(m.successor_committed).lower()))
        out.append(Criterion("zombie rejoins as follower", m.old_rejoined_as_follower is True,
                             str(m.old_rejoined_as_follower).lower()))
    elif name == "partition":
        out.append(_at_most("cut-off leader stops committing within safe-until", m.suspended_s,
                            s.safe_until_s + SAFE_UNTIL_SLACK_S))
        out.append(Criterion("no commit by the cut-off leader past the deadline", m.old_commits_past_deadline == 0,
                             f"{m.old_commits_past_deadline}"))
        out.append(Criterion("successor commits", m.successor_committed, str(m.successor_committed).lower()))
        out.append(Criterion("rejoins as follower after heal", m.old_rejoined_as_follower is True,
                             str(m.old_rejoined_as_follower).lower()))
    elif name == "short-partition":
        out.append(Criterion("no leadership change", m.leadership_changes == 0, f"{m.leadership_changes}"))
        out.append(Criterion("commits continue after heal", m.commits_after_heal > 0, f"{m.commits_after_heal}"))
    elif name in ("zk-follower-loss", "zk-leader-loss"):
        out.append(Criterion("no leadership change", m.leadership_changes == 0, f"{m.leadership_changes}"))
        out.append(Criterion("commits continue", m.commits_after_fault > 0, f"{m.commits_after_fault}"))
    elif name == "quorum-loss":
        out.append(Criterion("nobody commits during the outage", m.commits_during_outage == 0,
                             f"{m.commits_during_outage}"))
        out.append(Criterion("exactly one leader afterwards", m.leaders_after == 1, f"{m.leaders_after}"))
        out.append(Criterion("commits resume after heal", m.commits_after_heal > 0, f"{m.commits_after_heal}"))
    elif name == "flaky-link":
        out.append(Criterion(f"leadership changes bounded (≤ {FLAKY_MAX_CHANGES})",
                             m.leadership_changes <= FLAKY_MAX_CHANGES, f"{m.leadership_changes}"))
        out.append(Criterion("no restart loop", m.career_failures <= 1 and m.processes_exited == 0,
                             f"career failures {m.career_failures}, processes exited {m.processes_exited}"))
        out.append(Criterion("commits continue after heal", m.commits_after_heal > 0, f"{m.commits_after_heal}"))
    elif name == "spark-death":
        out.append(Criterion("leadership released or the process exits", m.old_released is True,
                             str(m.old_released).lower()))
        out.append(Criterion("successor takes over", m.successor_committed, str(m.successor_committed).lower()))
    elif name == "cold-start":
        out.append(_at_most("one leader within the session timeout", m.first_leader_s, s.session_timeout_s))
        out.append(Criterion("never two leaders at once", (m.max_simultaneous_leaders or 0) <= 1,
                             f"max {m.max_simultaneous_leaders}"))
    elif name == "rolling-restart":
        worst = max(m.changes_per_restart, default=0)
        out.append(Criterion("at most one leadership change per restart",
                             bool(m.changes_per_restart) and worst <= 1, f"per restart {m.changes_per_restart}"))
        out.append(Criterion("commits continue", m.commits_after_fault > 0, f"{m.commits_after_fault}"))
    elif name == "worker-loss":
        out.extend(_worker_loss_criteria(m, s))
    elif name == "master-loss":
        out.extend(_master_loss_criteria(m))
    elif name == "frozen-jvm":
        out.extend(_stuck_leader_criteria(m, StallReason.SPARK_UNRESPONSIVE, "probe timeout", s.probe_timeout_s))
        out.append(_rejoined(m))
    elif name == "hung-row-function":
        out.extend(_stuck_leader_criteria(m, StallReason.NO_PROGRESS, "stall timeout", s.stall_timeout_s))
        out.append(Criterion("no record dead-lettered", m.ids_dead_lettered == 0,
                             "not audited" if m.ids_dead_lettered is None else f"{m.ids_dead_lettered}"))
        out.append(_rejoined(m))
    elif name == "frozen-next-in-line":
        out.extend(_frozen_next_in_line_criteria(m, s))
    elif name == "poison-batch":
        out.extend(_poison_batch_criteria(m, s))
    return out


@dataclass
class ScenarioResult:
    """A scenario's verdict, figures, criteria and timeline (for the plot and ``--json``)."""

    scenario: str
    fault: str
    status: str  # "pass", "fail" or "skipped"
    reason: str = ""
    seconds: float = 0.0
    measurements: Measurements | None = None
    criteria: list[Criterion] = field(default_factory=list)
    timeline: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "fault": self.fault, "status": self.status, "reason": self.reason,
            "seconds": round(self.seconds, 2),
            "measurements": asdict(self.measurements) if self.measurements else None,
            "criteria": [asdict(c) for c in self.criteria],
            "timeline": self.timeline,
        }


def verdict(criteria: list[Criterion]) -> str:
    """``pass`` when every criterion passed, else ``fail``."""
    return "pass" if all(c.passed for c in criteria) else "fail"
