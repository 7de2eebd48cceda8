"""Reading a finished drill: its measurements from the monitor's samples and the logs, its audit, its timeline."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from tenure.service.drill._context import Drill
from tenure.service.drill._measures import (
    audit_counter,
    commit_interval,
    leader_intervals,
    nth_commit_after,
    runner_inaugurated,
    versions_where,
)
from tenure.service.drill._monitor import (
    BACKING_OFF,
    BATCH_FAILED,
    BATCH_FENCED,
    CAREER_FAILED,
    COMMIT_FENCED,
    COMMIT_OUTCOME_UNKNOWN,
    COMMITS_FENCED_TOTAL,
    DEFERRED_TO_HANDOVER_TARGET,
    EXECUTE_NOT_LEADER,
    FAULT_INJECTED,
    FENCED,
    FOLLOWING,
    HANDED_OVER,
    HANDING_OVER,
    HANDOVER_RECORDED,
    HANDOVER_REQUESTED,
    INAUGURATED,
    INAUGURATING,
    LEADERSHIP_SUSPENDED,
    LEADING,
    RUNNER_LOGGER,
    RUNNER_STARTING,
    RUNNER_STATE,
    STALLED,
    SUSPENDED,
    TERM_STATES,
    CommitSample,
    LogEvent,
)
from tenure.service.drill._scenarios import GROUPS
from tenure.service.drill._settings import CLUSTER_COMMITS, OUTAGE_GRACE_S, SAFE_UNTIL_SLACK_S
from tenure.service.ops import verify

__all__ = ["audit", "measure", "timeline"]

#: Reactions to a fault: the runner's, and the election's own ``suspended`` (logged even while the runner's
#: control thread is busy in a commit).
_DETECT_EVENTS = {LEADERSHIP_SUSPENDED, SUSPENDED, HANDING_OVER, FENCED, EXECUTE_NOT_LEADER, CAREER_FAILED}


def measure(d: Drill) -> None:
    """Fill ``d.m`` from the monitor's samples and the logs (after the topology stopped)."""
    m, s = d.m, d.settings
    events = d.events()
    commits = d.commits()
    fault = m.fault_at
    end = d.ended_at or time.time()
    epochs = [c.epoch for c in commits]
    m.epochs_monotonic = all(a <= b for a, b in itertools.pairwise(epochs))
    m.career_failures = sum(1 for e in events if e.event == CAREER_FAILED and e.at >= (fault or 0))
    if fault is None:
        return
    # Leadership changes: terms begun after the fault.
    terms = [e for e in events if runner_inaugurated(e) and e.at >= fault]
    m.leadership_changes = len(terms)
    new_terms = [e for e in terms if e.fields.get("epoch") != m.old_epoch]
    if new_terms:
        m.new_leader, m.new_epoch = new_terms[0].replica_id, int(new_terms[0].fields.get("epoch") or 0)
        m.new_leader_s = new_terms[0].at - fault
    # Detection: the first reaction to the fault by anyone.
    # (until the end: the topology's stop afterwards, a handover among them, is no reaction to the fault)
    reactions = [e.at for e in events if fault <= e.at < end and (
        e.event in _DETECT_EVENTS
        or (e.event == INAUGURATING and e.fields.get("epoch") != m.old_epoch)
        or (e.event == RUNNER_STATE and e.fields.get("old") == LEADING))]
    m.detect_s = min(reactions) - fault if reactions else None
    # Commits.
    old_epoch = m.old_epoch or 0
    successor = [c for c in commits if c.epoch > old_epoch and c.observed_at >= fault]
    m.successor_committed = bool(successor) and d.name not in ("short-partition", "zk-follower-loss",
                                                               "zk-leader-loss")
    old_commits = [c for c in commits if c.epoch == old_epoch]
    if successor and old_commits and d.name not in ("rolling-restart", "cold-start"):
        m.commit_gap_s = successor[0].committed_at - max(c.committed_at for c in old_commits
                                                         if c.observed_at <= successor[0].observed_at)
    else:  # no takeover: the longest pause between commits from the fault on
        window = [c.committed_at for c in commits if c.committed_at >= fault - 5]
        gaps = [b - a for a, b in itertools.pairwise(window) if b >= fault]
        m.commit_gap_s = max(gaps) if gaps else None
    m.commits_after_fault = d.commits_between(fault, math.inf)
    if m.heal_at is not None:
        m.commits_after_heal = d.commits_between(m.heal_at, math.inf)
    assert d.monitor is not None
    base_c, base_f = d.monitor.totals_at(fault)
    last_c, last_f = d.monitor.totals_at(end)
    m.commits_fenced = max(last_f - base_f, sum(1 for e in events if e.event == FENCED and e.at >= fault))
    m.commits_attempted = (last_c - base_c) + m.commits_fenced
    # Scenario facts.
    old = m.old_leader
    if old is not None:
        m.clean_handover = next((bool(e.fields.get("clean")) for e in events
                                 if e.replica_id == old and e.event == HANDOVER_RECORDED and e.at >= fault), None)
        handed = next((e.at for e in events if e.replica_id == old and e.event == HANDED_OVER and e.at >= fault),
                      None)
        if handed is not None and successor:
            m.handover_to_commit_s = successor[0].committed_at - handed
            m.commit_interval_s = commit_interval(commits, successor[0].epoch)
        # What the old leader made visible after it should have stopped (its commit records, whose
        # committed_at is stamped before the transaction is sent), and what the fence turned away.
        if d.name == "zombie":
            _zombie_commits(d, events, commits)
        else:
            resumed = fault + s.safe_until_s
            m.old_committed_after_fault = versions_where(commits, lambda c: c.epoch == old_epoch
                                                          and c.committed_at >= resumed)
            fenced_logged = sum(1 for e in events if e.replica_id == old and e.event == FENCED and e.at >= fault)
            fenced_metric = d.monitor.process_counts(old, d.old_pid)[1] if d.old_pid is not None else 0
            m.old_attempted_after_fault = m.old_committed_after_fault + max(fenced_logged, fenced_metric)
        since = m.heal_at or fault
        m.old_rejoined_as_follower = d.stepped_down(old, since)
        suspended = [e.at for e in events if e.replica_id == old and e.at >= fault and (
            e.event in (LEADERSHIP_SUSPENDED, SUSPENDED)
            or (e.event == RUNNER_STATE and e.fields.get("old") == LEADING))]
        m.suspended_s = min(suspended) - fault if suspended else None
        m.old_commits_past_deadline = sum(1 for c in commits if c.epoch == old_epoch
                                          and c.observed_at > fault + s.safe_until_s + SAFE_UNTIL_SLACK_S)
        m.old_released = any(e.replica_id == old and e.at >= fault and e.event == RUNNER_STATE
                             and e.fields.get("old") in TERM_STATES for e in events) or \
            not d.topology.replica(old).alive or d.topology.replica(old).pid != d.old_pid
    if m.heal_at is not None:
        c_at_fault, _ = d.monitor.totals_at(fault + OUTAGE_GRACE_S)
        c_at_heal, _ = d.monitor.totals_at(m.heal_at)
        m.commits_during_outage = c_at_heal - c_at_fault
    # Cold start: from the first replica joining the election to the first inauguration.
    joined = [e.at for e in events if e.event == RUNNER_STATE and e.fields.get("new") == FOLLOWING]
    first_term = [e.at for e in events if runner_inaugurated(e)]
    if d.name == "cold-start" and joined and first_term:
        m.first_leader_s = first_term[0] - joined[0]
    m.max_simultaneous_leaders = max((sum(1 for lead, _ in sample.values() if lead)
                                      for _, sample in d.monitor.leader_samples), default=0)
    if d.restarts:
        bounds = [t for t, _ in d.restarts] + [end]
        m.changes_per_restart = [sum(1 for e in terms if a <= e.at < b) for a, b in itertools.pairwise(bounds)]
    m.processes_exited = sum(1 for e in events if e.event == RUNNER_STARTING and e.at >= fault)
    if d.name == "targeted-handover":
        _targeted_handover_facts(d, events, commits, successor)
    if d.name in ("worker-loss", "master-loss"):
        _cluster_facts(d, commits)
    if d.name in GROUPS["stuck-leader"]:
        _stuck_facts(d, events, commits, successor)


