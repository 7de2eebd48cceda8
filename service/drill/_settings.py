"""Drill settings: the timings and load of a run, the criteria's thresholds, and what may be run here."""

from __future__ import annotations

import importlib
import importlib.util
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tenure.career.lifecycle import HEALTH_EVERY_S
from tenure.errors import TenureError
from tenure.service.local import LOCAL_SPEC, Ensemble
from tenure.service.replica import ReplicaSpec, setting_named

__all__ = [
    "ABOUT_ONE_S",
    "CLUSTER_COMMITS",
    "FLAKY_MAX_CHANGES",
    "HEALTH_CHECK_EVERY_S",
    "MASTER_DOWN_S",
    "OUTAGE_GRACE_S",
    "SAFE_UNTIL_SLACK_S",
    "SPARK_WORKER_TIMEOUT_S",
    "STUCK_SLACK_S",
    "DrillError",
    "DrillSettings",
    "career_unavailable",
    "check_arguments",
    "worker_loss_budget_s",
]

#: "within about 1 s" (issue 8, handover) as a threshold: a second plus the commit poller's resolution and
#: a little scheduling slack on a loaded 2-core machine. The handover criterion adds one steady commit interval
#: of the successor: no leader commits sooner than its batch takes, so what the handover itself may cost is
#: the second on top (the counter commits every 0.1 s; a Spark batch takes 1.5-2.5 s on 2 cores).
ABOUT_ONE_S = 1.5
#: The election checks the safe-until deadline once per tick; a pause may land up to this late.
SAFE_UNTIL_SLACK_S = 0.5
#: flaky-link: more leadership changes than this is a restart loop, not a bounded reaction.
FLAKY_MAX_CHANGES = 2
#: A commit sent just before a quorum loss may still land this long after it.
OUTAGE_GRACE_S = 0.5
#: worker-loss: the commits the leader must make after a worker's SIGKILL, within ``worker_loss_budget_s``.
CLUSTER_COMMITS = 3
#: master-loss: how long the Spark master stays down (commits must go on meanwhile).
MASTER_DOWN_S = 10.0
#: Spark's ``spark.worker.timeout`` (default 60 s; the embedded cluster keeps it): a master drops a worker it has
#: not heard from for this long, and a restarted master in recovery waits this long for its workers and
#: applications to answer before it drops the silent ones. The budget of both cluster drills: a SIGKILLed worker's
#: connection closes at once, so the master need not wait for it; a restarted master that has the application back
#: within this has it because the driver answered, not because recovery gave up waiting.
SPARK_WORKER_TIMEOUT_S = 60.0
#: The stuck-leader drills' budget (issue 26): a stuck replica's fault → another replica's first commit within the
#: timeout that catches it (the stall timeout; the probe timeout for a frozen JVM), one steady commit interval of
#: the successor (no leader commits sooner than its batch takes), and these seconds for the rest: recording the
#: stall, closing the session, the successor's inauguration on warm standby and its first batch's extra cost.
STUCK_SLACK_S = 5.0
#: How often a replica asks its career whether it can work: a follower whose JVM froze leaves the election's line
#: within this plus the probe timeout.
HEALTH_CHECK_EVERY_S = HEALTH_EVERY_S


class DrillError(TenureError):
    """A drill cannot be run as asked (unknown scenario, career not available); the message says the fix."""


