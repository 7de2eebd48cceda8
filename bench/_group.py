"""A group of Spark replicas over a topic of N queues, for the scaling probes: its topology, when it is balanced,
its commits per queue (from ZooKeeper and from the replicas' logs), and where its CPU goes, per replica."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from bench._cluster import HANDOVER_TIMEOUT_S, SESSION_TIMEOUT_S, ZK_TICK_MS, RecordPoller
from tenure.career.spark import BATCH_COMMITTED
from tenure.election import GroupPaths
from tenure.service.local import Topology, wait_for
from tenure.service.replica import ReplicaSpec

__all__ = ["GROUP", "QueueCommit", "QueueTimeline", "ReplicaCpu", "balanced", "group_topology", "logged_commits",
           "ready"]

GROUP = "bench"
_BALANCE_SETTLE_S = 2.0  # the probes start every replica at once: no restart to wait out
#: Calls into a JVM and the control loop's liveness: the defaults (10 s, 30 s) with room for a machine whose load
#: average is ten times its cores (the other work on this one), where a replica otherwise turns unhealthy while
#: warming up and never gets ready; neither bounds a handover or a crash's failover
_PROBE_TIMEOUT_S, _LIVENESS_TIMEOUT_S = 30.0, 90.0


def group_topology(directory: Path, *, queues: int, replicas: int, spark_workers: int = 0,
                   spec: ReplicaSpec | None = None) -> Topology:
    """A topology of ``replicas`` warm Spark replicas of a group of ``queues`` on a one-server ensemble (the
    bench's session and handover timeouts; ``spark_workers``: on the embedded standalone cluster)."""
    base = ReplicaSpec(group=GROUP, career="spark", standby="warm", session_timeout_s=SESSION_TIMEOUT_S,
                       handover_timeout_s=HANDOVER_TIMEOUT_S, queues=queues, balance_settle_s=_BALANCE_SETTLE_S,
                       probe_timeout_s=_PROBE_TIMEOUT_S, liveness_timeout_s=_LIVENESS_TIMEOUT_S)
    return Topology(directory, replicas=replicas, spec=base | (spec or {}), zk_tick_ms=ZK_TICK_MS, zk_servers=1,
                    spark_workers=spark_workers)


def ready(topology: Topology, replica_id: str) -> bool:
    """The replica runs and its ``/readyz`` answers 200 (in every line, its standby warm)."""
    replica = topology.replica(replica_id)
    if not replica.alive:
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{replica.port}/readyz", timeout=1.0) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def balanced(topology: Topology, queues: int) -> dict[str, tuple[int, ...]] | None:
    """Who leads which queues, when every replica is ready, every queue has exactly one leader and the replicas'
    counts differ by one at most; else None."""
    if not all(ready(topology, r.replica_id) for r in topology):
        return None
    led = {s.replica_id: s.led for s in topology.statuses()}
    every = sorted(q for queues_led in led.values() for q in queues_led)
    counts = [len(v) for v in led.values()]
    return led if every == list(range(queues)) and max(counts) - min(counts) <= 1 else None


@dataclass(frozen=True)
class QueueCommit:
    """One version of a queue's commit record as the poller saw it."""

    queue: int
    batch_id: int  # -1: a career whose record has none (the counter's)
    epoch: int
    committed_at: float  # the committer's wall clock (same machine)
    replica_id: str


class QueueTimeline(RecordPoller):
    """Polls every queue's commit record of the group every ``interval_s`` on its own session and keeps every new
    version: the commits a moved queue's gap is measured from (the committer's ``committed_at``, so the poll's
    pace bounds only how soon a commit is seen, not the gap)."""

    def __init__(self, hosts: str, queues: int, interval_s: float = 0.05) -> None:
        self._commits: list[QueueCommit] = []
        super().__init__(hosts, [GroupPaths(GROUP, q, queues).commit for q in range(queues)], interval_s,
                         "queue-timeline")

    def _seen(self, index: int, record: dict[str, Any]) -> None:
        self._commits.append(QueueCommit(queue=index, batch_id=int(record.get("batch_id", -1)),
                                         epoch=int(record["epoch"]), committed_at=float(record["committed_at"]),
                                         replica_id=str(record.get("replica_id", ""))))

    def of(self, queue: int) -> list[QueueCommit]:
        with self._lock:
            return [c for c in self._commits if c.queue == queue]

    def latest(self, queue: int) -> QueueCommit | None:
        commits = self.of(queue)
        return commits[-1] if commits else None

    def gap(self, queue: int, old_epoch: int, timeout_s: float) -> tuple[QueueCommit, float]:
        """Wait for the queue's first commit of an epoch after ``old_epoch``; return it and the gap from the last
        commit of ``old_epoch`` to it (seconds)."""
        found: list[QueueCommit] = []

        def moved() -> bool:
            found[:] = [c for c in self.of(queue) if c.epoch > old_epoch]
            return bool(found)

        wait_for(moved, timeout_s, f"queue {queue}'s first commit after epoch {old_epoch}", interval_s=0.1)
        last_old = max(c.committed_at for c in self.of(queue) if c.epoch == old_epoch)
        return found[0], found[0].committed_at - last_old


def logged_commits(log: Path) -> list[dict[str, Any]]:
    """A replica's committed batches with records (warm-up left out) from its ``batch_committed`` events: queue,
    batch, records written, when it was logged, and its steps' seconds."""
    out = []
    with contextlib.suppress(FileNotFoundError):
        for line in log.read_text(errors="replace").splitlines():
            if not (line.startswith("{") and f'"{BATCH_COMMITTED}"' in line):
                continue
            with contextlib.suppress(ValueError, KeyError):
                event = json.loads(line)
                if event.get("warmup") or not event.get("written"):
                    continue
                at = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
                out.append({"queue": int(event.get("queue", 0)), "batch": int(event["batch"]),
                            "written": int(event["written"]), "at": at,
                            **{k: float(event[k]) for k in ("batch_s", "commit_s", "delta_s", "read_s")
                               if k in event}})
    return out


class ReplicaCpu:
    """CPU seconds of each replica's process tree between :meth:`start` and :meth:`stop`: its Python process
    (``driver``), its JVM (``jvm``) and the rest of its descendants (``workers``: Spark's Python workers)."""

    def __init__(self, topology: Topology) -> None:
        self._topology = topology
        self._start: dict[int, tuple[str, str, float, float]] = {}
        self._started = 0.0

    @staticmethod
    def _tree(root: int) -> Iterator[tuple[str, psutil.Process]]:
        with contextlib.suppress(psutil.Error):
            parent = psutil.Process(root)
            yield "driver", parent
            for child in parent.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    yield ("jvm" if child.name() == "java" else "workers"), child

    def _snapshot(self) -> dict[int, tuple[str, str, float, float]]:
        """pid → (replica, kind, create time, CPU seconds with reaped children) of every replica's tree."""
        out: dict[int, tuple[str, str, float, float]] = {}
        for replica in self._topology:
            if replica.pid is None or not replica.alive:
                continue
            for kind, proc in self._tree(replica.pid):
                with contextlib.suppress(psutil.Error):
                    times = proc.cpu_times()
                    out[proc.pid] = (replica.replica_id, kind, proc.create_time(),
                                     times.user + times.system + times.children_user + times.children_system)
        return out

    def start(self) -> None:
        self._start = self._snapshot()
        self._started = time.monotonic()

    def stop(self) -> dict[str, dict[str, float]]:
        """Per replica, cores used (CPU seconds / wall seconds) by ``driver``, ``jvm``, ``workers`` and ``all``
        (a process started meanwhile counts from its start)."""
        end, wall = self._snapshot(), time.monotonic() - self._started
        spent = {r.replica_id: dict.fromkeys(("driver", "jvm", "workers"), 0.0) for r in self._topology}
        for pid, (replica_id, kind, created, cpu) in end.items():
            before = self._start.get(pid)
            spent[replica_id][kind] += max(cpu - (before[3] if before is not None and before[2] == created else 0.0),
                                           0.0)
        return {replica: {**{k: round(v / wall, 3) for k, v in kinds.items()},
                          "all": round(sum(kinds.values()) / wall, 3)} for replica, kinds in spent.items()}
