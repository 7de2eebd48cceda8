"""The compose topology as local processes: an embedded 3-server ensemble, N replicas, optionally a producer."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil
import structlog

from tenure.career.spark import worker_python
from tenure.service.local._ensemble import Ensemble, die_with_parent, free_base_port
from tenure.service.local._free_port import free_port
from tenure.service.local._spark_cluster import SparkCluster
from tenure.service.local._wait import wait_for
from tenure.service.ops import sample_key, scrape
from tenure.service.replica import (
    BATCHES,
    IS_LEADER,
    LEADER_EPOCH,
    RECORDS,
    SOURCE_BACKLOG_FILES,
    ZK_CONNECTED,
    ReplicaSpec,
    arm,
    pause_descendants,
    pause_tree,
    resume_tree,
    tree_pids,
)

__all__ = [
    "LOCAL_SPEC",
    "REPLICA_STOPPED",
    "TOPOLOGY_STOPPED",
    "ReplicaLaunch",
    "ReplicaProcess",
    "ReplicaStatus",
    "Topology",
]

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


@dataclass(frozen=True)
class ReplicaStatus:
    """One row of the status view, from a replica's /metrics."""

    replica_id: str
    pid: int | None
    up: bool
    leader: bool
    epoch: int
    batches: int
    records: int
    backlog: int
    zk_connected: bool


@dataclass(frozen=True)
class ReplicaLaunch:
    """How to launch one replica other than as a plain local process: a command prefix (for example
    ``ip netns exec NAME``) and the address its metrics listen on and are scraped at."""

    prefix: tuple[str, ...] = ()
    metrics_host: str = "127.0.0.1"


def _replica_preexec(hold_signals: bool) -> Callable[[], None]:
    """The child's set-up before exec: SIGTERM when its parent dies, and with ``hold_signals`` SIGTERM and SIGINT
    blocked (the mask survives exec). A replica of this release unblocks them once its handlers are in place
    (``ReplicaControl.install_signal_handlers``), so a stop sent while it still imports waits for them and ends
    in a clean exit 0 instead of the signal's default death. An earlier release (``module``) would never
    unblock them: it is launched without."""
    die = die_with_parent(signal.SIGTERM)

    def _set() -> None:
        die()
        if hold_signals:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})

    return _set


