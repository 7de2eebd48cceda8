"""A fork server for Spark's streaming source runners: a new query's runner forked with its imports done.

Spark starts each streaming query's Python source runner (``pyspark.sql.streaming.python_streaming_source_runner``)
as a new interpreter of its own, never from its daemon: on a new leader's path, that interpreter imports PySpark,
PyArrow and the queue source before the query's first trigger can plan (0.3 s of a 0.6 s start, measured by
``bench/probes/fork_server.py``). This server, one per replica, has those imports done and forks a runner per
request of the launcher (:mod:`tenure.career.spark._worker_python`), which stays the process Spark knows.

The protocol, over a Unix socket in a folder only the replica's user can open: the launcher sends one JSON line (its
arguments, environment and working folder) with its file descriptors 0–2 (``SCM_RIGHTS``); the server forks, the
child takes those descriptors, that environment and folder, and runs the module as ``python -m`` would; the server
answers the child's pid, then, when it ends, its wait status. The launcher forwards the signals Spark sends it to
the child. The server forks from a single thread (no thread of its own); it kills a child whose launcher went away
(the connection closed) and ends, killing its children and removing its folder, when the replica does (its stdin
reaches end of file) or on SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from tenure.career.spark._worker_python import FORK_SERVER_ENV, RUNNER_MODULE

__all__ = ["FORK_SERVER_ENV", "FORK_SERVER_NOT_STARTED", "RUNNER_MODULE", "ForkServer", "fork_server"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
FORK_SERVER_NOT_STARTED: Final = "fork_server_not_started"

_PRELOAD: Final = (RUNNER_MODULE, "pyarrow", "tenure.career.spark._intake", "tenure.career.spark._redis_source",
                   "tenure.career.spark._pipeline")
_READY: Final = b"ready\n"
_START_TIMEOUT_S: Final = 30.0
_REQUEST_LIMIT: Final = 1 << 20

_log = structlog.get_logger("tenure.career.spark")


@dataclass
class ForkServer:
    """The replica's fork server: its process, and its socket's folder (removed when it closes)."""

    process: subprocess.Popen[bytes]
    folder: Path

    @property
    def socket_path(self) -> str:
        return str(self.folder / "fork.sock")

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """End the server (its children with it) and remove its folder."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(5.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5.0)
        shutil.rmtree(self.folder, ignore_errors=True)


_running: list[ForkServer] = []  # this process's server, once started
_running_lock = threading.Lock()


def fork_server() -> ForkServer | None:
    """This process's fork server, started on first use (again if it died); None when it cannot start (logged:
    the runners are then started as Spark starts them, only slower)."""
    with _running_lock:
        if _running and _running[0].alive():
            return _running[0]
        for dead in _running:
            dead.close()
        _running.clear()
        server = _start(RUNNER_MODULE, _PRELOAD)
        if server is not None:
            _running.append(server)
        return server


def _start(module: str, preload: tuple[str, ...], env: dict[str, str] | None = None) -> ForkServer | None:
    """Start a server that runs ``module`` only, with ``preload`` imported, and wait for it to listen."""
    folder = Path(tempfile.mkdtemp(prefix="tenure-fork-"))  # mode 0700: only this user may connect
    try:
        process = subprocess.Popen([sys.executable, "-m", __name__, str(folder / "fork.sock"), module, *preload],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        _log.warning(FORK_SERVER_NOT_STARTED, error=str(exc), effect="query runners start as new interpreters")
        return None
    server = ForkServer(process, folder)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], _START_TIMEOUT_S)
    if not ready or process.stdout.readline() != _READY:
        server.close()
        _log.warning(FORK_SERVER_NOT_STARTED, error=f"no answer within {_START_TIMEOUT_S:.0f} s, or it exited "
                     f"(status {process.returncode})", effect="query runners start as new interpreters")
        return None
    return server


def _serve(path: str, module: str, preload: list[str]) -> None:
    """The server's loop (see the module docstring): runs ``module`` only, with ``preload`` imported."""
    for name in preload:
        __import__(name)
    sys.modules.pop(module, None)  # its imports stay; the child runs it afresh as __main__ (runpy warns otherwise)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the replica's to handle; stdin ends us
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # as stdin's end does: children ended, folder removed
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.buffer.write(_READY)
    sys.stdout.flush()
    children: dict[int, socket.socket] = {}  # pid -> its launcher's connection
    try:
        while True:
            readable, _, _ = select.select([listener, sys.stdin, wake_r, *children.values()], [], [])
            if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
                return  # the replica has ended
            if wake_r in readable:
                os.read(wake_r, 4096)
                _reap(children)
            for pid, conn in list(children.items()):
                if conn in readable:  # its launcher went away (it sends nothing after the request)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            if listener in readable:
                conn, _ = listener.accept()
                forked = _fork_child(conn, module, listener, children, (wake_r, wake_w))
                if forked is None:
                    conn.close()
                else:
                    children[forked] = conn
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)  # its replica may have been killed: nobody else will


def _reap(children: dict[int, socket.socket]) -> None:
    """Send each ended child's wait status to its launcher."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{json.dumps({'status': status})}\n".encode())
            conn.close()


def _fork_child(conn: socket.socket, module: str, listener: socket.socket, children: dict[int, socket.socket],
                wake: tuple[int, int]) -> int | None:
    """Read one request, fork its child and answer its pid; None for a request that is not one."""
    conn.settimeout(10.0)
    try:
        message, fds, _, _ = socket.recv_fds(conn, _REQUEST_LIMIT, 3)
        request = json.loads(message)
        argv, env, cwd = list(request["argv"]), dict(request["env"]), str(request["cwd"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if len(fds) != 3 or argv[:2] != ["-m", module]:
        for fd in fds:
            os.close(fd)
        return None
    pid = os.fork()
    if pid == 0:
        listener.close()
        for other in children.values():
            other.close()
        conn.close()
        signal.set_wakeup_fd(-1)
        for fd in wake:
            os.close(fd)
        _run_child(argv, env, cwd, fds)
    for fd in fds:
        os.close(fd)
    conn.settimeout(None)
    with contextlib.suppress(OSError):
        conn.sendall(f"{json.dumps({'pid': pid})}\n".encode())
    return pid


def _run_child(argv: list[str], env: dict[str, str], cwd: str, fds: list[int]) -> None:
    """In the forked child: become the runner Spark asked for, as ``python -m MODULE ARGS`` would; never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        for entry in reversed([e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], sys.argv[3:])