def _stuck_facts(d: Drill, events: list[LogEvent], commits: list[CommitSample],
                 successor: list[CommitSample]) -> None:
    """The stuck-leader drills: the stuck replica's ``stalled`` event (its reason, when), the successor's cadence
    (the budget adds one commit interval), who backed off after the fault; poison-batch: the batches committed
    after the one set aside (the queue moved on)."""
    m, fault = d.m, d.m.fault_at or 0.0
    stalled = next((e for e in events if e.replica_id == m.stuck_replica and e.event == STALLED and e.at >= fault),
                   None)
    if stalled is not None:
        m.stall_reason, m.stalled_s = str(stalled.fields.get("reason")), stalled.at - fault
    if successor and m.commit_interval_s is None:
        m.commit_interval_s = commit_interval(commits, successor[0].epoch)
    m.backed_off = sorted({e.replica_id for e in events if e.at >= fault and e.event == BACKING_OFF})
    if m.set_aside_batch is not None:
        after = {c.batch for c in commits if c.batch is not None and c.batch > m.set_aside_batch}
        m.batches_after_set_aside = len(after)


def _cluster_facts(d: Drill, commits: list[CommitSample]) -> None:
    """worker-loss and master-loss: the epochs committed after the fault, the leader's cadence before it, the
    time to ``CLUSTER_COMMITS`` commits after a worker's loss, the commits while the master was down."""
    m, fault = d.m, d.m.fault_at or 0.0
    m.epochs_after_fault = sorted({c.epoch for c in commits if c.observed_at >= fault})
    if m.old_epoch is not None:
        since = m.cadence_from if m.cadence_from is not None else -math.inf
        m.interval_before_s = commit_interval([c for c in commits if since <= c.observed_at < fault], m.old_epoch)
    if d.name == "worker-loss":
        nth = nth_commit_after(commits, fault, CLUSTER_COMMITS)
        m.commits_after_loss_s = None if nth is None else nth.observed_at - fault
    elif m.heal_at is not None:
        # from the fault plus the grace a commit already sent may take to land, to the master's restart
        m.commits_master_down = d.commits_between(fault + OUTAGE_GRACE_S, m.heal_at)


