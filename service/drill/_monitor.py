"""What a drill observes while it runs: the replicas' JSON logs, the commit records, the replicas' /metrics.

Each queue's commit record is polled every 50 ms (each change kept), the replicas' ``/metrics`` scraped every 200 ms
(kept per process, so a killed replica's last counts stay), and the logs are read back on demand. The event names
the drill reads are imported from the modules that log them and re-exported here; the metric samples it reads
are gathered below.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from tenure.career.lifecycle import (
    BACKING_OFF,
    CAREER_FAILED,
    COMMIT_OUTCOME_UNKNOWN,
    DEFERRED_TO_HANDOVER_TARGET,
    EXECUTE_NOT_LEADER,
    FENCED,
    HANDED_OVER,
    HANDING_OVER,
    HANDOVER_RECORDED,
    HANDOVER_REQUESTED,
    INAUGURATED,
    INAUGURATING,
    LEADERSHIP_SUSPENDED,
    RUNNER_LOGGER,
    RUNNER_STARTING,
    RUNNER_STATE,
    STALLED,
)
from tenure.career.spark import BATCH_FAILED, BATCH_FENCED
from tenure.election import (
    COMMIT_FENCED,
    JOINED,
    RESUMED,
    REVOKED,
    SUSPENDED,
    ZooKeeperClient,
    connect,
    disconnect,
    read_commit,
)
from tenure.service.local import ReplicaProcess, Topology
from tenure.service.ops import sample_key, scrape
from tenure.service.replica import BATCHES, COMMITS_FENCED, FAULT_INJECTED, IS_LEADER, LEADER_EPOCH, Role

__all__ = [
    "BACKING_OFF",
    "BATCH_FAILED",
    "BATCH_FENCED",
    "CAREER_FAILED",
    "COMMITS_FENCED_TOTAL",
    "COMMIT_FENCED",
    "COMMIT_OUTCOME_UNKNOWN",
    "DEFERRED_TO_HANDOVER_TARGET",
    "EXECUTE_NOT_LEADER",
    "FAULT_INJECTED",
    "FENCED",
    "FOLLOWING",
    "HANDED_OVER",
    "HANDING_OVER",
    "HANDOVER_RECORDED",
    "HANDOVER_REQUESTED",
    "INAUGURATED",
    "INAUGURATING",
    "JOINED",
    "LEADERSHIP_SUSPENDED",
    "LEADING",
    "RESUMED",
    "REVOKED",
    "RUNNER_LOGGER",
    "RUNNER_STARTING",
    "RUNNER_STATE",
    "STALLED",
    "SUSPENDED",
    "TERM_STATES",
    "CommitSample",
    "LogEvent",
    "Monitor",
    "http_status",
    "read_events",
]

# -- the log events the drill reads -------------------------------------------------------------------------------
# Each event name is a constant defined once beside the code that logs it, imported above and re-exported here:
# the runner's from tenure.career.lifecycle (logger RUNNER_LOGGER; the Spark career logs INAUGURATED and
# HANDED_OVER too, under its own logger), the election's and the fence's from tenure.election, the batch outcomes
# from tenure.career.spark, FAULT_INJECTED from tenure.service.replica.

#: ``runner_state``'s values the drill reads (career/lifecycle/_states.py ``Role``)
FOLLOWING: Final = Role.FOLLOWING.value
LEADING: Final = Role.LEADING.value
#: the runner states of a term: leading, or leading but paused
TERM_STATES: Final = (LEADING, Role.PAUSED.value)

# -- the metric samples the drill reads (names from service/replica/_metrics.py, keys as ``scrape`` makes them) --
_BATCHES_COMMITTED: Final = sample_key(f"{BATCHES}_total", outcome="committed")
_BATCHES_FENCED: Final = sample_key(f"{BATCHES}_total", outcome="fenced")
COMMITS_FENCED_TOTAL: Final = f"{COMMITS_FENCED}_total"


@dataclass(frozen=True)
class LogEvent:
    """One JSON log line of a replica: its event name, time and every field."""

    replica_id: str
    at: float
    event: str
    fields: dict[str, Any]


def _parse_ts(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def read_events(log_path: Path, replica_id: str) -> list[LogEvent]:
    """The JSON log events of one replica's log file (every process of it); other lines are skipped."""
    events = []
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        # stderr (a traceback, Spark's own logging) shares the file and may leave a partial line before an event
        start = line.find('{"')
        if start < 0:
            continue
        try:
            record = json.loads(line[start:])
            at = _parse_ts(str(record["timestamp"]))
        except (json.JSONDecodeError, KeyError, ValueError):
            continue
        events.append(LogEvent(replica_id, at, str(record.get("event")), record))
    return events


@dataclass(frozen=True)
class CommitSample:
    """One observed change of a queue's commit record (``/tenure/<group>/commit`` on a topic of one queue)."""

    observed_at: float
    version: int
    epoch: int
    committed_at: float
    batch: int | None
    queue: int = 0


