"""What a drill measures: the ``Measurements`` record and the pure figures behind it (leadership intervals,
the commit cadence, commit versions, the counter career's audit)."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenure.career import counter_path
from tenure.service.drill._monitor import (
    INAUGURATED,
    RESUMED,
    REVOKED,
    RUNNER_LOGGER,
    RUNNER_STARTING,
    RUNNER_STATE,
    SUSPENDED,
    TERM_STATES,
    CommitSample,
    LogEvent,
)

__all__ = [
    "Measurements",
    "audit_counter",
    "commit_interval",
    "leader_intervals",
    "nth_commit_after",
    "runner_inaugurated",
    "versions_where",
]


@dataclass
class Measurements:
    """Figures of one scenario run; ``None`` means not applicable or not observed.

    Example::

        m = Measurements(scenario="crash", fault_at=100.0, new_leader_s=6.5)
    """

    scenario: str
    error: str | None = None
    fault_at: float | None = None
    heal_at: float | None = None
    old_leader: str | None = None
    old_epoch: int | None = None
    new_leader: str | None = None
    new_epoch: int | None = None
    detect_s: float | None = None
    new_leader_s: float | None = None
    commit_gap_s: float | None = None
    commits_attempted: int = 0
    commits_fenced: int = 0
    leadership_changes: int = 0
    epochs_monotonic: bool = True
    audit_lost: int | None = None
    audit_duplicated: int | None = None
    audit_inversions: int | None = None
    audit_ok: bool | None = None
    audit_detail: str = ""
    # scenario-specific facts
    successor_committed: bool = False
    commits_after_fault: int = 0
    commits_after_heal: int = 0
    clean_handover: bool | None = None
    handover_to_commit_s: float | None = None
    #: The successor's median time between consecutive commits: the pipeline's own cadence in this run.
    commit_interval_s: float | None = None
    old_committed_after_fault: int | None = None
    old_attempted_after_fault: int | None = None
    #: the zombie's commits the fence rejected (commit_fenced, the runner's fenced, tenure_commits_fenced_total)
    old_fenced_after_fault: int | None = None
    #: the zombie's commits that ended "outcome unknown" (a lost reply that could not be read back)
    old_unknown_after_fault: int | None = None
    #: the commit the zombie was paused in, found in the record before any successor's: the pause took effect
    #: only after the transaction was sent (its session still held, so the commit was legitimate, not fenced)
    old_landed_before_pause: int | None = None
    old_rejoined_as_follower: bool | None = None
    old_released: bool | None = None
    suspended_s: float | None = None
    old_commits_past_deadline: int | None = None
    commits_during_outage: int | None = None
    leaders_after: int | None = None
    max_simultaneous_leaders: int | None = None
    first_leader_s: float | None = None
    changes_per_restart: list[int] = field(default_factory=list)
    career_failures: int = 0
    processes_exited: int = 0
    # targeted-handover: `tenure handover --to <last in line>`, read back from the term history and the logs
    #: the replica named in the request (the last in line), and those in line between the leader and it
    handover_target: str | None = None
    handover_ahead: list[str] = field(default_factory=list)
    #: the replica of the term ``wait_handover`` found committing after the requested epoch
    handover_new_leader: str | None = None
    #: ``HandoverDone.gap_s``: the new term's first commit after the old term's last (term history)
    handover_gap_s: float | None = None
    #: the ``to`` of the old leader's ``handover_requested`` event (None: it never acted on the request)
    handover_requested_to: str | None = None
    #: the requested term's ending and reason in the term history (``clean``, "handover requested to …")
    old_term_ended: str | None = None
    old_term_reason: str | None = None
    #: replicas that logged ``deferred_to_handover_target`` after the request
    stepped_aside: list[str] = field(default_factory=list)
    #: replicas that logged ``backing_off`` after the fault; replicas whose process was gone when it ended
    backed_off: list[str] = field(default_factory=list)
    replicas_down: list[str] = field(default_factory=list)
    #: the old leader's place in the election's line (1 leads) once the handover is done; None: not in line
    old_line_position: int | None = None
    # worker-loss and master-loss: the leader's application on the embedded Spark cluster
    #: how long the cluster took to start in this run (master serving, every worker registered)
    cluster_start_s: float | None = None
    #: the epochs of the commits observed after the fault (the term goes on: only the old epoch)
    epochs_after_fault: list[int] = field(default_factory=list)
    #: when the leader's steady cadence began: its application had an executor on every worker (the commits
    #: before, the first after its inauguration, are slower)
    cadence_from: float | None = None
    #: the leader's median commit interval from ``cadence_from`` to the fault (its steady cadence on the cluster)
    interval_before_s: float | None = None
    #: worker-loss: the worker SIGKILLed with its executors, and when the master no longer had it ALIVE
    lost_worker: str | None = None
    worker_dropped_s: float | None = None
    #: worker-loss: tasks the killed executor had started and not finished (from its log): Spark reruns them
    tasks_lost: int | None = None
    #: worker-loss: the fault → the third commit after it (``CLUSTER_COMMITS``; record versions, as observed)
    commits_after_loss_s: float | None = None
    #: worker-loss: the restart → the worker ALIVE at the master again, → the master granting the application an
    #: executor on it again (its core in use; the executor's JVM then starts, cold, and registers with the driver)
    worker_back_s: float | None = None
    executor_back_s: float | None = None
    #: master-loss: how long the master was down (fault → the restart), commits during it (record versions)
    master_down_s: float | None = None
    commits_master_down: int | None = None
    #: master-loss: the restart → the master ALIVE (recovery done) with the application among its active ones
    app_back_s: float | None = None
    #: master-loss: the application's state on the recovered master (RUNNING, WAITING …)
    app_state_after: str | None = None
    # the stuck-leader drills (frozen-jvm, hung-row-function, frozen-next-in-line, poison-batch)
    #: the replica whose Spark JVM froze or whose row function hung: the leader (frozen-next-in-line: the follower
    #: next in line)
    stuck_replica: str | None = None
    #: its process's exit code (``EXIT_STALLED``: it gave its lock up), the reason of its ``stalled`` event, and
    #: the fault → that event
    stuck_exit_code: int | None = None
    stall_reason: str | None = None
    stalled_s: float | None = None
    #: the fault that moves the lock (frozen-next-in-line: the leader's SIGTERM; poison-batch: the poison file's
    #: landing) → another replica's first commit (its ``committed_at``)
    fault_to_commit_s: float | None = None
    #: frozen-next-in-line: the freeze → the follower out of the election's line; the replica last in line, the
    #: healthy one that must take over
    left_line_s: float | None = None
    healthy_successor: str | None = None
    #: poison-batch: the term that set the batch aside (its epoch, the batch), the fault → its manifest, the terms
    #: that ended ``failed`` (term history) from the fault's term to it, the batches committed after it (observed)
    set_aside_epoch: int | None = None
    set_aside_batch: int | None = None
    set_aside_s: float | None = None
    failed_terms: int | None = None
    batches_after_set_aside: int | None = None
    #: the audit's ids dead-lettered, ids set aside and set-aside batches (``tenure verify``)
    ids_dead_lettered: int | None = None
    ids_set_aside: int | None = None
    set_aside_batches: int | None = None


def leader_intervals(events: list[LogEvent], killed: dict[str, float], end: float) -> list[dict[str, Any]]:
    """[{replica, state (leading|paused|suspended), start, end, epoch}] from runner_state transitions and the
    election's suspended/resumed/revoked events."""
    open_: dict[str, tuple[str, float, Any]] = {}
    suspended: dict[str, float] = {}  # the election suspended the term (safe-until or connection loss)
    out: list[dict[str, Any]] = []
    for e in events:
        if e.event == RUNNER_STATE:
            old, new = e.fields.get("old"), e.fields.get("new")
            if old in TERM_STATES and e.replica_id in open_:
                state, start, epoch = open_.pop(e.replica_id)
                out.append({"replica": e.replica_id, "state": state, "start": start, "end": e.at, "epoch": epoch})
            if new in TERM_STATES:
                open_[e.replica_id] = (str(new), e.at, e.fields.get("epoch"))
        elif e.event == RUNNER_STARTING and e.replica_id in open_:  # a restarted process: the old one died
            state, start, epoch = open_.pop(e.replica_id)
            out.append({"replica": e.replica_id, "state": state, "start": start,
                        "end": killed.get(e.replica_id, e.at), "epoch": epoch})
        elif e.event == SUSPENDED and e.replica_id not in suspended:
            suspended[e.replica_id] = e.at
        if e.replica_id in suspended and (e.event in (RESUMED, REVOKED) or (
                e.event == RUNNER_STATE and e.fields.get("old") in TERM_STATES)):
            out.append({"replica": e.replica_id, "state": "suspended", "start": suspended.pop(e.replica_id),
                        "end": e.at, "epoch": e.fields.get("epoch")})
    for replica_id, (state, start, epoch) in open_.items():
        out.append({"replica": replica_id, "state": state, "start": start,
                    "end": killed.get(replica_id, end), "epoch": epoch})
    return out


