"""Prometheus metrics of one replica, on an injected registry: the replica's own, and each queue's (the observer of the
queue's career forwards to them).

In a group of several queues, every series about one queue carries a ``queue`` label (``"0"``, ``"1"`` …), each
created at zero for every queue so that a queue without a leader shows as a sum of zeros. In a group of one queue
the series keep the shape they had before queues, without the label: dashboards and alerts aggregate ``by
(queue)``, which reads a missing label as one queue, so they show both.
"""

from __future__ import annotations

import platform
import threading
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics import MetricWrapperBase

from tenure import __version__
from tenure.career.lifecycle import STALL_REASONS

__all__ = [
    "BATCHES",
    "BATCH_OUTCOMES",
    "CANARY_GAP",
    "COMMITS_FENCED",
    "CONTROL_LOOP_AGE",
    "GROUP_BALANCED",
    "HANDOVER_GAP",
    "IS_LEADER",
    "LEADER_CHANGES",
    "LEADER_EPOCH",
    "LEASE_HEADROOM",
    "PROGRESS_AGE",
    "QUEUES_LED",
    "QUEUE_LOST",
    "QUEUE_MOVES",
    "RECORDS",
    "RECORD_OUTCOMES",
    "SOURCE_BACKLOG_FILES",
    "STALLS",
    "ZK_CONNECTED",
    "Metrics",
    "QueueMetrics",
    "TermCounts",
]

# The names other tools read from a replica's /metrics (a Counter's samples add ``_total``).
IS_LEADER = "tenure_is_leader"
LEADER_EPOCH = "tenure_leader_epoch"
BATCHES = "tenure_batches"
RECORDS = "tenure_records"
SOURCE_BACKLOG_FILES = "tenure_source_backlog_files"
ZK_CONNECTED = "tenure_zk_connected"
COMMITS_FENCED = "tenure_commits_fenced"
LEADER_CHANGES = "tenure_leader_changes"
LEASE_HEADROOM = "tenure_lease_headroom_seconds"
HANDOVER_GAP = "tenure_handover_gap_seconds"
CANARY_GAP = "tenure_canary_gap_seconds"
CONTROL_LOOP_AGE = "tenure_control_loop_age_seconds"
PROGRESS_AGE = "tenure_progress_age_seconds"
STALLS = "tenure_stalls"
QUEUES_LED = "tenure_queues_led"
GROUP_BALANCED = "tenure_group_balanced"
QUEUE_MOVES = "tenure_queue_moves"
QUEUE_LOST = "tenure_queue_lost"

BATCH_OUTCOMES = ("committed", "skipped", "set_aside", "fenced", "failed")
RECORD_OUTCOMES = ("written", "duplicate", "quarantined", "late", "retried", "dead_lettered", "set_aside")

_M = TypeVar("_M", bound=MetricWrapperBase)

# Failover-scale buckets: handovers and inaugurations range from milliseconds (warm) to tens of seconds (cold).
_LIFECYCLE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60)
_COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)


@dataclass(frozen=True)
class TermCounts:
    """What the current term has committed so far (for its entry in the term history)."""

    batches: int = 0
    records: int = 0
    first_commit_at: float | None = None
    last_commit_at: float | None = None


