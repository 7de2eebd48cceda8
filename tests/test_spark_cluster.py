"""The embedded Spark standalone cluster: workers register, executors run a job, a lost worker or master comes
back, nothing outlives `stop`, and the `tenure spark` command."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import structlog

from tenure.career.spark import STANDBY_EXECUTORS_HELD, STANDBY_WITHOUT_EXECUTORS
from tenure.career.spark._cluster import reclaim_cores, record_application, term_application_name
from tenure.service.local import (
    SPARK_PROCESS_DIED,
    SparkCluster,
    SparkClusterError,
    SparkWorker,
    free_base_port,
    wait_for,
)
from tenure.service.replica._cluster_master import StandaloneMaster
from tests._replicas import TENURE, descendants, process_running, tenure

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1"}

#: A PySpark driver that runs one small job (JVM-only and Python-on-executors) per line read from stdin.
_DRIVER = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).appName(sys.argv[2])
         .config("spark.executor.memory", "512m").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false")
         .config("spark.executor.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")  # quicker start
         .getOrCreate())
print("app", spark.sparkContext.applicationId, flush=True)
while sys.stdin.readline():
    rows = spark.range(100).repartition(2).count()
    total = spark.sparkContext.parallelize(range(100), 2).map(lambda x: x).sum()
    print("result", rows, total, flush=True)
spark.stop()
"""


def free_spark_port(workers: int) -> int:
    """A master port P with P..P+workers and P+1000..P+1000+workers free (``free_base_port`` checks a superset)."""
    return free_base_port(workers + 1)


def _processes_under(directory: Path) -> list[str]:
    """Live processes whose command line names ``directory`` or whose working directory is inside it (an
    executor's command line need not name it, but it runs in its worker's work folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            cwd = ""
        if cmdline and (str(directory) in cmdline or cwd == str(directory) or cwd.startswith(f"{directory}/")):
            found.append(f"{entry.name}: {cmdline[:160]}")
    return found


def _wait_none_under(directory: Path, timeout_s: float = 10.0) -> None:
    """Fail unless no process is under ``directory`` within ``timeout_s``, naming those left."""
    left: list[str] = []

    def none_left() -> bool:
        left[:] = _processes_under(directory)
        return not left

    try:
        wait_for(none_left, timeout_s, f"no process under {directory}")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; left: {left}") from None


def _executors(worker: SparkWorker) -> set[int]:
    """Pids of the executor JVMs running under ``worker``."""
    assert worker.process is not None
    found = set()
    for pid in descendants(worker.process.pid):
        with contextlib.suppress(OSError):
            if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
    return found


class _Driver:
    """A PySpark application on the cluster, in a process of its own (the test session has its own local
    SparkSession, and one process holds one SparkContext)."""

    def __init__(self, master_url: str, log: Path, name: str = "tenure-test") -> None:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
               # C1 only: a driver of two tiny jobs gains more from a quick start than from C2's code
               "PYSPARK_SUBMIT_ARGS": "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell"}
        self.log = log
        with log.open("wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", _DRIVER, master_url, name], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                         start_new_session=True)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.app_id = self._expect("app", 120)[0]

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)

    def _expect(self, word: str, timeout_s: float) -> list[str]:
        """The fields after ``word`` of the driver's next line that starts with it; fail naming the driver's log
        tail when none comes within ``timeout_s`` or the driver exits first."""

        def line() -> tuple[list[str]] | None:
            try:
                fields = self._lines.get(timeout=0.5).split()
            except queue.Empty:
                assert self.proc.poll() is None, f"the driver exited: {self._tail()}"
                return None
            return (fields[1:],) if fields[:1] == [word] else None

        try:
            return wait_for(line, timeout_s, f"the driver to print a {word!r} line", interval_s=0)[0]
        except TimeoutError:
            raise AssertionError(f"the driver printed no {word!r} line within {timeout_s:g} s; "
                                 f"its log ends:\n{self._tail()}") from None

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def job(self, timeout_s: float = 120.0) -> tuple[int, int]:
        """Run one job; (rows counted, sum computed by Python on the executors)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("job\n")
        self.proc.stdin.flush()
        rows, total = self._expect("result", timeout_s)
        return int(rows), int(total)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """One cluster of 2 workers for the module, stopped even when a test fails."""
    spark = SparkCluster(workers=2, port=free_spark_port(2), directory=tmp_path_factory.mktemp("spark"))
    try:
        started = time.monotonic()
        spark.start()
        print(f"\n[timing] cluster start to 2 workers registered: {time.monotonic() - started:.1f} s")
        yield spark
    finally:
        spark.stop()


