"""A real Spark standalone cluster (a master and its workers) launched from the jars inside the PySpark wheel.

Longer than the other modules: it is the one place that knows the daemons' ports, folders and process handling,
which starting the cluster, recovering its master, restarting one daemon and stopping them all share.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psutil
import structlog

from tenure.errors import TenureError
from tenure.service.local._ensemble import EnsembleError, _port_free, die_with_parent, find_java
from tenure.service.local._wait import watch_until_stopped

__all__ = ["SPARK_PROCESS_DIED", "SparkCluster", "SparkClusterError", "SparkDaemon", "SparkWorker"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
SPARK_PROCESS_DIED: Final = "spark_process_died"

_log = structlog.get_logger("tenure.spark")

_WEBUI_OFFSET = 1000  # master web UI = port + 1000; worker i: RPC port + i, web UI port + 1000 + i
#: How long ``start`` waits for the master and every worker: the machine's deadline, not a claim about Spark. On a
#: starved CI host one master's JVM took 48 s to serve, and the workers had 6 s left of the 90 s it once was.
_START_TIMEOUT_S = 240.0
_HEAP_MB = 256  # master and worker daemons; executors get the application's spark.executor.memory
_MIN_WORKER_MEMORY_MB = 512  # an executor needs about 450 MB (300 MB reserved × 1.5)
_GRACE_S = 15.0  # SIGTERM → SIGKILL
_POLL_S = 0.2

# What Spark's launcher (`spark-class`, org.apache.spark.launcher.JavaModuleOptions) puts on every JVM it
# starts; launching java directly saves the launcher's own JVM, so these are repeated here. Unknown ones are
# ignored by older JVMs thanks to the first option.
_JAVA_MODULE_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    "--add-modules=jdk.incubator.vector",
    *(f"--add-opens={module}=ALL-UNNAMED" for module in (
        "java.base/java.lang", "java.base/java.lang.invoke", "java.base/java.lang.reflect", "java.base/java.io",
        "java.base/java.net", "java.base/java.nio", "java.base/java.util", "java.base/java.util.concurrent",
        "java.base/java.util.concurrent.atomic", "java.base/jdk.internal.ref", "java.base/sun.nio.ch",
        "java.base/sun.nio.cs", "java.base/sun.security.action", "java.base/sun.util.calendar",
        "java.security.jgss/sun.security.krb5")),
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.type=pooled",
    "-Dio.netty.handler.ssl.defaultEndpointVerificationAlgorithm=NONE",
    "--sun-misc-unsafe-memory-access=allow",
    "--enable-native-access=ALL-UNNAMED",
)
_PAUSE_SIGNALS = (signal.SIGSTOP, signal.SIGCONT, signal.SIGTSTP)


class SparkClusterError(TenureError):
    """The embedded Spark cluster cannot start or serve; the message names the problem and the fix."""


def _find_spark_home() -> tuple[Path, str]:
    """The PySpark wheel's folder (SPARK_HOME for the daemons) and the Scala version of its jars."""
    try:
        import pyspark
    except ImportError as exc:
        raise SparkClusterError("pyspark is not installed, so there is no Spark to run: pip install 'pyspark>=4'") \
            from exc
    home = Path(pyspark.__file__).resolve().parent
    cores = sorted((home / "jars").glob("spark-core_*.jar"))
    match = re.match(r"spark-core_(\d+\.\d+)-", cores[0].name) if cores else None
    if not match:
        raise SparkClusterError(f"no spark-core_*.jar in {home / 'jars'}: reinstall pyspark 4.x")
    return home, match.group(1)


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for ``procs`` (not our children) to exit; returns those still running.

    A zombie counts as gone: its parent (the worker) is dead, and reaping it is init's job, which not every
    container's init does.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        left = []
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(proc)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@dataclass
class SparkDaemon:
    """One JVM of the cluster: the master (``name`` ``master``) or a worker (``worker<N>``, a ``SparkWorker``).

    ``port`` is its RPC port, ``webui_port`` its web UI's; its log is ``directory/<kind>.log``.
    """

    name: str
    port: int
    webui_port: int
    directory: Path
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: True once ``kill_*`` or ``stop`` ended the process, so that ``dead()`` does not report it
    ended_by_us: bool = field(default=False, repr=False)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def log(self) -> Path:
        return self.directory / ("master.log" if self.name == "master" else "worker.log")