def _targeted_handover_facts(d: Drill, events: list[LogEvent], commits: list[CommitSample],
                             successor: list[CommitSample]) -> None:
    """Who stepped aside or backed off after the request, and what the old leader logged for it. The successor's
    commit interval is its cadence in this run: the gap's budget adds one, as the SIGTERM handover's does."""
    m, fault = d.m, d.m.fault_at or 0.0
    after = [e for e in events if e.at >= fault]
    m.stepped_aside = sorted({e.replica_id for e in after if e.event == DEFERRED_TO_HANDOVER_TARGET})
    m.backed_off = sorted({e.replica_id for e in after if e.event == BACKING_OFF})
    to = next((e.fields.get("to") for e in after if e.replica_id == m.old_leader and e.event == HANDOVER_REQUESTED),
              None)
    m.handover_requested_to = None if to is None else str(to)
    if successor and m.commit_interval_s is None:
        m.commit_interval_s = commit_interval(commits, successor[0].epoch)


def _zombie_commits(d: Drill, events: list[LogEvent], commits: list[CommitSample]) -> None:
    """What became of the commits the zombie (the old leader, resumed) attempted.

    committed: its epoch's record versions after the successor's first commit (while it was paused nothing of
    its could land, and its own record was stamped before the pause, so versions, not times, tell). fenced:
    the most any one source shows — the election's ``commit_fenced``, the runner's ``fenced``, the Spark
    career's ``batch_fenced``, ``tenure_commits_fenced_total`` of its process. unknown: the runner's
    ``commit_outcome_unknown`` or a batch failed with "outcome unknown" (the reply was lost and the record could
    not be read back). attempted: those three, and at least the one it was paused in (``fault_injected``).
    """
    m = d.m
    old, old_epoch, fault = m.old_leader, m.old_epoch or 0, m.fault_at or 0.0
    successor = [c for c in commits if c.epoch > old_epoch and c.observed_at >= fault]
    first = successor[0].version if successor else None
    m.old_committed_after_fault = versions_where(
        commits, lambda c: c.epoch == old_epoch and (c.observed_at > fault if first is None else c.version > first))
    # The paused commit's record is stamped just before the fault point; one landing before the successor's is
    # the paused one, sent before the stop took effect.
    m.old_landed_before_pause = versions_where(
        commits, lambda c: c.epoch == old_epoch and c.observed_at > fault and c.committed_at >= fault - 0.05
        and (first is None or c.version < first))
    mine = [e for e in events if e.replica_id == old and e.at >= fault - 1.0]

    def count(pred: Callable[[LogEvent], bool]) -> int:
        return sum(1 for e in mine if pred(e))

    metric = 0
    if d.monitor is not None and d.old_pid is not None and old is not None:
        metric = int(d.monitor.process_metric(old, d.old_pid, COMMITS_FENCED_TOTAL))
        metric = max(metric, d.monitor.process_counts(old, d.old_pid)[1])
    m.old_fenced_after_fault = max(count(lambda e: e.event == COMMIT_FENCED),
                                   count(lambda e: e.event == FENCED and e.fields.get("logger") == RUNNER_LOGGER),
                                   count(lambda e: e.event == BATCH_FENCED), metric)
    m.old_unknown_after_fault = max(
        count(lambda e: e.event == COMMIT_OUTCOME_UNKNOWN),
        count(lambda e: e.event == BATCH_FAILED and "outcome unknown" in str(e.fields.get("error", ""))))
    injected = count(lambda e: e.event == FAULT_INJECTED and e.fields.get("point") == "before_transaction")
    m.old_attempted_after_fault = max(injected, m.old_committed_after_fault + m.old_fenced_after_fault
                                      + m.old_unknown_after_fault)