class ReplicaProcess:
    """One `tenure run` child process with its metrics port and log file, its command line made from ``spec``
    (:meth:`ReplicaSpec.command`) with ``zk``, its id, its metrics address and its fault file.

    A pause stops the whole process tree (the Python process and its Spark JVM), as a frozen VM or container
    would: ``signal(SIGSTOP)`` and ``signal(SIGCONT)`` mean :meth:`pause` and :meth:`resume`, and :meth:`stop`
    resumes the tree before it terminates or kills anything. With ``fault_file`` the replica runs with
    ``--fault-file`` (see ``tenure.service.replica._faults``).
    """

    def __init__(self, replica_id: str, port: int, spec: ReplicaSpec, log_path: Path,
                 env: dict[str, str] | None = None, *, zk: str, command_prefix: list[str] | None = None,
                 metrics_host: str = "127.0.0.1", fault_file: Path | None = None, module: str = "tenure",
                 cwd: Path | None = None) -> None:
        self.replica_id = replica_id
        self.port = port
        self.spec = spec
        self.log_path = log_path
        self.metrics_host = metrics_host
        self.fault_file = fault_file
        # ``module`` and ``cwd``: an earlier release's replica (tests/test_upgrade.py) runs ``service`` from its tree
        self._cwd = cwd
        self._cmd = [*(command_prefix or []), *spec.command(zk=zk, replica_id=replica_id, metrics_host=metrics_host,
                                                            metrics_port=port, fault_file=fault_file, module=module)]
        self._env = {**os.environ, **(env or {})}
        self._hold_signals = module == "tenure"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ReplicaProcess:
        with self.log_path.open("ab") as log:
            # Own session: a terminal's Ctrl-C reaches only `tenure up`, which stops replicas in order; if
            # `tenure up` itself dies, the kernel sends SIGTERM, so replicas still hand over.
            self.process = subprocess.Popen(self._cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self._cwd,
                                            stdin=subprocess.DEVNULL, env=self._env, start_new_session=True,
                                            preexec_fn=_replica_preexec(self._hold_signals))  # noqa: PLW1509
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the replica; SIGSTOP and SIGCONT pause and resume its whole process tree."""
        if not self.alive:
            return
        assert self.process is not None
        if sig == signal.SIGSTOP:
            self.pause()
        elif sig == signal.SIGCONT:
            self.resume()
        else:
            self.process.send_signal(sig)

    def pause(self) -> list[int]:
        """SIGSTOP the replica and every descendant (its Spark JVM); returns the pids stopped."""
        return pause_tree(self.process.pid) if self.alive and self.process is not None else []

    def freeze_spark(self) -> list[int]:
        """SIGSTOP the replica's Spark JVM and its Python workers, not the replica's own process (a JVM stuck in
        GC or a native call); :meth:`resume` thaws them. Returns the pids stopped."""
        return pause_descendants(self.process.pid) if self.alive and self.process is not None else []

    def resume(self) -> list[int]:
        """SIGCONT the replica and every descendant, whoever stopped them (a drill, or an injected fault)."""
        return resume_tree(self.process.pid) if self.alive and self.process is not None else []

    def stopped(self) -> bool:
        """True while the replica's own process is stopped (SIGSTOP; psutil status 'stopped')."""
        if not self.alive or self.process is None:
            return False
        try:
            return bool(psutil.Process(self.process.pid).status() == psutil.STATUS_STOPPED)
        except psutil.NoSuchProcess:
            return False

    def arm(self, point: str, action: str) -> Path:
        """Arm one fault on this replica's fault file (``POINT ACTION``, see ``tenure.service.replica._faults``)."""
        if self.fault_file is None:
            raise ValueError(f"{self.replica_id} runs without --fault-file: start the topology with "
                             "fault_files=True")
        arm(self.fault_file, point, action)
        return self.fault_file

    def disarm(self) -> None:
        """Remove a fault armed but never reached (before a restart, so the new process does not take it)."""
        if self.fault_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.fault_file.unlink()

    def metrics(self) -> dict[str, float]:
        return scrape(self.port, host=self.metrics_host) if self.alive else {}

    def status(self) -> ReplicaStatus:
        m = self.metrics()
        return ReplicaStatus(
            replica_id=self.replica_id,
            pid=self.pid if self.alive else None,
            up=bool(m),
            leader=m.get(IS_LEADER) == 1.0,
            epoch=int(m.get(LEADER_EPOCH, 0)),
            batches=int(m.get(sample_key(f"{BATCHES}_total", outcome="committed"), 0)),
            records=int(m.get(sample_key(f"{RECORDS}_total", outcome="written"), 0)),
            backlog=int(m.get(SOURCE_BACKLOG_FILES, 0)),
            zk_connected=m.get(ZK_CONNECTED) == 1.0,
        )

    def stop(self, timeout_s: float) -> int | None:
        """SIGTERM (the whole tree resumed first, in case a drill or a fault paused it), wait, then SIGKILL;
        returns the exit code. Descendants left behind (a JVM whose parent was killed) are killed too."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            children = _descendants(self.process.pid)
            resume_tree(self.process.pid)
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                resume_tree(self.process.pid)  # stopped again meanwhile (an armed pause): SIGKILL acts anyway
                self.process.kill()
                self.process.wait()
            _reap_orphans(children)
        return self.process.returncode

    def kill(self, timeout_s: float = 30.0) -> int | None:
        """SIGKILL at once (the tree resumed first), reap it, then kill any descendant it left behind."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            children = _descendants(self.process.pid)
            resume_tree(self.process.pid)
            self.process.kill()
            self.process.wait(timeout=timeout_s)
            _reap_orphans(children)
        return self.process.returncode


def _descendants(pid: int) -> list[psutil.Process]:
    procs = []
    for child in tree_pids(pid)[1:]:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(child))
    return procs


def _reap_orphans(children: list[psutil.Process], grace_s: float = 5.0) -> None:
    """Give a dead replica's descendants ``grace_s`` to exit on their own (a Spark JVM exits when its parent's
    pipe closes), then SIGCONT and SIGKILL whichever is left."""
    _gone, alive = psutil.wait_procs(children, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.resume()
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)


def _share_cluster(spec: ReplicaSpec, *, cores: int, replicas: int) -> ReplicaSpec:
    """Leave room on the embedded cluster for each follower's standby executors (``standby_executors``, one core
    each): the leader's share, ``spark.cores.max``, is what is left, unless ``spec``'s ``spark_conf`` says otherwise.
    Returns the ``spark_conf`` to add to ``spec``."""
    conf = dict(spec.value("spark_conf"))
    conf.setdefault("spark.cores.max", str(max(1, cores - (replicas - 1) * spec.value("standby_executors"))))
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
                 replica_env: dict[str, dict[str, str]] | None = None) -> None:
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
        old.stop(self.handover_timeout_s + 5)
        old.disarm()
        new = self._new_replica(replica_id).start()
        self.replicas[self.replicas.index(old)] = new
        return new

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
        """Run `tenure produce` into this topology's data root, logging under logs/producer.log."""
        with (self.logs / "producer.log").open("ab") as log:
            self.producer = subprocess.Popen(
                [sys.executable, "-m", "tenure", "produce", "--data-root", str(self.data_root), *args],
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
            code = replica.stop(self.handover_timeout_s + 10)
            _log.info(REPLICA_STOPPED, replica_id=replica.replica_id, exit_code=code)
        if self.spark is not None:
            self.spark.stop()
        self.ensemble.stop()
        _log.info(TOPOLOGY_STOPPED)