class Metrics:
    """Every metric a replica exports; series are created at zero so alerts see them from the start. The series of
    one queue are :meth:`queue`'s.

    Example::

        registry = CollectorRegistry()
        metrics = Metrics(registry, replica_id="r1", group="orders", queues=4)
        metrics.queue(2).is_leader.set(1)
    """

    def __init__(self, registry: CollectorRegistry, *, replica_id: str, group: str, queues: int = 1,
                 default_collectors: bool = True) -> None:
        self.registry = registry
        self.queues = queues
        if default_collectors:
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            GCCollector(registry=registry)
        per = ["queue"] if queues > 1 else []  # the label of a queue's series (none in a group of one queue)
        self.info = Gauge("tenure_info", "Replica identity (value is always 1).",
                          ["replica_id", "group", "version", "host"], registry=registry)
        self.info.labels(replica_id, group, __version__, platform.node()).set(1)
        self.is_leader = Gauge(IS_LEADER, "1 while this replica leads the queue with its writer active.", per,
                               registry=registry)
        self.leader_epoch = Gauge(LEADER_EPOCH, "Fencing token of the queue's current term (0 when following).", per,
                                  registry=registry)
        self.leadership_changes = Counter("tenure_leadership_changes_total",
                                          "Terms this replica began or ended.", per, registry=registry)
        self.inauguration_seconds = Histogram("tenure_inauguration_seconds",
                                              "From elected to ready to execute.", per,
                                              buckets=_LIFECYCLE_BUCKETS, registry=registry)
        self.handover_seconds = Histogram("tenure_handover_seconds",
                                          "From the decision to step down to the election node released.", per,
                                          buckets=_LIFECYCLE_BUCKETS, registry=registry)
        self.batches = Counter(BATCHES, "Batches by outcome.", ["outcome", *per], registry=registry)
        self.records = Counter(RECORDS, "Records by outcome.", ["outcome", *per], registry=registry)
        self.batch_duration = Histogram("tenure_batch_duration_seconds", "Wall time of one batch.", per,
                                        buckets=_LIFECYCLE_BUCKETS, registry=registry)
        self.commit_duration = Histogram("tenure_commit_duration_seconds",
                                         "Latency of one fenced commit transaction.", per,
                                         buckets=_COMMIT_BUCKETS, registry=registry)
        self.backlog_files = Gauge(SOURCE_BACKLOG_FILES, "Landing files not yet consumed.", per,
                                   registry=registry)
        self.queue_lost = Gauge(QUEUE_LOST, "1 while this replica leads the queue and its Redis stream lost entries "
                                "the group has not read: nothing is committed past the hole until it is restored.",
                                per, registry=registry)
        self.retry_waiting_records = Gauge("tenure_retry_waiting_records",
                                           "Records held in the retry store (failed, or behind a failed one).", per,
                                           registry=registry)
        self.last_commit = Gauge("tenure_last_commit_timestamp_seconds",
                                 "Unix time of this replica's last fenced commit.", per, registry=registry)
        self.zk_connected = Gauge(ZK_CONNECTED, "1 while the ZooKeeper session is connected.",
                                  registry=registry)
        self.commits_fenced = Counter(COMMITS_FENCED, "Commits rejected by the fence.", per,
                                      registry=registry)
        self.career_failures = Counter("tenure_career_failures",
                                       "Terms ended because the career raised.", per, registry=registry)
        self.leader_changes = Counter(LEADER_CHANGES, "Changes of the queue's leader this replica saw (its own "
                                      "terms included).", per, registry=registry)
        self.lease_headroom = Gauge(LEASE_HEADROOM, "Seconds until the leader's safe-until deadline (0 when "
                                    "not leading): how close the lease came to stopping commits.", per,
                                    registry=registry)
        self.handover_gap = Histogram(HANDOVER_GAP, "Seen by a new leader at its first commit: seconds since the "
                                      "previous term's last commit (the pause the output saw).", per,
                                      buckets=_LIFECYCLE_BUCKETS, registry=registry)
        self.canary_gap = Gauge(CANARY_GAP, "The last canary handover's gap, seen by the leader that followed it "
                                "(--canary-handover-every-s).", per, registry=registry)
        # Computed at scrape time from the progress clock (``_progress``), so they rise while the loop is stuck.
        self.control_loop_age = Gauge(CONTROL_LOOP_AGE, "Seconds since the control loop last came round.",
                                      registry=registry)
        self.progress_age = Gauge(PROGRESS_AGE, "Seconds the leader has owed progress: input waiting and no "
                                  "batch finished since (0 when following or when nothing waits).", per,
                                  registry=registry)
        self.stalls = Counter(STALLS, "Times this replica gave a lock up (one queue's, or every one) because its "
                              "work stopped progressing, by reason.", ["reason"], registry=registry)
        for reason in STALL_REASONS:
            self.stalls.labels(reason)
        self.row_timeouts = Counter("tenure_row_timeouts", "Row-function calls that ran past --row-timeout-s.", per,
                                    registry=registry)
        self.queues_led = Gauge(QUEUES_LED, "Queues this replica leads now.", registry=registry)
        self.group_balanced = Gauge(GROUP_BALANCED, "1 when this replica's view of the balance's plan has no moves "
                                    "left (every queue led by the member the plan gives it), else 0.",
                                    registry=registry)
        self.queue_moves = Counter(QUEUE_MOVES, "Moves of a queue this replica led to another member, started by "
                                   "the balance.", per, registry=registry)
        self._queues = [QueueMetrics(self, q) for q in range(queues)]

    def queue(self, queue: int) -> QueueMetrics:
        """The series of queue ``queue``."""
        return self._queues[queue]