@pytest.fixture(scope="module")
def app(cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Driver]:
    """One application on the module's cluster, running for the tests that need one."""
    started = time.monotonic()
    driver = _Driver(cluster.master_url, tmp_path_factory.mktemp("driver") / "driver.log")
    print(f"\n[timing] driver's SparkSession: {time.monotonic() - started:.1f} s")
    try:
        yield driver
    finally:
        driver.stop()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"workers": 0}, r"^workers=0 is too few: a cluster needs at least 1 worker$"),
    ({"port": 80}, r"^port=80 is out of range: pick a port between 1024 and"),
    ({"worker_memory_mb": 256}, r"^worker_memory_mb=256 is below 512: an executor needs about 450 MB, raise it$"),
    ({"webui_port": 7078}, r"^webui_port=7078 overlaps the RPC ports 7077–7079"),
    ({"worker_timeout_s": 1}, r"^worker_timeout_s=1 is below 4: a worker starved of CPU that briefly would be "
                              r"dropped; raise it$"),
], ids=["no-workers", "low-port", "small-worker", "webui-overlap", "short-timeout"])
def test_invalid_settings_are_one_clear_error(kwargs: dict[str, int], message: str, tmp_path: Path) -> None:
    """Settings that cannot work are refused at construction, naming the field, the value and the fix."""
    with pytest.raises(SparkClusterError, match=message):
        SparkCluster(directory=tmp_path, **kwargs)  # type: ignore[arg-type]  # table of mixed keyword values


def test_workers_register_and_everything_listens_on_loopback(cluster: SparkCluster) -> None:
    """Both workers are ALIVE at an ALIVE master; each JVM listens on its two given ports, on loopback only
    (no REST server on 6066)."""
    state = cluster.state()
    assert state["status"] == "ALIVE"
    assert state["aliveworkers"] == 2
    assert cluster.alive_workers() == ["worker1", "worker2"]
    assert cluster.dead() == []
    for d in (cluster.master, *cluster.workers):
        assert d.process is not None
        listening = {(c.laddr.ip, c.laddr.port) for c in psutil.Process(d.process.pid).net_connections("inet")
                     if c.status == psutil.CONN_LISTEN}
        assert {port for _ip, port in listening} == {d.port, d.webui_port}, d.name
        assert {ip for ip, _port in listening} <= LOOPBACK, d.name


def test_a_job_runs_on_the_workers_executors(cluster: SparkCluster, app: _Driver) -> None:
    """A PySpark application gets an executor on each worker (children of the worker JVMs), and a job with
    Python code runs on them."""
    started = time.monotonic()
    assert app.job() == (100, 4950)
    print(f"\n[timing] first job: {time.monotonic() - started:.1f} s")
    state = cluster.state()
    assert [(a["id"], a["state"]) for a in state["activeapps"]] == [(app.app_id, "RUNNING")]
    assert {w["port"]: w["coresused"] for w in state["workers"]} == {w.port: 1 for w in cluster.workers}
    for worker in cluster.workers:
        assert _executors(worker), f"no executor under {worker.name}"
        for pid in _executors(worker):
            listening = {c.laddr.ip for c in psutil.Process(pid).net_connections("inet")
                         if c.status == psutil.CONN_LISTEN}
            assert listening <= LOOPBACK, f"{worker.name}'s executor listens on {listening}"


def test_a_restarted_master_recovers_workers_and_the_application(cluster: SparkCluster, app: _Driver) -> None:
    """The master SIGKILLed and started again recovers both workers and the running application from its
    FILESYSTEM recovery state, and the application runs a job afterwards."""
    cluster.kill_master()
    with pytest.raises(SparkClusterError, match=r"^the Spark master does not answer at http://127\.0\.0\.1:"):
        cluster.state()
    assert cluster.dead() == []  # killed on purpose
    started = time.monotonic()
    cluster.start_master()
    print(f"\n[timing] master restart to workers re-registered: {time.monotonic() - started:.1f} s")
    assert cluster.alive_workers() == ["worker1", "worker2"]
    state = cluster.state()
    assert state["status"] == "ALIVE"
    assert [(a["id"], a["state"]) for a in state["activeapps"]] == [(app.app_id, "RUNNING")]
    assert app.job() == (100, 4950)


