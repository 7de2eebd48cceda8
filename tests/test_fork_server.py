"""The fork server (``career/spark/_forkserver.py``) and its launcher side (``_worker_python.run_forked``): real
processes, real signals, and a real Spark query whose source runner the server forked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.spark import SparkCareer
from tenure.career.spark._forkserver import ForkServer, _start, fork_server
from tenure.career.spark._session import use_driver_python
from tenure.career.spark._worker_python import FORK_SERVER_ENV, PLANNER_DAEMON, RUNNER_MODULE, run_forked
from tests._polling import wait_for
from tests.test_spark_career import Queue, Recorder, drained, leadership, make_config, run_until

_TESTS = Path(__file__).parent
# A launcher as Spark starts it, on the server given first: exit 99 when the server refused, else as the child.
_LAUNCH = ("import sys; from tenure.career.spark._worker_python import run_forked, _end_as; "
           "status = run_forked(sys.argv[1], sys.argv[2:]); sys.exit(99) if status is None else _end_as(status)")


@pytest.fixture()
def server() -> Iterator[ForkServer]:
    """A server of the tests' own child module (``tests/_fork_child.py``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_TESTS), os.environ.get("PYTHONPATH", "")])}
    started = _start("_fork_child", (), env=env)
    assert started is not None, "the fork server did not start"
    yield started
    started.close()


def _launch(server: ForkServer, action: str, cwd: Path, module: str = "_fork_child") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _LAUNCH, server.socket_path, "-m", module, action],
                            cwd=cwd, env={**os.environ, "FORK_TEST": "given"}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _child_of(launcher: subprocess.Popen[str]) -> dict[str, Any]:
    assert launcher.stdout is not None
    line = launcher.stdout.readline()
    assert line, f"no child started; launcher exit {launcher.wait(10)}"
    return dict(json.loads(line))


def _cmdline(process: psutil.Process) -> list[str]:
    """A process's command line; empty for one that ended, or is a zombie, while we look."""
    try:
        return list(process.cmdline())
    except psutil.NoSuchProcess:
        return []


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_child_runs_as_python_m_would_with_the_launchers_streams_environment_and_folder(
        server: ForkServer, tmp_path: Path) -> None:
    """The forked child is the server's (not the launcher's), runs the module as ``__main__`` with the launcher's
    arguments, environment, working folder, stdin, stdout and stderr; the launcher exits with the child's code."""
    launcher = _launch(server, "3", tmp_path)
    child = _child_of(launcher)
    assert child["argv"] == ["3"] and child["cwd"] == str(tmp_path) and child["var"] == "given"
    assert child["name"] == "__main__"
    assert psutil.Process(child["pid"]).ppid() == server.process.pid
    _, err = launcher.communicate("hello\n", timeout=30)
    assert err == "echo:hello\n"
    assert launcher.returncode == 3


def test_a_signal_to_the_launcher_reaches_the_child_and_the_launcher_ends_as_it_does(
        server: ForkServer, tmp_path: Path) -> None:
    """Spark stops a runner with SIGTERM to the process it started, the launcher: the child gets the signal itself
    (its handler runs) and the launcher exits with the child's code."""
    launcher = _launch(server, "trap", tmp_path)
    child = _child_of(launcher)
    assert launcher.stdout is not None and launcher.stdout.readline() == "trapped\n"
    launcher.send_signal(signal.SIGTERM)
    _, err = launcher.communicate("\n", timeout=30)
    assert launcher.returncode == 43 and "term" in err
    wait_for(lambda: _gone(child["pid"]), 10, "the child to end")


def test_a_child_killed_by_a_signal_takes_its_launcher_with_the_same_signal(
        server: ForkServer, tmp_path: Path) -> None:
    """A runner that dies of a signal: its launcher dies of the same one, so Spark sees what it would have seen."""
    launcher = _launch(server, "die", tmp_path)
    _child_of(launcher)
    launcher.communicate("\n", timeout=30)
    assert launcher.returncode == -signal.SIGUSR1


def test_a_killed_launchers_child_is_killed_by_the_server(server: ForkServer, tmp_path: Path) -> None:
    """A launcher SIGKILLed (it cannot forward anything) leaves no runner behind: the server sees its connection
    close and kills the child."""
    launcher = _launch(server, "wait", tmp_path)
    child = _child_of(launcher)
    launcher.kill()
    launcher.wait(30)
    wait_for(lambda: _gone(child["pid"]), 10, "the server to kill the orphaned child")


