"""The embedded Redis: Debian's ``redis-server`` on this machine, its append-only file on and fsynced before each
reply (``appendfsync always``), for ``tenure redis``, the tests and the benchmarks."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis
import structlog

from tenure.errors import TenureError
from tenure.service.local._ensemble import die_with_parent
from tenure.service.local._free_port import free_port
from tenure.service.local._wait import watch_until_stopped

__all__ = ["APPENDFSYNC", "RedisServer", "RedisServerError", "find_redis_server", "running_redis", "start_redis"]

_log = structlog.get_logger("tenure.redis")

APPENDFSYNC = ("always", "everysec", "no")
"""Redis's ``appendfsync`` choices: each write fsynced before its reply, once a second, or when the OS flushes."""

_STOP_GRACE_S = 10.0


class RedisServerError(TenureError):
    """The embedded Redis cannot start or serve; the message names the problem and the fix."""


def find_redis_server() -> str:
    """The ``redis-server`` to run: ``$TENURE_REDIS_SERVER``, else the one on ``PATH``."""
    found = os.environ.get("TENURE_REDIS_SERVER") or shutil.which("redis-server")
    if not found or not Path(found).exists():
        raise RedisServerError("redis-server not found: install it (apt-get install redis-server) or set "
                               "TENURE_REDIS_SERVER to its path")
    return found


@dataclass
class RedisServer:
    """One ``redis-server`` process on ``host:port``, its data (the append-only file) and log in ``directory``.

    ``appendonly`` and ``appendfsync`` are the durability settings (docs/operating/redis.md): the defaults keep
    every acknowledged entry through a crash of the process or the machine. No RDB snapshot is written, so a
    server started with ``appendonly=False`` starts empty: a Redis that lost its data.

    Example::

        with running_redis(tmp_path / "redis") as server:
            client = redis.Redis.from_url(server.url)
    """

    port: int
    directory: Path
    appendonly: bool = True
    appendfsync: str = "always"
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """``redis://host:port``: the server (a topic's URL adds ``?prefix=…``)."""
        return f"redis://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout_s: float = 30.0) -> None:
        """Launch the server and return once it answers ``PING`` (raises ``RedisServerError``)."""
        if self.appendfsync not in APPENDFSYNC:
            raise RedisServerError(f"appendfsync={self.appendfsync!r} is not one of {', '.join(APPENDFSYNC)}")
        if self.running:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        cmd = [find_redis_server(), "--port", str(self.port), "--bind", self.host, "--dir", str(self.directory),
               "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", self.appendfsync,
               "--save", "", "--daemonize", "no", "--logfile", str(self.log)]
        # A session of its own, as the ensemble's servers: Ctrl-C at a terminal must not stop it before the
        # replicas that read it; and the kernel kills it should its parent die.
        self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=die_with_parent())  # noqa: PLW1509 - only prctl, async-signal-safe
        _log.debug("redis_launched", pid=self.process.pid, port=self.port)
        self._wait_serving(timeout_s)

    @property
    def log(self) -> Path:
        return self.directory / "redis.log"

    def _wait_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=1.0, socket_connect_timeout=1.0)
        try:
            while True:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise RedisServerError(f"redis-server on port {self.port} exited with code "
                                           f"{self.process.returncode} while starting: see {self.log}")
                with contextlib.suppress(redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    if client.ping():
                        return
                if time.monotonic() > deadline:
                    self.kill()
                    raise RedisServerError(f"redis-server on port {self.port} not serving after {timeout_s:.0f} s: "
                                           f"see {self.log}")
                time.sleep(0.05)
        finally:
            client.close()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL by default: a crash) and reap the process; a SIGTERM not obeyed within a grace
        period is followed by SIGKILL."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _log.info("redis_stopped", port=self.port, signal=signal.Signals(sig).name)

    def stop(self) -> None:
        """Stop the server gracefully (SIGTERM: Redis fsyncs its append-only file and exits) and reap it."""
        self.kill(signal.SIGTERM)

    def run_until_stopped(self, stop: threading.Event, on_serving: Callable[[str], None]) -> None:
        """``tenure redis``: start, tell ``on_serving`` the URL, log the server's death should it die on its own,
        until ``stop`` is set; the server is stopped at the end, also when ``start`` fails.

        Raises:
            RedisServerError: it cannot start.
        """
        try:
            self.start()
            on_serving(self.url)
            watch_until_stopped(stop, lambda: [] if self.running else ["redis"], self._report_death)
        finally:
            self.stop()

    def _report_death(self, _name: str) -> None:
        _log.error("redis_died", port=self.port, exit_code=self.process.returncode if self.process else None,
                   log=str(self.log))


def start_redis(directory: Path, *, appendonly: bool = True, appendfsync: str = "always", timeout_s: float = 30.0,
                attempts: int = 3) -> RedisServer:
    """Start a server on a free port (``free_port``); the caller stops it (or use :func:`running_redis`).

    Args:
        attempts: tries, each on another port, when the port is taken between the probe and the launch.

    Raises:
        RedisServerError: it cannot start (what it launched is stopped again).
    """
    for attempt in range(1, attempts + 1):
        server = RedisServer(free_port(), directory, appendonly=appendonly, appendfsync=appendfsync)
        try:
            server.start(timeout_s)
            return server
        except RedisServerError:
            server.kill()
            if attempt == attempts:
                raise
        except BaseException:
            server.kill()
            raise
    raise RedisServerError(f"attempts={attempts} must be at least 1")


@contextlib.contextmanager
def running_redis(directory: Path, *, appendonly: bool = True, appendfsync: str = "always",
                  timeout_s: float = 30.0) -> Iterator[RedisServer]:
    """:func:`start_redis` as a context: the server serves inside the block and is killed at its end."""
    server = start_redis(directory, appendonly=appendonly, appendfsync=appendfsync, timeout_s=timeout_s)
    try:
        yield server
    finally:
        server.kill()