def audit(d: Drill) -> None:
    """Fill the audit figures of ``d.m``: ``tenure verify`` (Spark) or the counter check."""
    m = d.m
    if d.settings.career == "spark":
        report = verify(d.topology.data_root)
        m.audit_lost, m.audit_duplicated, m.audit_inversions = report.lost, report.duplicated, report.inversions
        m.audit_ok = report.ok
        m.ids_dead_lettered, m.ids_set_aside = report.ids_dead_lettered, report.ids_set_aside
        m.set_aside_batches = report.set_aside_batches
        m.audit_detail = (f"{report.ids_in} ids in, {report.ids_written} written, {report.quarantined} "
                          f"quarantined, unexpected {report.unexpected}, unquarantined {report.unquarantined}, "
                          f"not read yet {report.waiting}")
    else:
        commits = d.commits()
        last_n = commits[-1].batch if commits else None
        lost, dup, inv, detail = audit_counter(d.topology.data_root, last_n)
        m.audit_lost, m.audit_duplicated, m.audit_inversions, m.audit_detail = lost, dup, inv, detail
        m.audit_ok = lost == dup == inv == 0


def timeline(d: Drill) -> dict[str, Any]:
    """The run for the plot and ``--json``: replicas, fault/heal markers, leadership intervals, commits."""
    events = d.events()
    end = d.ended_at or time.time()
    # Each queue counts its own epochs: a term is its queue's and epoch's.
    owner = {(int(e.fields.get("queue", 0)), int(e.fields["epoch"])): e.replica_id for e in events
             if e.event == INAUGURATED and isinstance(e.fields.get("epoch"), int)}
    return {
        "started_at": d.started_at,
        "ended_at": end,
        "replicas": [r.replica_id for r in d.topology.replicas],
        "markers": [asdict(mk) for mk in d.markers],
        "leadership": leader_intervals(events, d.killed, end),
        "commits": [{"at": c.committed_at, "epoch": c.epoch, "replica": owner.get((c.queue, c.epoch)),
                     "version": c.version, "queue": c.queue} for c in d.commits()],
    }
