"""``tenure-spark-python``: the interpreter Spark starts its Python processes with (tenure gives it on a local
master; the local topology and the compose file give it to a cluster's executors as ``PYSPARK_PYTHON``).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and Py4J's archive) first on every Python process's
``PYTHONPATH``. With a pip-installed PySpark, ``SPARK_HOME`` is the installed package, and those archives are a
second copy of it, without bytecode: every new interpreter compiles PySpark's modules from source. That is 0.55 s
of the 0.83 s a new leader's streaming source runner takes to start (0.28 s from the installed package), and it
sits in every term's first trigger (``docs/performance/first-batch.md``).

This launcher drops exactly those archives from ``PYTHONPATH`` and runs the same interpreter with the same
arguments: the worker then imports the files the driver imported. An archive stays when its package is not
installed beside it (a Spark distribution's ``SPARK_HOME``), or not on this interpreter's path.

A streaming query's source runner, when the environment names a fork server (``TENURE_FORK_SOCKET``, set by the
replica: :mod:`tenure.career.spark._forkserver`), is forked by that server with its imports done instead
(:func:`run_forked`); the launcher stays the process Spark knows, forwards Spark's signals to the runner and ends as
it does. A server that does not answer within 10 s leaves the runner to start as before. With a fork server named,
the daemon of Spark's planner workers is tenure's (:mod:`tenure.career.spark._daemon`: the queue sources imported
before each fork).

The launcher imports only the standard library: it starts for every Python process Spark starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import sysconfig
from pathlib import Path
from typing import NoReturn

__all__ = ["FORK_SERVER_ENV", "LAUNCHER", "PLANNER_DAEMON", "RUNNER_MODULE", "main", "run_forked",
           "worker_python", "worker_pythonpath"]

LAUNCHER = "tenure-spark-python"
"""The launcher's name: a console script of the ``tenure`` distribution (``pyproject.toml``)."""
FORK_SERVER_ENV = "TENURE_FORK_SOCKET"
"""The variable of a Python worker's environment that names the replica's fork server's socket."""
RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
"""The module of Spark's streaming source runner, the one process the fork server starts."""
PLANNER_DAEMON = "tenure.career.spark._daemon"
"""The daemon run in place of ``pyspark.daemon`` for Spark's planner workers when a fork server is named."""
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _installed_copy(entry: str, search_path: list[str]) -> bool:
    """Whether ``entry`` is an archive inside an installed PySpark (``<site>/pyspark/python/lib/<name>.zip``)
    whose package (``pyspark``, ``py4j``) is installed in ``<site>``, a folder this interpreter imports from."""
    archive = Path(entry)
    if archive.suffix != ".zip" or len(archive.parents) < 4 or archive.parent.name != "lib" \
            or archive.parents[1].name != "python" or archive.parents[2].name != "pyspark":
        return False
    site = archive.parents[3]
    package = archive.stem.split("-", 1)[0]  # pyspark.zip, py4j-0.10.9.9-src.zip
    return str(site) in search_path and (site / package / "__init__.py").is_file()


def worker_pythonpath(pythonpath: str, search_path: list[str]) -> str:
    """``pythonpath`` without the archives that copy an installed PySpark (see the module docstring).

    Args:
        pythonpath: the ``PYTHONPATH`` Spark gave the process.
        search_path: the folders this interpreter imports from (``sys.path``).
    """
    return os.pathsep.join(entry for entry in pythonpath.split(os.pathsep)
                           if entry and not _installed_copy(entry, search_path))


def worker_python() -> str:
    """The interpreter for Spark's Python processes: the launcher installed with this interpreter's scripts, or
    this interpreter itself when there is none (tenure run from a source tree without installing it)."""
    launcher = Path(sysconfig.get_path("scripts")) / LAUNCHER
    return str(launcher) if os.access(launcher, os.X_OK) else sys.executable


def run_forked(socket_path: str, args: list[str], timeout_s: float = 10.0) -> int | None:
    """Have the fork server at ``socket_path`` run ``python ARGS`` with this process's environment, working folder
    and standard streams; forward the signals Spark sends to the child; return its wait status (``os.wait``'s),
    or None when the server did not take the request within ``timeout_s`` (nothing was started)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout_s)
    try:
        conn.connect(socket_path)
        request = json.dumps({"argv": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(conn, [request], [0, 1, 2])
        answers = conn.makefile("rb")
        pid = int(json.loads(answers.readline())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        conn.close()
        return None

    def forward(number: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, number)

    for number in _FORWARDED:
        signal.signal(number, forward)
    conn.settimeout(None)
    try:
        return int(json.loads(answers.readline())["status"])
    except (OSError, ValueError, KeyError, TypeError):  # the server went away: leave no runner behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return 1 << 8  # exit status 1


def _end_as(status: int) -> NoReturn:
    """Exit as a child with wait status ``status`` did: with its exit code, or killed by its signal."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def main() -> NoReturn:
    """Run ``sys.executable`` with this process's arguments and the archives left out of ``PYTHONPATH`` (a source
    runner on the fork server, when one is named)."""
    pythonpath = os.environ.get("PYTHONPATH")
    if pythonpath is not None:
        os.environ["PYTHONPATH"] = worker_pythonpath(pythonpath, sys.path)
    args = sys.argv[1:]
    server = os.environ.get(FORK_SERVER_ENV)
    if server and args[:2] == ["-m", RUNNER_MODULE]:
        status = run_forked(server, args)
        if status is not None:
            _end_as(status)
    if server and args[:2] == ["-m", "pyspark.daemon"] and args[2:3] and args[2].startswith("pyspark.sql.worker."):
        args = ["-m", PLANNER_DAEMON, *args[2:]]
    os.execv(sys.executable, [sys.executable, *args])
