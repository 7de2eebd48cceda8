"""The compose topology as local processes: an embedded 3-server ensemble, N replicas, optionally a producer."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import structlog

from tenure.career.spark import worker_python
from tenure.service.local._ensemble import Ensemble, die_with_parent, free_base_port
from tenure.service.local._free_port import free_port
from tenure.service.local._redis import RedisServer
from tenure.service.local._replica_process import ReplicaLaunch, ReplicaProcess, ReplicaStatus
from tenure.service.local._spark_cluster import SparkCluster
from tenure.service.local._wait import wait_for
from tenure.service.replica import ReplicaSpec, stop_budget_s

__all__ = ["LOCAL_SPEC", "REPLICA_STOPPED", "TOPOLOGY_STOPPED", "Topology"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
REPLICA_STOPPED: Final = "replica_stopped"
TOPOLOGY_STOPPED: Final = "topology_stopped"

#: each embedded worker's cores (and GB for executors): room for the leader's share and a standby executor of
#: one core for each follower (``--standby-executors``) on two workers with three replicas
SPARK_CORES_PER_WORKER: Final = 2

#: What a local topology (`tenure up`, `tenure demo`, the drills) changes of a replica's defaults: one machine, where
#: no network pause is expected, affords a shorter session and handover than production's (faster failover).
LOCAL_SPEC: Final = ReplicaSpec(session_timeout_s=6.0, handover_timeout_s=3.0)

_log = structlog.get_logger("tenure.up")


def _share_cluster(spec: ReplicaSpec, *, cores: int, replicas: int) -> ReplicaSpec:
    """Leave room on the embedded cluster for each follower's standby executors (``standby_executors``, one core
    each): the leaders' shares, ``spark.cores.max`` each, split what is left, unless ``spec``'s ``spark_conf`` says
    otherwise. A topic of N queues has up to min(N, replicas) leaders at once (a replica's one application serves
    every queue it leads), and only the replicas that lead nothing hold a standby application.
    Returns the ``spark_conf`` to add to ``spec``."""
    conf = dict(spec.value("spark_conf"))
    leaders = max(1, min(spec.value("queues") or 1, replicas))
    left = cores - (replicas - leaders) * spec.value("standby_executors")
    conf.setdefault("spark.cores.max", str(max(1, left // leaders)))
    return ReplicaSpec(spark_conf=conf)


class Topology:
    """The docker-compose topology as local processes, for `tenure up`, the demo and drills.

    Every replica runs with ``spec`` over :data:`LOCAL_SPEC` (its group, career, timings …); the topology fills in
    the data root (``<directory>/data``), the ensemble, each replica's id, port and fault file and, with
    ``spark_workers``, the embedded Spark cluster's master.

    Example::

        with Topology(Path(".tenure/up"), replicas=3, spec=ReplicaSpec(career="counter")) as topo:
            leader = topo.wait_for_leader(30)
            topo.replica(leader.replica_id).signal(signal.SIGKILL)
    """

    def __init__(self, directory: Path, *, replicas: int = 3, spec: ReplicaSpec | None = None,
                 zk_tick_ms: int = Ensemble.DEFAULT_TICK_MS, zk_servers: int = 3, zk_client_address: str = "127.0.0.1",
                 replica_launch: dict[str, ReplicaLaunch] | None = None, zk_port: int | None = None,
                 fault_files: bool = False, spark_workers: int = 0,
                 replica_env: dict[str, dict[str, str]] | None = None, redis: bool = False) -> None:
        if spec is not None and "data_root" in spec:
            raise ValueError(f"a topology's data root is {directory / 'data'}: leave data_root out of its spec")
        self.directory = directory
        #: with ``fault_files``, replica R runs with ``--fault-file <directory>/faults/R`` (see ``arm``)
        self.faults_dir = directory / "faults" if fault_files else None
        self.data_root = directory / "data"
        self.logs = directory / "logs"
        port = zk_port if zk_port is not None else free_base_port(zk_servers)
        self.ensemble = Ensemble(servers=zk_servers, port=port, directory=directory / "zk",
                                 tick_ms=zk_tick_ms, client_address=zk_client_address)
        #: with ``spark_workers``, an embedded Spark standalone cluster that the replicas' leader runs on
        self.spark = (SparkCluster(workers=spark_workers, port=free_base_port(spark_workers + 1, low=20000,
                                                                               high=30000),
                                   directory=directory / "spark", cores_per_worker=SPARK_CORES_PER_WORKER,
                                   worker_memory_mb=SPARK_CORES_PER_WORKER * 1024) if spark_workers else None)
        self.replica_launch = dict(replica_launch or {})
        #: extra environment of each replica by id (kept across restarts), e.g. a drill's hang file
        self.replica_env = {name: dict(env) for name, env in (replica_env or {}).items()}
        #: what every replica runs with (the ensemble and each replica's own settings aside)
        self.spec = LOCAL_SPEC | (spec or {}) | ReplicaSpec(data_root=self.data_root)
        if self.spark is not None:
            self.spec |= ReplicaSpec(spark_master=self.spark.master_url, spark_master_webui=self.spark.webui_url)
            self.spec |= _share_cluster(self.spec, cores=spark_workers * SPARK_CORES_PER_WORKER, replicas=replicas)
        self.group: str = self.spec.value("group")
        #: with ``redis``, an embedded Redis (append-only file, ``appendfsync always``) holding the group's topic,
        #: started before the replicas and stopped after them
        self.redis = RedisServer(port=free_port(), directory=directory / "redis") if redis else None
        if self.redis is not None:
            self.spec |= ReplicaSpec(queue_url=f"{self.redis.url}?prefix={self.group}")
        self.handover_timeout_s: float = self.spec.value("handover_timeout_s")
        self.replicas = [self._new_replica(f"replica-{i}") for i in range(1, replicas + 1)]
        self.producer: subprocess.Popen[bytes] | None = None

    def _new_replica(self, replica_id: str) -> ReplicaProcess:
        launch = self.replica_launch.get(replica_id, ReplicaLaunch())
        fault_file = self.faults_dir / replica_id if self.faults_dir is not None else None
        env = {"TENURE_LOG_LEVEL": "info", **self.replica_env.get(replica_id, {})}
        if self.spark is not None:  # the driver binds and advertises loopback; executors run this Python
            env |= {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": worker_python()}
        return ReplicaProcess(replica_id, free_port(), self.spec, self.logs / f"{replica_id}.log", env=env,
                              zk=self.ensemble.connect_string, command_prefix=list(launch.prefix),
                              metrics_host=launch.metrics_host, fault_file=fault_file)

    def __enter__(self) -> Topology:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __iter__(self) -> Iterator[ReplicaProcess]:
        return iter(self.replicas)

    def start(self) -> None:
        """Start the ensemble and the Spark cluster, if any, then every replica (they warm up and join in
        parallel)."""
        self.make_dirs()
        self.ensemble.start()
        if self.spark is not None:
            self.spark.start()
        if self.redis is not None:
            self.redis.start()
        for replica in self.replicas:
            replica.start()
        _log.info("topology_started", zk=self.ensemble.connect_string, replicas=len(self.replicas),
                  ports=[r.port for r in self.replicas], logs=str(self.logs))

    def make_dirs(self) -> None:
        """The logs folder, the data root and (with fault files) the faults folder."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self.data_root.mkdir(parents=True, exist_ok=True)
        if self.faults_dir is not None:
            self.faults_dir.mkdir(parents=True, exist_ok=True)

    def replica(self, replica_id: str) -> ReplicaProcess:
        return next(r for r in self.replicas if r.replica_id == replica_id)

    def restart(self, replica_id: str) -> ReplicaProcess:
        """Start a stopped or killed replica again under the same id (a new port and process)."""
        old = self.replica(replica_id)
        old.stop(self._stop_timeout_s)
        old.disarm()
        new = self._new_replica(replica_id).start()
        self.replicas[self.replicas.index(old)] = new
        return new

    @property
    def _stop_timeout_s(self) -> float:
        """How long a SIGTERMed replica is given before SIGKILL: its own budget when it leads every queue of the
        topic it may (``stop_budget_s``), and 5 s more to exit."""
        queues = self.spec.value("queues") or 1
        cap = self.spec.value("max_queues_led")
        return stop_budget_s(self.handover_timeout_s, min(queues, cap) if cap else queues) + 5

    def statuses(self) -> list[ReplicaStatus]:
        return [r.status() for r in self.replicas]

    def leaders(self) -> list[ReplicaStatus]:
        return [s for s in self.statuses() if s.leader]

    def wait_for(self, predicate: Callable[[], object], timeout_s: float, what: str,
                 interval_s: float = 0.1) -> None:
        """Poll ``predicate`` until truthy; raise TimeoutError naming ``what`` at the deadline (``wait_for``)."""
        wait_for(predicate, timeout_s, what, interval_s)  # the drills' pace: 0.1 s unless told

    def wait_for_leader(self, timeout_s: float) -> ReplicaStatus:
        """Block until exactly one replica leads; return its status."""
        found: list[ReplicaStatus] = []

        def one() -> bool:
            found[:] = self.leaders()
            return len(found) == 1

        self.wait_for(one, timeout_s, "exactly one leader")
        return found[0]

    def start_producer(self, args: list[str]) -> subprocess.Popen[bytes]:
        """Run `tenure produce` into this topology's data root (its Redis topic, with a ``queue_url`` in its spec),
        logging under logs/producer.log."""
        queue_url = self.spec.get("queue_url")
        target = ["--queue-url", str(queue_url)] if queue_url else ["--data-root", str(self.data_root)]
        with (self.logs / "producer.log").open("ab") as log:
            self.producer = subprocess.Popen(
                [sys.executable, "-m", "tenure", "produce", *target, *args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM))  # noqa: PLW1509 - prctl only
        return self.producer

    def stop(self) -> None:
        """Stop the producer, then the followers, then the leader (one handover at most), then the Spark cluster,
        then ZooKeeper."""
        if self.producer is not None and self.producer.poll() is None:
            self.producer.terminate()
            try:
                self.producer.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.producer.kill()
                self.producer.wait()
        statuses = {s.replica_id: s for s in self.statuses()}
        ordered = sorted(self.replicas, key=lambda r: statuses[r.replica_id].leader)
        for replica in ordered:
            code = replica.stop(self._stop_timeout_s)
            _log.info(REPLICA_STOPPED, replica_id=replica.replica_id, exit_code=code)
        if self.spark is not None:
            self.spark.stop()
        if self.redis is not None:
            self.redis.stop()
        self.ensemble.stop()
        _log.info(TOPOLOGY_STOPPED)