@dataclass
class SparkWorker(SparkDaemon):
    """One worker: a JVM that registers at the master and launches the applications' executors as its children.

    Its executors' logs are under ``directory/work/<app id>/<executor id>/``.
    """


class SparkCluster:
    """A Spark standalone cluster on this machine: one master and ``workers`` workers, run from the PySpark jars.

    Ports: the master listens on ``port`` and serves its web UI (and the JSON that ``state`` reads) on
    ``webui_port`` (default ``port+1000``); worker N listens on ``port+N`` and serves its web UI on
    ``webui_port+N``. Everything binds ``host`` (loopback by default); the master's REST submission server is
    off. The master persists its workers and applications under ``directory/master/recovery`` (Spark's
    FILESYSTEM recovery), so a master killed and started again takes back the running workers and applications.
    Logs: ``directory/master/master.log`` and ``directory/worker<N>/worker.log``.

    A worker that exits is dropped by the master at once (its connection closes); one that stops answering
    (SIGSTOP, a partition) after ``worker_timeout_s`` (Spark's ``spark.worker.timeout``, default 60 s). A lower
    value finds a hung worker sooner, but a worker starved of CPU for that long is dropped too. A restarted master
    stays RECOVERING until every worker and application it knew has answered, or ``worker_timeout_s``.

    Example::

        with SparkCluster(workers=2, port=7077, directory=Path("/tmp/spark")) as cluster:
            print(cluster.master_url)          # spark://127.0.0.1:7077
            cluster.kill_worker("worker1")     # SIGKILL the worker and its executors
            cluster.start_worker("worker1")    # back, registered again
    """

    def __init__(self, *, workers: int = 2, port: int = 7077, directory: Path, cores_per_worker: int = 1,
                 worker_memory_mb: int = 1024, webui_port: int | None = None, host: str = "127.0.0.1",
                 worker_timeout_s: int = 60) -> None:
        if workers < 1:
            raise SparkClusterError(f"workers={workers} is too few: a cluster needs at least 1 worker")
        webui = webui_port if webui_port is not None else port + _WEBUI_OFFSET
        for what, first in (("port", port), ("webui_port", webui)):
            if not 1024 <= first <= 65535 - workers:
                raise SparkClusterError(f"{what}={first} is out of range: pick a port between 1024 and "
                                        f"{65535 - workers} (workers use the {workers} ports after it)")
        if webui_port is not None and abs(webui - port) <= workers:
            raise SparkClusterError(f"webui_port={webui} overlaps the RPC ports {port}–{port + workers}: "
                                    "choose one at least workers+1 away")
        if cores_per_worker < 1:
            raise SparkClusterError(f"cores_per_worker={cores_per_worker} is below 1: give each worker a core")
        if worker_memory_mb < _MIN_WORKER_MEMORY_MB:
            raise SparkClusterError(f"worker_memory_mb={worker_memory_mb} is below {_MIN_WORKER_MEMORY_MB}: an "
                                    "executor needs about 450 MB, raise it")
        if worker_timeout_s < 4:
            raise SparkClusterError(f"worker_timeout_s={worker_timeout_s} is below 4: a worker starved of CPU "
                                    "that briefly would be dropped; raise it")
        self.worker_timeout_s = worker_timeout_s
        self.directory = Path(directory).resolve()
        self.host = host
        self.cores_per_worker = cores_per_worker
        self.worker_memory_mb = worker_memory_mb
        self.master = SparkDaemon("master", port, webui, self.directory / "master", host=host)
        self.workers = [SparkWorker(f"worker{i}", port + i, webui + i, self.directory / f"worker{i}", host=host)
                        for i in range(1, workers + 1)]
        self._java: str | None = None
        self._spark_home: Path | None = None
        self._scala_version = ""
        # urllib follows http_proxy: the master's JSON is on loopback, never through a proxy.
        self._http = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{self.host}:{self.master.webui_port}"

    @property
    def recovery_directory(self) -> Path:
        return self.master.directory / "recovery"

    def __enter__(self) -> SparkCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __iter__(self) -> Iterator[SparkWorker]:
        return iter(self.workers)

    def worker(self, name_or_number: str | int | SparkWorker) -> SparkWorker:
        """A worker by name (``"worker2"``) or number (``2``, as in its name; numbers start at 1)."""
        if isinstance(name_or_number, SparkWorker):
            return name_or_number
        for w in self.workers:
            if name_or_number in (w.name, int(w.name.removeprefix("worker"))):
                return w
        raise SparkClusterError(f"no worker {name_or_number!r} in this cluster (have "
                                f"{[w.name for w in self.workers]}; numbers start at 1)")

    # 1. Preflight: java, jars, ports and directory, so every error is one clear line before any launch.
    def _preflight(self, daemons: list[SparkDaemon] | None = None) -> None:
        if self._java is None:
            try:
                self._java = find_java()
            except EnsembleError as exc:
                raise SparkClusterError(str(exc)) from exc
        if self._spark_home is None:
            self._spark_home, self._scala_version = _find_spark_home()
        for d in daemons if daemons is not None else [self.master, *self.workers]:
            for p, what in ((d.port, d.name), (d.webui_port, f"{d.name}'s web UI")):
                if not _port_free(p, d.host):
                    raise SparkClusterError(f"port {p} (for {what}) is already in use: stop what holds it or "
                                            "choose another --port")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            probe = self.directory / ".write-probe"
            probe.write_text("ok")
            probe.unlink()
        except OSError as exc:
            raise SparkClusterError(f"cannot write to {self.directory} ({exc.strerror}): choose a writable --dir") \
                from exc

    def start(self, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Launch the master, then every worker; return once all workers are registered ALIVE at the master.

        A fresh cluster: recovery state left by an earlier run in the same directory is discarded (its workers
        and applications are gone, and the master would wait ``worker_timeout_s`` for them). On failure every process
        started is stopped again and ``SparkClusterError`` names the problem and the log to read.
        """
        if any(d.running for d in (self.master, *self.workers)):
            raise SparkClusterError(f"the cluster under {self.directory} is already running: stop() it first")
        started = time.monotonic()
        self._preflight()
        shutil.rmtree(self.recovery_directory, ignore_errors=True)
        try:
            # The master first: a worker that finds no master retries only after 5–15 s.
            self._launch(self.master)
            self._wait(lambda: self._status() == "ALIVE", [self.master], timeout_s, "the master to serve")
            for w in self.workers:
                self._launch(w)
            self.wait_workers(timeout_s=max(1.0, timeout_s - (time.monotonic() - started)))
        except BaseException:
            self.stop()
            raise
        _log.info("spark_cluster_ready", master=self.master_url, webui=self.webui_url, workers=len(self.workers),
                  seconds=round(time.monotonic() - started, 1))

    def _command(self, d: SparkDaemon) -> list[str]:
        assert self._java, "the preflight runs first"
        common = [
            # C1 only: the daemons do little work, and this halves their start-up on a small machine.
            self._java, f"-Xmx{_HEAP_MB}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *_JAVA_MODULE_OPTIONS,
            "-cp", f"{self._spark_home}/jars/*",
            # Spark moves to the next port when one is taken; here a taken port is an error, so a worker is
            # always found at the port it was given.
            "-Dspark.port.maxRetries=0",
            # The master drops a worker silent this long (workers heartbeat every quarter of it); a master that
            # recovers waits this long at most for a worker that does not answer.
            f"-Dspark.worker.timeout={self.worker_timeout_s}",
        ]
        if not isinstance(d, SparkWorker):
            return [*common, "-Dspark.master.rest.enabled=false",  # else it listens on 6066, a port nobody chose
                    "-Dspark.deploy.recoveryMode=FILESYSTEM",
                    f"-Dspark.deploy.recoveryDirectory={self.recovery_directory}",
                    "org.apache.spark.deploy.master.Master",
                    "--host", d.host, "--port", str(d.port), "--webui-port", str(d.webui_port)]
        return [*common, "org.apache.spark.deploy.worker.Worker", self.master_url,
                "--host", d.host, "--port", str(d.port), "--webui-port", str(d.webui_port),
                "--cores", str(self.cores_per_worker), "--memory", f"{self.worker_memory_mb}m",
                "--work-dir", str(d.directory / "work")]

    def _launch(self, d: SparkDaemon) -> None:
        assert self._spark_home is not None, "the preflight runs first"
        d.directory.mkdir(parents=True, exist_ok=True)
        self.recovery_directory.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            # A worker builds its executors' command lines with Spark's launcher library, which needs SPARK_HOME
            # (for the jars) and SPARK_SCALA_VERSION (else it looks for a source build's folders).
            "SPARK_HOME": str(self._spark_home),
            "SPARK_SCALA_VERSION": self._scala_version,
            # Web UIs bind SPARK_LOCAL_IP (else every address); executors inherit it from their worker.
            "SPARK_LOCAL_IP": d.host,
        }
        log = d.log.open("ab")
        # A session of its own, as the ensemble's servers: Ctrl-C at a terminal must not reach the JVMs before
        # `stop` stops them in order, and the worker's executors share its process group, so that one killpg ends
        # a worker with its executors.
        d.process = subprocess.Popen(self._command(d), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=d.directory, env=env, start_new_session=True,
                                     preexec_fn=die_with_parent())  # noqa: PLW1509 - only prctl, async-signal-safe
        log.close()
        d.ended_by_us = False
        _log.debug("spark_launched", process=d.name, pid=d.process.pid, port=d.port)

    # 2. The master's view: its web UI's JSON.
    def state(self) -> dict[str, Any]:
        """The master's state as its web UI serves it at ``/json/``: ``status``, ``workers`` (each with ``id``,
        ``host``, ``port``, ``state``, ``cores``, ``coresused``), ``aliveworkers``, ``activeapps``, …"""
        url = f"{self.webui_url}/json/"
        try:
            with self._http.open(url, timeout=2.0) as resp:
                state: dict[str, Any] = json.loads(resp.read())
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise SparkClusterError(f"the Spark master does not answer at {url} ({reason}): see "
                                    f"{self.master.log}") from exc
        return state

    def _status(self) -> str | None:
        try:
            return str(self.state().get("status"))
        except SparkClusterError:
            return None

    def alive_workers(self) -> list[str]:
        """Names of this cluster's workers that the master reports ALIVE (matched by host and RPC port, which
        are fixed per worker, while a worker's id changes with each start)."""
        alive = {(w.get("host"), w.get("port")) for w in self.state().get("workers", []) if w.get("state") == "ALIVE"}
        return [w.name for w in self.workers if (w.host, w.port) in alive]

    def dead(self) -> list[str]:
        """Names of the processes (``master``, ``worker<N>``) that exited on their own, not by ``kill_*``/``stop``."""
        return [d.name for d in (self.master, *self.workers)
                if d.process is not None and d.process.poll() is not None and not d.ended_by_us]

    def _wait(self, ready: Callable[[], bool], watched: list[SparkDaemon], timeout_s: float, what: str) -> None:
        """Poll ``ready`` until true; raise naming the log of a watched process that exits meanwhile, or at the
        deadline."""
        deadline = time.monotonic() + timeout_s
        while True:
            for d in watched:
                if d.process is not None and d.process.poll() is not None:
                    raise SparkClusterError(f"{d.name} (port {d.port}) exited with code {d.process.returncode} "
                                            f"while starting: see {d.log}")
            if ready():
                return
            if time.monotonic() > deadline:
                logs = ", ".join(str(d.log) for d in watched)
                raise SparkClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}: see {logs}")
            time.sleep(_POLL_S)

    def wait_workers(self, count: int | None = None, timeout_s: float = 60.0) -> None:
        """Block until ``count`` workers (default: every running one) are ALIVE at a master that is itself ALIVE
        (not RECOVERING); raises ``SparkClusterError`` when one of them or the master exits meanwhile."""
        running = [w for w in self.workers if w.running]
        need = len(running) if count is None else count
        if need > len(self.workers):
            raise SparkClusterError(f"count={need} is more than the cluster's {len(self.workers)} workers")
        names = {w.name for w in running}

        def ready() -> bool:
            try:
                state = self.state()
            except SparkClusterError:
                return False  # not serving yet, or restarting
            alive = {(w.get("host"), w.get("port")) for w in state.get("workers", []) if w.get("state") == "ALIVE"}
            ours = [w.name for w in self.workers if (w.host, w.port) in alive]
            enough = set(ours) >= names if count is None else len(ours) >= need
            return state.get("status") == "ALIVE" and enough

        what = f"{need} worker(s) ({', '.join(sorted(names))}) to register" if count is None else \
            f"{need} worker(s) to register"
        self._wait(ready, [self.master, *running], timeout_s, what)

    # 3. Faults and repairs.
    def _signal(self, d: SparkDaemon, sig: int) -> list[psutil.Process]:
        """Send ``sig`` to ``d``'s process group (the JVM and, for a worker, its executors) and to every other
        descendant (PySpark's daemon leads a group of its own); returns those descendants."""
        if d.process is None or d.process.poll() is not None:
            return []
        try:
            tree: list[psutil.Process] = psutil.Process(d.process.pid).children(recursive=True)
        except psutil.Error:
            tree = []
        with contextlib.suppress(ProcessLookupError):
            os.killpg(d.process.pid, sig)  # its own group: launched with start_new_session
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        return tree

    @staticmethod
    def _reap(d: SparkDaemon, tree: list[psutil.Process], grace_s: float) -> None:
        """Wait ``grace_s`` for ``d`` and its descendants to exit, then SIGKILL whatever is left, and reap."""
        if d.process is not None:
            try:
                d.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(d.process.pid, signal.SIGKILL)
                d.process.wait()
            # What is left in its group was started after the signal: a worker that shuts down still launches
            # the executor the master asks for (to replace one that just ended), and that one would outlive it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(d.process.pid, signal.SIGKILL)
        left = _wait_gone(tree, grace_s)
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        _wait_gone(left, 5.0)

    def _end(self, daemons: list[SparkDaemon], sig: int) -> None:
        """Signal all ``daemons`` at once, then reap them (SIGSTOP/SIGCONT only signal)."""
        trees = []
        for d in daemons:
            if d.running:
                d.ended_by_us = sig not in _PAUSE_SIGNALS
                trees.append((d, self._signal(d, sig)))
        if sig in _PAUSE_SIGNALS:
            return
        for d, tree in trees:
            self._reap(d, tree, _GRACE_S)
            _log.info("spark_process_stopped", process=d.name, signal=signal.Signals(sig).name)

    def kill_worker(self, name_or_number: str | int | SparkWorker, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL by default) to a worker and its executors, as if its machine were lost, and reap
        them; SIGSTOP and SIGCONT pause and resume them instead."""
        self._end([self.worker(name_or_number)], sig)

    def start_worker(self, name_or_number: str | int | SparkWorker, *, wait: bool = True,
                     timeout_s: float = 60.0) -> None:
        """(Re)start a stopped worker on its own ports; with ``wait``, return once the master has it ALIVE."""
        w = self.worker(name_or_number)
        if w.running:
            return
        self._preflight([w])
        self._launch(w)
        if wait:
            self._wait(lambda: w.name in self._alive_or_none(), [w], timeout_s, f"{w.name} to register")
            _log.info("spark_worker_started", worker=w.name, port=w.port)

    def _alive_or_none(self) -> list[str]:
        try:
            return self.alive_workers()
        except SparkClusterError:
            return []

    def kill_master(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL by default) to the master and reap it; its workers and applications wait for
        it to come back."""
        self._end([self.master], sig)

    def start_master(self, *, wait: bool = True, timeout_s: float = 90.0) -> None:
        """(Re)start a stopped master on its ports; it recovers its workers and applications from the recovery
        directory. With ``wait``, return once it serves (ALIVE, recovery done) with every running worker
        registered again."""
        if self.master.running:
            return
        started = time.monotonic()
        self._preflight([self.master])
        self._launch(self.master)
        if wait:
            self.wait_workers(timeout_s=timeout_s)
            _log.info("spark_master_recovered", master=self.master_url, workers=self.alive_workers(),
                      seconds=round(time.monotonic() - started, 1))

    def run_until_stopped(self, stop: threading.Event, on_serving: Callable[[str], None]) -> None:
        """``tenure spark``: start, tell ``on_serving`` the master's URL, log each process that dies on its own,
        until ``stop`` is set; the cluster is stopped at the end.

        Raises:
            SparkClusterError: the cluster cannot start (``start`` has stopped what it launched).
        """
        try:
            self.start()
            on_serving(self.master_url)
            watch_until_stopped(stop, self.dead, self._report_death)
        finally:
            self.stop()

    def _report_death(self, name: str) -> None:
        d = self.master if name == "master" else self.worker(name)
        _log.error(SPARK_PROCESS_DIED, process=name, port=d.port,
                   exit_code=d.process.returncode if d.process else None, log=str(d.log))

    def stop(self) -> None:
        """Stop every worker with its executors, then the master: SIGTERM, SIGKILL after a grace period, reaped.

        Safe to call more than once, and on a cluster that never started.
        """
        was_running = any(d.running for d in (self.master, *self.workers))
        self._end(list(self.workers), signal.SIGTERM)
        self._end([self.master], signal.SIGTERM)
        if was_running:
            _log.info("spark_cluster_stopped", master=self.master_url)