def test_the_server_ends_with_its_replica_and_takes_its_children_and_launchers_along(
        server: ForkServer, tmp_path: Path) -> None:
    """The replica's end (the server's stdin closed: the replica killed, say) ends the server, its children
    (SIGTERM) and so their launchers, which exit as their child did; the server removes its socket's folder, which
    nobody else would."""
    launcher = _launch(server, "wait", tmp_path)
    child = _child_of(launcher)
    assert server.process.stdin is not None
    server.process.stdin.close()
    assert server.process.wait(30) == 0
    wait_for(lambda: _gone(child["pid"]), 10, "the child to end with the server")
    assert launcher.wait(30) != 0
    assert not server.folder.exists()


def test_a_server_sent_sigterm_ends_as_at_its_replicas_end(server: ForkServer, tmp_path: Path) -> None:
    """SIGTERM to the server (a supervisor stopping the process group): its children end, its folder goes."""
    launcher = _launch(server, "wait", tmp_path)
    child = _child_of(launcher)
    server.process.terminate()
    assert server.process.wait(30) == 0
    wait_for(lambda: _gone(child["pid"]), 10, "the child to end with the server")
    assert launcher.wait(30) != 0
    assert not server.folder.exists()


def test_a_request_for_another_module_or_a_dead_server_starts_nothing(server: ForkServer, tmp_path: Path) -> None:
    """The server runs its one module only: a request for another is refused (the launcher then runs it itself);
    a server that is gone is no server (the launcher runs the module itself too)."""
    children = len(psutil.Process(server.process.pid).children())
    launcher = _launch(server, "0", tmp_path, module="json.tool")
    assert launcher.wait(30) == 99
    assert len(psutil.Process(server.process.pid).children()) == children
    server.close()
    assert run_forked(server.socket_path, ["-m", "_fork_child", "0"], timeout_s=5) is None


def test_a_real_querys_source_runner_is_a_child_of_the_fork_server(
        spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """Real Spark on the launcher: the queue source's runner of a leader's query is forked by this process's
    fork server (the launcher Spark started waits for it), the data source's planner workers come from tenure's
    daemon (the executors' from Spark's), and the term drains its queue exactly once."""
    root = tmp_path / "data"
    Queue(root).standard(files=2)
    career = SparkCareer(make_config(root), Recorder(), replica_id="r1")
    runners: list[int] = []
    seen: list[str] = []

    def forked_runner() -> bool:
        server = fork_server()
        assert server is not None
        launchers = [p for p in psutil.Process().children(recursive=True) if RUNNER_MODULE in _cmdline(p)]
        forked = psutil.Process(server.process.pid).children()
        runners[:] = [p.pid for p in forked]
        seen[:] = [f"launchers {[p.pid for p in launchers]}, server {server.process.pid}, its children {runners}"]
        return bool(launchers and forked)

    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx):
            career.inaugurate(ctx)
            try:
                run_until(career, forked_runner, 60)
            except TimeoutError as exc:
                raise AssertionError(f"no forked runner: {seen}") from exc
            run_until(career, drained(root))
            career.hand_over(Outcome.CLEAN)
    finally:
        career.close()
    assert runners
    commands = [" ".join(_cmdline(p)) for p in psutil.Process().children(recursive=True)]
    assert any(f"-m {PLANNER_DAEMON} pyspark.sql.worker.create_data_source" in c for c in commands), commands
    assert any("-m pyspark.daemon pyspark.worker" in c for c in commands), commands


def test_the_setting_off_leaves_every_runner_to_spark(spark: Any) -> None:
    """``--fork-server off``: the session's Python workers are given no server (a session that had one loses
    it), so Spark starts each runner itself; on, they are given this process's live server."""
    context = spark.sparkContext
    try:
        use_driver_python(spark, "local[2]", fork_server_on=True)
        server = fork_server()
        assert server is not None and context.environment[FORK_SERVER_ENV] == server.socket_path
        use_driver_python(spark, "local[2]", fork_server_on=False)
        assert FORK_SERVER_ENV not in context.environment
    finally:
        use_driver_python(spark, "local[2]")
