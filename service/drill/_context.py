"""One drill's context (``Drill``): its topology, monitor and fault markers, and the steps scenarios and chaos
build on (start, wait, mark, read the commits and logs, settle)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from tenure.career.drills import HANG_ENV
from tenure.service.drill._measures import Measurements
from tenure.service.drill._monitor import (
    FAULT_INJECTED,
    FOLLOWING,
    JOINED,
    RUNNER_STATE,
    CommitSample,
    LogEvent,
    Monitor,
    http_status,
    read_events,
)
from tenure.service.drill._settings import DrillSettings
from tenure.service.local import NetNamespace, ReplicaLaunch, ReplicaProcess, Topology, free_base_port
from tenure.service.ops import by_queue, verify
from tenure.service.replica import IS_LEADER, LEADER_EPOCH, ReplicaSpec

__all__ = ["Drill", "Marker", "is_ready"]

_log = structlog.get_logger("tenure.drill")

_GROUP = "drill"
_REPLICAS = 3  # named replica-1 … replica-3 by the topology


@dataclass(frozen=True)
class Marker:
    """A fault or heal on the timeline."""

    at: float
    kind: str  # "fault" or "heal"
    label: str


def is_ready(replica: ReplicaProcess) -> bool:
    """``replica`` answers /readyz with 200."""
    return http_status(replica, "/readyz") == 200


def _is_leader(replica: ReplicaProcess) -> bool:
    return replica.metrics().get(IS_LEADER) == 1.0


class Drill:
    """One scenario run: topology, namespaces, monitor, markers, and the helpers scenarios use.

    ``ns`` puts ``replica-1`` in a network namespace (started first, so it leads); ``namespaces`` instead puts
    each named replica in its own (the chaos drill: whichever replica leads can be cut off). The ensemble's
    client port listens on the host end of ``ns`` (or of the first of ``namespaces``). Every replica runs with
    a fault file (``Topology(fault_files=True)``), so a scenario can arm a fault at a named point.
    ``replica_spec`` is a scenario's own settings, over the drill's; with ``hang_files`` each replica
    also runs with a hang file of its own (``hang_file``, named by ``tenure.career.drills.HANG_ENV``): a row function
    ``tenure.career.drills:hang_when_told`` hangs in the replica whose file the scenario writes.

    Example::

        drill = Drill("crash", DrillSettings.make(career="counter", records=None, short=True), path, None)
        drill.prepare()
        leader = drill.leader()
        drill.mark("fault", f"SIGKILL {leader.replica_id}")
    """

    def __init__(self, name: str, settings: DrillSettings, directory: Path, ns: NetNamespace | None,
                 *, namespaces: dict[str, NetNamespace] | None = None, replica_spec: ReplicaSpec | None = None,
                 hang_files: bool = False) -> None:
        self.name = name
        self.settings = settings
        self.ns = ns
        self.namespaces = dict(namespaces) if namespaces else ({"replica-1": ns} if ns else {})
        zk_side = ns or next(iter(self.namespaces.values()), None)
        # Inside a namespace only loopback and the veth exist: keep Spark's driver on loopback whatever the
        # host name resolves to (`env` execs, so the replica keeps the pid the drill signals).
        launch = {rid: ReplicaLaunch((*space.exec_prefix, "env", "SPARK_LOCAL_IP=127.0.0.1"), space.ns_address)
                  for rid, space in self.namespaces.items()} or None
        self.hang_dir = directory.absolute() / "hang"
        ids = [f"replica-{i}" for i in range(1, _REPLICAS + 1)]
        env = {rid: {HANG_ENV: str(self.hang_file(rid))} for rid in ids} if hang_files else None
        spec = settings.replica_spec() | ReplicaSpec(group=_GROUP) | (replica_spec or {})
        self.topology = Topology(directory, replicas=_REPLICAS, spec=spec, zk_tick_ms=settings.zk_tick_ms,
                                 zk_client_address=zk_side.host_address if zk_side else "127.0.0.1",
                                 replica_launch=launch, zk_port=free_base_port(), fault_files=True,
                                 spark_workers=settings.spark_workers, replica_env=env)
        self.monitor: Monitor | None = None
        self.markers: list[Marker] = []
        self.m = Measurements(scenario=name)
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.producer_started = False
        self.restarts: list[tuple[float, str]] = []
        self.killed: dict[str, float] = {}
        self.old_pid: int | None = None
        self._drained_checked = 0.0

    # 1. Start: ensemble, Spark cluster (if any), replicas (the namespaced one first, so it leads), monitor,
    # producer, some commits.
    def start_topology(self, *, all_at_once: bool = False) -> None:
        topo = self.topology
        topo.make_dirs()
        topo.ensemble.start()
        if topo.spark is not None:
            started = time.monotonic()
            topo.spark.start()
            self.m.cluster_start_s = time.monotonic() - started
        self.monitor = Monitor(topo)
        self.monitor.start()
        if self.ns is not None and not all_at_once:
            first = topo.replica("replica-1").start()
            self.wait(lambda: _is_leader(first), self.settings.startup_timeout_s, "replica-1 (namespaced) to lead")
            for replica in topo.replicas[1:]:
                replica.start()
        else:
            if all_at_once:
                self.mark("fault", "all replicas start")
            for replica in topo.replicas:
                replica.start()

    def wait_ready(self) -> None:
        self.wait(lambda: all(is_ready(r) for r in self.topology.replicas),
                  self.settings.startup_timeout_s, "every replica ready (/readyz 200)")
        self.wait_one_leader_each(self.settings.startup_timeout_s)

    def start_work(self, *, seed: int = 8) -> None:
        """With Spark, start the producer; then wait for a few commits so the fault hits a working leader."""
        if self.settings.career == "spark":
            # On a topic of several queues the producer routes each record by its key.
            self.topology.start_producer(["--records", str(self.settings.records), "--keys", "50",
                                          "--rate", f"{self.settings.rate:g}", "--duplicates", "0.02",
                                          "--bad", "0.005", "--seed", str(seed),
                                          *(["--queues", str(self.queues)] if self.queues > 1 else [])])
            self.producer_started = True
        t0 = time.time()
        self.wait(lambda: self.commits_between(t0, math.inf) >= 3, self.settings.startup_timeout_s,
                  "three commits before the fault")

    def prepare(self) -> None:
        self.start_topology()
        self.wait_ready()
        self.start_work()

    # 2. Helpers for scenarios.
    def mark(self, kind: str, label: str, *, at: float | None = None) -> float:
        at = time.time() if at is None else at
        self.markers.append(Marker(at, kind, label))
        if kind == "fault" and self.m.fault_at is None:
            self.m.fault_at = at
        if kind == "heal":
            self.m.heal_at = at
        _log.info("drill_marker", scenario=self.name, kind=kind, label=label)
        return at

    def wait(self, predicate: Callable[[], object], timeout_s: float, what: str) -> None:
        self.topology.wait_for(predicate, timeout_s, what, interval_s=0.05)

    def hang_file(self, replica_id: str) -> Path:
        """The hang file of ``replica_id`` (``hang_files``): while it exists, that replica's row function hangs,
        as its content says (``tenure.career.drills.HANG_ENV``)."""
        return self.hang_dir / replica_id

    def leader(self) -> ReplicaProcess:
        status = self.topology.wait_for_leader(self.settings.startup_timeout_s)
        self.m.old_leader, self.m.old_epoch = status.replica_id, status.epoch
        replica = self.topology.replica(status.replica_id)
        self.old_pid = replica.pid
        return replica

    @property
    def queues(self) -> int:
        """The topic's number of queues: 1 unless the drill's ``replica_spec`` names more."""
        queues: int = self.topology.spec.value("queues") or 1
        return queues

    def queue_leaders(self) -> dict[int, list[tuple[str, int]]]:
        """Each queue's leaders, as the replicas' /metrics say (``tenure_is_leader`` by queue): (replica id, its
        epoch on that queue) — one scrape of each replica, so a replica's queues and epochs are of one moment."""
        found: dict[int, list[tuple[str, int]]] = {q: [] for q in range(self.queues)}
        for replica in self.topology.replicas:
            metrics = replica.metrics()
            epochs = by_queue(metrics, LEADER_EPOCH)
            for queue, leading in by_queue(metrics, IS_LEADER).items():
                if leading == 1.0 and queue in found:
                    found[queue].append((replica.replica_id, int(epochs.get(queue, 0))))
        return found

    def one_leader_each(self) -> dict[int, tuple[str, int]] | None:
        """{queue: (its one leader, that leader's epoch)} once every queue has exactly one leader; None before."""
        leaders = self.queue_leaders()
        return {q: found[0] for q, found in leaders.items()} if all(len(f) == 1 for f in leaders.values()) else None

    def wait_one_leader_each(self, timeout_s: float) -> dict[int, tuple[str, int]]:
        """Wait until every queue has exactly one leader; returns them as ``one_leader_each`` does."""
        found: list[dict[int, tuple[str, int]]] = []

        def one_each() -> bool:
            leaders = self.one_leader_each()
            if leaders is not None:
                found.append(leaders)
            return leaders is not None

        self.wait(one_each, timeout_s, "exactly one leader" + (" of each queue" if self.queues > 1 else ""))
        return found[-1]

    def commits(self) -> list[CommitSample]:
        return self.monitor.commits_snapshot() if self.monitor is not None else []

    def commits_between(self, start: float, end: float) -> int:
        """Commits (by record version) whose change was observed in [start, end)."""
        samples = self.commits()
        inside = [c for c in samples if start <= c.observed_at < end]
        if not inside:
            return 0
        before = [c for c in samples if c.observed_at < start]
        base = before[-1].version if before else inside[0].version - 1
        return inside[-1].version - base

    def successor_commit(self) -> CommitSample | None:
        old = self.m.old_epoch or 0
        return next((c for c in self.commits() if c.epoch > old and c.observed_at >= (self.m.fault_at or 0)), None)

    def wait_successor_commit(self, timeout_s: float) -> None:
        self.wait(lambda: self.successor_commit() is not None, timeout_s, "a successor's first commit")

    def wait_more_commits(self, count: int = 3) -> None:
        """Wait for ``count`` more commits, or (Spark) until there is nothing left to commit."""
        t0 = time.time()
        self.wait(lambda: self.commits_between(t0, math.inf) >= count or self.drained(), self.settings.work_timeout_s,
                  f"{count} more commits")

    def drained(self) -> bool:
        """With a producer: it has finished and every message of the queue (of every queue of a topic) is in the
        output, none waiting in a file not read yet (checked at most every 2 s, since it reads the whole output).
        Without one there is always more to commit: False."""
        producer = self.topology.producer
        if not self.producer_started or producer is None or producer.poll() is None:
            return False
        if time.monotonic() - self._drained_checked < 2.0:
            return False
        self._drained_checked = time.monotonic()
        try:
            report = verify(self.topology.data_root)
        except Exception:  # a part file being renamed into place: ask again later
            return False
        return report.unaccounted == 0 and report.unquarantined == 0

    def events(self) -> list[LogEvent]:
        out: list[LogEvent] = []
        for replica in self.topology.replicas:
            out.extend(read_events(replica.log_path, replica.replica_id))
        return sorted(out, key=lambda e: e.at)

    def stepped_down(self, replica_id: str, since: float) -> bool:
        """The replica follows and has (re)joined the election since ``since``: it may have stepped down earlier,
        while still cut off (a commit whose outcome was unknown), and rejoin only once it reaches ZooKeeper."""
        fault = self.m.fault_at if self.m.fault_at is not None else since
        events = [e for e in self.events() if e.replica_id == replica_id]
        return any(e.event == RUNNER_STATE and e.fields.get("new") == FOLLOWING and e.at >= fault for e in events) \
            and any(e.event == JOINED and e.at >= since - 0.5 for e in events)

    def injected(self, replica: ReplicaProcess, point: str, since: float) -> LogEvent | None:
        """The ``fault_injected`` event of ``replica``'s current process at ``point`` since ``since``, if any."""
        return next((e for e in read_events(replica.log_path, replica.replica_id)
                     if e.event == FAULT_INJECTED and e.fields.get("point") == point and e.at >= since - 1.0
                     and e.fields.get("pid") == replica.pid), None)

    def wait_paused_at(self, replica: ReplicaProcess, point: str, since: float, timeout_s: float) -> LogEvent:
        """Wait until ``replica`` logged ``fault_injected`` at ``point`` and its process is stopped (psutil
        status 'stopped'): the whole tree paused itself there. Returns the event (its time is the pause)."""
        found: list[LogEvent] = []

        def paused() -> bool:
            event = self.injected(replica, point, since)
            if event is not None and replica.stopped():
                found.append(event)
                return True
            return False

        self.wait(paused, timeout_s, f"{replica.replica_id} to pause itself at {point}")
        return found[0]

    # 3. Settle: the producer done and the queue drained (Spark), or a few more commits (counter).
    def settle(self) -> None:
        topo = self.topology
        if self.producer_started and topo.producer is not None:
            producer = topo.producer
            self.wait(lambda: producer.poll() is not None, self.settings.settle_timeout_s, "the producer to finish")
            self.wait(self.drained, self.settings.settle_timeout_s, "the queue to drain")
        else:
            self.wait_more_commits(3)