def test_a_crashed_worker_is_reported_and_comes_back(cluster: SparkCluster, app: _Driver) -> None:
    """A worker SIGKILLed from outside is named by `dead()` and leaves `alive_workers()`; its executors exit
    with it; `start_worker` brings it back under its name, and the application gets an executor there again."""
    worker = cluster.worker("worker2")
    assert worker.process is not None
    executors = _executors(worker)
    assert executors
    os.kill(worker.process.pid, signal.SIGKILL)  # the JVM alone, as a crash or the OOM killer would
    killed = time.monotonic()
    wait_for(lambda: cluster.dead() == ["worker2"], 10, "dead() to name worker2")
    wait_for(lambda: cluster.alive_workers() == ["worker1"], 30, "the master to drop worker2")
    print(f"\n[timing] worker loss seen by the master: {time.monotonic() - killed:.2f} s")
    wait_for(lambda: not any(psutil.pid_exists(p) for p in executors), 30, "worker2's executor to exit")

    started = time.monotonic()
    cluster.start_worker("worker2")
    print(f"[timing] worker restart to registered: {time.monotonic() - started:.1f} s")
    assert cluster.alive_workers() == ["worker1", "worker2"]
    assert cluster.dead() == []
    wait_for(lambda: _executors(worker), 60, "a new executor of the application on worker2")


def test_kill_worker_ends_its_executors_with_it(cluster: SparkCluster, app: _Driver) -> None:
    """`kill_worker` SIGKILLs a worker together with its executors, as a lost machine, and returns when they are
    gone; `dead()` leaves it out (killed on purpose); `start_worker` brings it back."""
    worker = cluster.worker(1)
    executors = _executors(worker)
    assert executors
    cluster.kill_worker(1)
    assert not worker.running
    assert not [pid for pid in executors if process_running(pid)]
    wait_for(lambda: cluster.alive_workers() == ["worker2"], 30, "the master to drop worker1")
    assert cluster.dead() == []
    cluster.start_worker(1)
    assert cluster.alive_workers() == ["worker1", "worker2"]
    wait_for(lambda: _executors(worker), 60, "a new executor of the application on worker1")


def test_a_new_leader_kills_the_applications_of_earlier_terms_only(cluster: SparkCluster, app: _Driver,
                                                                     tmp_path: Path) -> None:
    """Through the master's web UI (its kill link, CSRF token included): an application recorded by epoch 5
    outlives the reclaims of epochs 3 and 5, and dies at epoch 7's; the other application (``app``), in no
    record, is never touched. A master in standby or gone is passed over; with none ALIVE the reclaim fails with
    the address and the fix."""
    term = _Driver(cluster.master_url, tmp_path / "term.log", name=term_application_name("tenure", "g", 5))
    records = tmp_path / "_applications"
    try:
        dead = f"http://127.0.0.1:{free_base_port(1)}"
        master = StandaloneMaster([dead, cluster.webui_url], timeout_s=2.0)
        assert {(term.app_id, "tenure [g epoch 5]"), (app.app_id, "tenure-test")} <= set(master.applications())
        record_application(records, 5, term.app_id, "r1")
        log = structlog.get_logger("test")
        for epoch in (3, 5):
            assert reclaim_cores(master, records, epoch=epoch, log=log) == []
        assert reclaim_cores(master, records, epoch=7, log=log) == [term.app_id]
        state = cluster.state()
        assert [a["id"] for a in state["activeapps"]] == [app.app_id]
        assert (term.app_id, "KILLED") in {(a["id"], a["state"]) for a in state["completedapps"]}
        with pytest.raises(OSError, match=rf"^no ALIVE Spark master answers at {dead} \(.*\): check "
                                          r"--spark-master-webui$"):
            StandaloneMaster([dead], timeout_s=2.0).applications()
    finally:
        term.stop()
    assert app.job() == (100, 4950)


#: A follower's preparation on the cluster in a process of its own (one SparkContext per process): its log on stderr
#: as JSON, then ``ready`` and the master's applications on stdout.
_FOLLOWER = """
import json, sys, structlog
from pathlib import Path
from tenure.career.spark import SparkCareer
from tests.test_spark_career import Recorder, make_config
structlog.configure(processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
                    logger_factory=structlog.PrintLoggerFactory(sys.stderr))
master, root = sys.argv[1], Path(sys.argv[2])
career = SparkCareer(make_config(root, spark_master=master, standby="warm", standby_executors=1,
                                 warmup_timeout_s=6.0), Recorder(), replica_id="f1", group="g")
career.prepare()
print("ready", career.ready(), flush=True)
career.close()
"""