@dataclass(frozen=True)
class DrillSettings:
    """Timings and load of one drill run.

    Both timelines run ZooKeeper at the embedded default tickTime (``Ensemble.DEFAULT_TICK_MS``, 200 ms), as
    `tenure up` does: a server expires sessions on tick boundaries, so a dead leader's session ends up to 1.5
    ticks (0.3 s) after its timeout, and "session timeout + 1 s" must leave room for that. ``short`` gives the
    test timeline: session timeout 4 s, a shorter handover budget, fewer records, and shorter progress-watchdog
    limits for the stuck-leader drills (whose defaults are the replica's own: issue 26 measures them so).

    Example::

        settings = DrillSettings.make(career="counter", records=None, short=True)
        assert settings.safe_until_s == 2.0
    """

    career: str = "spark"
    records: int = 20000
    produce_s: float = 20.0
    session_timeout_s: float = LOCAL_SPEC["session_timeout_s"]
    handover_timeout_s: float = LOCAL_SPEC["handover_timeout_s"]
    zk_tick_ms: int = Ensemble.DEFAULT_TICK_MS
    safe_fraction: float = setting_named("safe_fraction").default
    counter_interval_s: float = 0.1
    startup_timeout_s: float = 300.0
    settle_timeout_s: float = 300.0
    #: How long a step of the work may take (a successor's first commit, a few more commits); a Spark batch on
    #: a loaded 2-core machine can take tens of seconds, the counter commits every ``counter_interval_s``.
    work_timeout_s: float = 60.0
    #: With N > 0 the replicas' leader runs its application on an embedded Spark standalone cluster of N
    #: one-core workers (``tenure drill --spark-cluster N``); 0: local Spark inside each replica.
    spark_workers: int = 0
    # The progress watchdog's limits and the deadlines it watches, ``tenure run``'s settings of the same names
    # (their meaning is declared there), which the stuck-leader drills pass to their replicas (``watchdog_spec``);
    # the defaults are the replica's own.
    stall_timeout_s: float = setting_named("stall_timeout_s").default
    first_batch_allowance_s: float = setting_named("first_batch_allowance_s").default
    liveness_timeout_s: float = setting_named("liveness_timeout_s").default
    probe_timeout_s: float = setting_named("probe_timeout_s").default
    row_timeout_s: float = setting_named("row_timeout_s").default
    max_batch_attempts: int = setting_named("max_batch_attempts").default
    #: The poison-batch drill's --set-aside-after-s, on both timelines: far below the replica's default (10
    #: minutes, which an outage must outlast), so the drill splits its poison batch within a minute or two.
    set_aside_after_s: float = 30.0

    @classmethod
    def make(cls, *, career: str, records: int | None, short: bool, spark_workers: int = 0) -> DrillSettings:
        work_timeout_s = 240.0 if career == "spark" else 60.0
        if short:
            return cls(career=career, records=records or 6000, produce_s=12.0, session_timeout_s=4.0,
                       handover_timeout_s=2.0, work_timeout_s=work_timeout_s,
                       spark_workers=spark_workers, stall_timeout_s=20.0, first_batch_allowance_s=30.0,
                       liveness_timeout_s=10.0, probe_timeout_s=3.0, row_timeout_s=2.0)
        return cls(career=career, records=records or 20000, work_timeout_s=work_timeout_s,
                   spark_workers=spark_workers)

    @property
    def safe_until_s(self) -> float:
        """How long a leader that hears nothing from ZooKeeper may still commit."""
        return self.safe_fraction * self.session_timeout_s

    @property
    def rate(self) -> float:
        return max(50.0, self.records / self.produce_s)

    @property
    def retry_attempts(self) -> int:
        """Attempts of a failing record before it is dead-lettered, for the stuck-leader drills: enough that
        ``retry_attempts × row_timeout_s`` outlasts the stall timeout (a record fails at most once per batch, and
        each failing batch takes a row timeout at least), so a leader whose row function hangs gives its lock up
        before any record is dead-lettered; at least the replica's default of 5."""
        return max(5, math.ceil(self.stall_timeout_s / self.row_timeout_s) + 2)

    def replica_spec(self) -> ReplicaSpec:
        """What every drill's replicas run with (a scenario's own settings go over it): this run's career and
        timings, warm standby, and a failure back-off of a second."""
        return ReplicaSpec(career=self.career, session_timeout_s=self.session_timeout_s,
                           handover_timeout_s=self.handover_timeout_s, safe_fraction=self.safe_fraction,
                           counter_interval_s=self.counter_interval_s, standby="warm", failure_backoff_s=1)

    def watchdog_spec(self) -> ReplicaSpec:
        """The progress watchdog's limits and the deadlines it watches (passed by the stuck-leader drills only: the
        other drills pause whole replicas past the short timeline's liveness timeout on purpose)."""
        return ReplicaSpec(stall_timeout_s=self.stall_timeout_s, first_batch_allowance_s=self.first_batch_allowance_s,
                           liveness_timeout_s=self.liveness_timeout_s, probe_timeout_s=self.probe_timeout_s,
                           row_timeout_s=self.row_timeout_s, max_batch_attempts=self.max_batch_attempts,
                           set_aside_after_s=self.set_aside_after_s)


def worker_loss_budget_s(workers: int, interval_s: float) -> float:
    """How long ``CLUSTER_COMMITS`` commits may take after one of ``workers`` one-core workers is SIGKILLed,
    given the leader's steady commit interval before the loss (``interval_s``, measured in the same run).

    The batch in flight loses the tasks the dead executor ran: Spark runs them again on the survivors, so that
    batch may take up to one interval more. The next batches run on ``workers - 1`` of ``workers`` cores, each
    at most ``workers / (workers - 1)`` times as long as before. On top, about a second (``ABOUT_ONE_S``) for the
    driver to learn of the lost executor (its connection drops) and reschedule::

        ABOUT_ONE_S + (1 + CLUSTER_COMMITS * workers / (workers - 1)) * interval_s

    With 2 workers and a 2.5 s interval: 1.5 + 7 × 2.5 = 19 s.
    """
    if workers < 2:
        raise ValueError(f"workers={workers}: a worker's loss leaves a batch somewhere to run only with 2 or more")
    if interval_s <= 0:
        raise ValueError(f"interval_s={interval_s} must be positive")
    return ABOUT_ONE_S + (1 + CLUSTER_COMMITS * workers / (workers - 1)) * interval_s


def career_unavailable(career: str) -> str | None:
    """Why ``career`` cannot run drills here, or ``None``."""
    if career != "spark":
        return None
    try:
        module = importlib.import_module("tenure.career.spark")
    except ImportError as exc:
        return f"the Spark career is not importable ({exc}): use --career counter"
    if not hasattr(module, "SparkCareer"):
        return "tenure.career.spark does not export SparkCareer yet: use --career counter"
    return None


def check_arguments(scenarios: Sequence[str], *, faults: int | None, seed: int | None, spark_workers: int,
                    plot: bool, queues: int | None = None) -> None:
    """The rules between ``tenure drill``'s arguments, checked before anything starts.

    Raises:
        DrillError: chaos with other scenarios or on a Spark cluster, ``--faults``/``--seed``/``--queues``
            without chaos,
            ``--plot`` without matplotlib; the message says the fix.
    """
    if plot and importlib.util.find_spec("matplotlib") is None:
        raise DrillError("--plot needs matplotlib, which a replica's install leaves out: "
                         "pip install 'tenure[drill]' (or drop --plot)")
    if "chaos" in scenarios:
        if len(scenarios) > 1:
            raise DrillError("chaos runs alone: `tenure drill chaos --faults K …`, other scenarios separately")
        if spark_workers:
            raise DrillError("chaos runs without --spark-cluster: its partitions put replicas in network "
                             "namespaces, out of reach of the cluster on loopback")
    elif faults is not None or seed is not None or queues is not None:
        raise DrillError("--faults, --seed and --queues are options of `tenure drill chaos` only")