class Monitor:
    """Background observers: each queue's commit record every 50 ms, every replica's /metrics every 200 ms.

    Example::

        monitor = Monitor(topology)
        monitor.start()
        ...
        monitor.stop()
        commits = monitor.commits_snapshot()
    """

    def __init__(self, topology: Topology, *, commit_interval_s: float = 0.05, scrape_interval_s: float = 0.2):
        self._topology = topology
        #: the topic's number of queues, whose commit records are polled (each sample names its queue)
        self.queues: int = topology.spec.value("queues") or 1
        self._commit_interval_s = commit_interval_s
        self._scrape_interval_s = scrape_interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.commits: list[CommitSample] = []
        #: last successful scrape per process (replica id, pid): a killed process keeps its final counts
        self.last_metrics: dict[tuple[str, int], dict[str, float]] = {}
        #: (time, {replica id: (is leader, epoch)}) for replicas that answered
        self.leader_samples: list[tuple[float, dict[str, tuple[bool, int]]]] = []
        #: (time, committed total, fenced total) over all processes
        self.totals: list[tuple[float, int, int]] = []
        self._client: ZooKeeperClient | None = None
        self._threads = [threading.Thread(target=self._poll_commits, name="drill-commits", daemon=True),
                         threading.Thread(target=self._scrape, name="drill-metrics", daemon=True)]

    def start(self) -> None:
        self._client = connect(self._topology.ensemble.connect_string, session_timeout_s=10.0, connect_timeout_s=30,
                               persistent=True)
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._client is not None:
            with contextlib.suppress(Exception):
                disconnect(self._client)

    def _poll_commits(self) -> None:
        client = self._client
        assert client is not None, "start() connects first"
        queues = self.queues
        last_version: dict[int, int | None] = dict.fromkeys(range(queues), -1)
        while not self._stop.wait(self._commit_interval_s):
            for queue in range(queues):
                try:
                    record, version = read_commit(client, self._topology.group, queue=queue, queues=queues,
                                                  timeout_s=0.5)
                except Exception:  # connection lost, quorum gone, a record not JSON: try again next round
                    continue
                if version == last_version[queue] or record is None or version is None:
                    continue
                last_version[queue] = version
                now = time.time()
                try:
                    epoch = int(record["epoch"])
                except (KeyError, TypeError, ValueError):
                    continue
                batch = record.get("batch_id", record.get("batch", record.get("n")))
                with self._lock:
                    self.commits.append(CommitSample(now, version, epoch, float(record.get("committed_at", now)),
                                                     int(batch) if isinstance(batch, int) else None, queue))

    def _scrape(self) -> None:
        while not self._stop.wait(self._scrape_interval_s):
            now = time.time()
            sample: dict[str, tuple[bool, int]] = {}
            for replica in list(self._topology.replicas):
                if not replica.alive or replica.pid is None:
                    continue
                metrics = scrape(replica.port, timeout_s=1.0, host=replica.metrics_host)
                if not metrics:
                    continue
                with self._lock:
                    self.last_metrics[(replica.replica_id, replica.pid)] = metrics
                sample[replica.replica_id] = (metrics.get(IS_LEADER) == 1.0, int(metrics.get(LEADER_EPOCH, 0)))
            with self._lock:
                self.leader_samples.append((now, sample))
                committed, fenced = self._sum_totals()
                self.totals.append((now, committed, fenced))

    def _sum_totals(self) -> tuple[int, int]:
        committed = sum(int(m.get(_BATCHES_COMMITTED, 0)) for m in self.last_metrics.values())
        fenced = sum(int(m.get(_BATCHES_FENCED, 0)) for m in self.last_metrics.values())
        return committed, fenced

    def commits_snapshot(self) -> list[CommitSample]:
        with self._lock:
            return list(self.commits)

    def process_counts(self, replica_id: str, pid: int) -> tuple[int, int]:
        """(committed, fenced) last scraped from one process."""
        with self._lock:
            m = self.last_metrics.get((replica_id, pid), {})
        return int(m.get(_BATCHES_COMMITTED, 0)), int(m.get(_BATCHES_FENCED, 0))

    def process_metric(self, replica_id: str, pid: int, name: str) -> float:
        """One sample (by name, labels sorted as ``scrape`` writes them) last scraped from one process; 0 if none."""
        with self._lock:
            return self.last_metrics.get((replica_id, pid), {}).get(name, 0.0)

    def totals_at(self, at: float) -> tuple[int, int]:
        """(committed, fenced) over all processes as last seen at or before ``at``."""
        with self._lock:
            before = [t for t in self.totals if t[0] <= at]
        return (before[-1][1], before[-1][2]) if before else (0, 0)


def http_status(replica: ReplicaProcess, path: str) -> int:
    """The HTTP status of ``path`` on ``replica``'s metrics port; 0 when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{replica.metrics_host}:{replica.port}{path}", timeout=3.0) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0