@pytest.mark.fleet  # a second driver and a local warm-up beside the module's cluster: two JVMs' load at once
def test_a_follower_the_cluster_gives_no_core_warms_up_locally_and_holds_nothing(
        cluster: SparkCluster, app: _Driver, tmp_path: Path) -> None:
    """``app`` holds every core of the module's cluster. A warm follower's standby application waits
    ``warmup_timeout_s`` for an executor, then the follower says so with the fix, stops that application (its
    request for cores goes with it), warms up on a local session instead and is ready: it is a candidate whose
    first batch waits for executors, not a replica that never joins."""
    assert sum(w["coresused"] for w in cluster.state()["workers"]) == 2, "the module's application must hold both"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    follower = subprocess.Popen([sys.executable, "-c", _FOLLOWER, cluster.master_url, str(tmp_path / "data")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    try:
        stdout, stderr = follower.communicate(timeout=240)
    finally:  # its JVM too, should the follower hang
        with contextlib.suppress(ProcessLookupError):
            os.killpg(follower.pid, signal.SIGKILL)
        follower.wait()
    python_side = [line for line in stderr.splitlines() if line.startswith(("{", "Traceback", "  File", "tenure"))]
    assert follower.returncode == 0, "\n".join(python_side[-40:]) or stderr[-3000:]
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    assert STANDBY_WITHOUT_EXECUTORS in names and STANDBY_EXECUTORS_HELD not in names, names
    gave_up = next(e for e in events if e["event"] == STANDBY_WITHOUT_EXECUTORS)
    assert 6.0 <= gave_up["waited_s"] < 30 and "spark.cores.max" in gave_up["fix"], gave_up
    assert names.index(STANDBY_WITHOUT_EXECUTORS) < names.index("warmed_up"), names
    assert stdout.split() == ["ready", "True"]
    assert [a["id"] for a in cluster.state()["activeapps"]] == [app.app_id], "the standby application must be gone"
    assert app.job() == (100, 4950)


def test_stop_leaves_no_process_behind(cluster: SparkCluster, app: _Driver) -> None:
    """`stop` ends the workers, their executors (and PySpark's daemons under them) and the master: no process
    names the cluster's directory or runs inside it afterwards. (Last: it stops the module's cluster.)"""
    assert all(_executors(w) for w in cluster.workers)
    assert _processes_under(cluster.directory)
    started = time.monotonic()
    cluster.stop()
    print(f"\n[timing] stop: {time.monotonic() - started:.1f} s")
    assert not any(d.running for d in (cluster.master, *cluster.workers))
    _wait_none_under(cluster.directory)


def test_cli_prints_master_url_reports_a_death_and_stops_clean(tmp_path: Path) -> None:
    """`tenure spark` prints the master URL once its worker registered, logs `spark_process_died` for a worker
    that dies, and on SIGTERM exits 0 leaving no process of the cluster."""
    base = free_spark_port(1)
    with (tmp_path / "stderr.log").open("wb") as err:
        proc = subprocess.Popen([*TENURE, "spark", "--workers", "1", "--port", str(base), "--dir", str(tmp_path)],
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == f"spark://127.0.0.1:{base}", (tmp_path / "stderr.log").read_text()
        ours = descendants(proc.pid)
        assert len(ours) == 2  # the master and the worker
        worker = next(p for p in ours if b"deploy.worker.Worker" in Path(f"/proc/{p}/cmdline").read_bytes())
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: SPARK_PROCESS_DIED in (tmp_path / "stderr.log").read_text(), 10,
                 "`tenure spark` to report the dead worker")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        _wait_none_under(tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    died = [ln for ln in (tmp_path / "stderr.log").read_text().splitlines() if SPARK_PROCESS_DIED in ln]
    assert len(died) == 1 and '"process": "worker1"' in died[0], died


def test_cli_port_in_use_exits_2_with_one_line(tmp_path: Path) -> None:
    """`tenure spark` with a worker's port held prints one error line naming the port and exits 2."""
    base = free_spark_port(2)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 1))
        holder.listen()
        result = tenure("spark", "--port", str(base), "--dir", str(tmp_path), timeout_s=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"tenure: error: port {base + 1} (for worker1) is already in use: stop "
                                          "what holds it or choose another --port"]
    assert result.stdout == ""


def test_cli_without_java_exits_2_with_one_line(tmp_path: Path) -> None:
    """`tenure spark` with no java on PATH and no JAVA_HOME prints the one-line fix and exits 2."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"} | {"PATH": str(tmp_path)}
    result = tenure("spark", "--port", str(free_spark_port(2)), "--dir", str(tmp_path / "spark"), timeout_s=60, env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["tenure: error: java not found: install a Java 17+ runtime "
                                          "(e.g. openjdk-17-jre-headless) or set JAVA_HOME"]