def runner_inaugurated(e: LogEvent) -> bool:
    """The runner's ``inaugurated`` (a career may log an event of the same name: count each term once)."""
    return e.event == INAUGURATED and e.fields.get("logger", RUNNER_LOGGER) == RUNNER_LOGGER


def commit_interval(commits: list[CommitSample], epoch: int) -> float | None:
    """Median time between consecutive commits of ``epoch`` (pairs the 50 ms poller saw one version apart)."""
    ours = [c for c in commits if c.epoch == epoch]
    gaps = [b.committed_at - a.committed_at for a, b in itertools.pairwise(ours) if b.version == a.version + 1]
    return statistics.median(gaps) if gaps else None


def nth_commit_after(commits: list[CommitSample], at: float, n: int) -> CommitSample | None:
    """The sample in which the ``n``-th commit version after ``at`` was observed (the last version observed
    before ``at`` is the base; with none, the first version after it counts as the first), or None."""
    before = [c for c in commits if c.observed_at < at]
    after = [c for c in commits if c.observed_at >= at]
    if not after:
        return None
    base = before[-1].version if before else after[0].version - 1
    return next((c for c in after if c.version >= base + n), None)


def versions_where(commits: list[CommitSample], pred: Callable[[CommitSample], bool]) -> int:
    """How many commit versions the samples matching ``pred`` stand for (a sample covers the versions since
    the previous sample, which the 50 ms poll may have skipped)."""
    total = 0
    for prev, cur in zip([None, *commits], commits, strict=False):
        if pred(cur):
            total += cur.version - prev.version if prev is not None else 1
    return total


def audit_counter(data_root: Path, committed_n: int | None, *, queue: int = 0,
                  queues: int = 1) -> tuple[int, int, int, str]:
    """The counter career's audit of queue ``queue`` of a topic of ``queues``: (lost, duplicated, inversions,
    detail).

    Every n from 1 to the last committed one appears once in the queue's counter file (``counter.log``, or
    ``counter-queue-<k>.log`` on a topic of several queues), and epochs never go down.
    """
    path = counter_path(data_root, queue, queues)
    lines = [ln.split(",") for ln in path.read_text().splitlines() if ln] if path.exists() else []
    pairs = [(int(e), int(n)) for e, n in lines]
    ns = [n for _, n in pairs]
    top = max([*ns, committed_n or 0], default=0)
    seen = set(ns)
    lost = sum(1 for n in range(1, top + 1) if n not in seen)
    duplicated = len(ns) - len(seen)
    inversions = sum(1 for (a, _), (b, _) in itertools.pairwise(pairs) if b < a)
    inversions += sum(1 for a, b in itertools.pairwise(ns) if b < a)
    return lost, duplicated, inversions, f"{len(ns)} lines, last n {top}"