class QueueMetrics:
    """The series of one queue (created at zero here), and the counts of its current term; what the queue's career
    observes is forwarded here by its ``QueueProgress``.

    Example::

        metrics.queue(1).batch_finished("committed", 0.4, {"written": 500})
    """

    def __init__(self, metrics: Metrics, queue: int) -> None:
        self._labels: dict[str, str] = {"queue": str(queue)} if metrics.queues > 1 else {}
        self._metrics = metrics
        child = self._child
        self.is_leader = child(metrics.is_leader)
        self.leader_epoch = child(metrics.leader_epoch)
        self.leadership_changes = child(metrics.leadership_changes)
        self.inauguration_seconds = child(metrics.inauguration_seconds)
        self.handover_seconds = child(metrics.handover_seconds)
        self.batch_duration = child(metrics.batch_duration)
        self.commit_duration = child(metrics.commit_duration)
        self.backlog_files = child(metrics.backlog_files)
        self.retry_waiting_records = child(metrics.retry_waiting_records)
        self.stream_lost = child(metrics.queue_lost)
        self.last_commit = child(metrics.last_commit)
        self.commits_fenced = child(metrics.commits_fenced)
        self.career_failures = child(metrics.career_failures)
        self.leader_changes = child(metrics.leader_changes)
        self.lease_headroom = child(metrics.lease_headroom)
        self.handover_gap = child(metrics.handover_gap)
        self.canary_gap = child(metrics.canary_gap)
        self.progress_age = child(metrics.progress_age)
        self.row_timeouts = child(metrics.row_timeouts)
        self.queue_moves = child(metrics.queue_moves)
        for outcome in BATCH_OUTCOMES:
            child(metrics.batches, outcome=outcome)
        for outcome in RECORD_OUTCOMES:
            child(metrics.records, outcome=outcome)
        self._term_lock = threading.Lock()
        self._term = TermCounts()

    def _child(self, family: _M, **labels: str) -> _M:
        """``family``'s series of this queue (and of ``labels``); the family itself when it has no labels."""
        return family.labels(**labels, **self._labels) if labels or self._labels else family

    def batches(self, outcome: str) -> Counter:
        """The queue's batch counter of ``outcome``."""
        return self._child(self._metrics.batches, outcome=outcome)

    def records(self, outcome: str) -> Counter:
        """The queue's record counter of ``outcome``."""
        return self._child(self._metrics.records, outcome=outcome)

    def begin_term(self) -> None:
        """Start counting a new term's commits from zero."""
        with self._term_lock:
            self._term = TermCounts()

    @property
    def term(self) -> TermCounts:
        with self._term_lock:
            return self._term

    # What the queue's career observes, forwarded by its ``QueueProgress`` (the career's observer).
    def batch_finished(self, outcome: str, duration_s: float, records: dict[str, int], *,
                       progressed: bool = True) -> None:
        self.batches(outcome).inc()
        if outcome == "committed":
            with self._term_lock:
                t = self._term
                self._term = TermCounts(t.batches + 1, t.records + records.get("written", 0), t.first_commit_at,
                                        t.last_commit_at)
        if outcome == "fenced":
            self.commits_fenced.inc()
        self.batch_duration.observe(duration_s)
        for name, count in records.items():
            if count and name in RECORD_OUTCOMES:
                self.records(name).inc(count)
        if records.get("timed_out"):
            self.row_timeouts.inc(records["timed_out"])

    def commit_finished(self, duration_s: float, committed_at: float) -> None:
        self.commit_duration.observe(duration_s)
        with self._term_lock:
            t = self._term
            self._term = TermCounts(t.batches, t.records, t.first_commit_at or committed_at, committed_at)
        self.last_commit.set(committed_at)

    def backlog(self, files: int, *, retry_due: bool = False) -> None:
        self.backlog_files.set(files)

    def retry_waiting(self, records: int) -> None:
        self.retry_waiting_records.set(records)

    def queue_lost(self, lost: bool) -> None:
        self.stream_lost.set(1 if lost else 0)
