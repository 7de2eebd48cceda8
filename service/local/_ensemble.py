"""A real ZooKeeper ensemble launched from the jars inside the PySpark wheel (the embedded default).

Longer than the other modules: it is the one place that knows the servers' ports, folders and process handling,
which starting the ensemble, stopping and restarting one server and waiting until it serves share.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import structlog

from tenure.election import four_letter_word
from tenure.errors import TenureError
from tenure.service.local._wait import watch_until_stopped

__all__ = [
    "Ensemble",
    "EnsembleError",
    "Server",
    "die_with_parent",
    "find_java",
    "find_zk_classpath",
    "free_base_port",
    "running_ensemble",
    "start_ensemble",
]

_log = structlog.get_logger("tenure.zk")

_MIN_JAVA = 17
_QUORUM_OFFSET = 1000  # quorum port = client port + 1000; election port = client port + 2000
_ELECTION_OFFSET = 2000
# Wall-clock tolerances of the quorum, turned into initLimit and syncLimit (which count ticks) for any tickTime:
# the 20 s and 10 s that initLimit=10, syncLimit=5 gave at ZooKeeper's usual 2000 ms, enough for a follower on a
# loaded 2-core machine to sync at start-up and to answer the leader's pings.
_INIT_LIMIT_S = 20.0
_SYNC_LIMIT_S = 10.0
# Session timeouts granted as asked (ZooKeeper's own bounds, 2 to 20 ticks, would clamp them to 0.4–4 s at a
# 200 ms tick). Below 2 s a GC pause or a busy machine turns into a leadership change; 60 s is already a very
# slow crash failover.
_MIN_SESSION_S = 2.0
_MAX_SESSION_S = 60.0


class EnsembleError(TenureError):
    """The embedded ensemble cannot start or serve; the message names the problem and the fix."""


def find_java() -> str:
    """Return the path of a Java 17+ runtime (``$JAVA_HOME/bin/java`` first, then ``PATH``)."""
    home = os.environ.get("JAVA_HOME")
    candidate = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if not candidate or not Path(candidate).exists():
        raise EnsembleError("java not found: install a Java 17+ runtime (e.g. openjdk-17-jre-headless) "
                            "or set JAVA_HOME")
    out = subprocess.run([candidate, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise EnsembleError(f"cannot tell the version of {candidate}: install a Java 17+ runtime")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8" style
        major = int(match.group(2))
    if major < _MIN_JAVA:
        raise EnsembleError(f"{candidate} is Java {major}; ZooKeeper from PySpark 4 needs Java {_MIN_JAVA}+: "
                            "install it or point JAVA_HOME at one")
    return candidate


def find_zk_classpath() -> str:
    """The classpath holding ZooKeeper's server: ``$TENURE_ZK_CLASSPATH`` or the PySpark wheel's jars."""
    override = os.environ.get("TENURE_ZK_CLASSPATH")
    if override:
        entries = [Path(e) for e in override.split(os.pathsep) if e]
        jars = [j for e in entries for j in (e.parent.glob("zookeeper-*.jar") if e.name == "*" else [e])]
        if not any(j.exists() for j in jars):
            raise EnsembleError(f"TENURE_ZK_CLASSPATH={override} holds no ZooKeeper jar: point it at the server "
                                "jars (for example /opt/zookeeper/lib/*)")
        return override
    try:
        import pyspark
    except ImportError as exc:
        raise EnsembleError("pyspark is not installed, so its ZooKeeper jars cannot be found: "
                            "pip install 'pyspark>=4' or set TENURE_ZK_CLASSPATH") from exc
    jars_dir = Path(pyspark.__file__).parent / "jars"
    if not list(jars_dir.glob("zookeeper-*.jar")):
        raise EnsembleError(f"no zookeeper-*.jar in {jars_dir}: reinstall pyspark 4.x or set "
                            "TENURE_ZK_CLASSPATH to the ZooKeeper server jars")
    return f"{jars_dir}/*"


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` that has the kernel send ``sig`` to the child when its parent dies (Linux
    PR_SET_PDEATHSIG), so no child outlives a parent that was itself killed."""

    def _set() -> None:
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, sig)

    return _set


def free_base_port(servers: int = 3, *, low: int = 10000, high: int = 20000) -> int:
    """A random client port P in [low, high) with P+i, P+1000+i and P+2000+i free (the ensemble's layout).

    Random rather than the first free range: a drill restarts a killed server on its old port, and another
    ensemble scanning from the bottom could take it meanwhile. The default range stays below Linux's
    ephemeral ports (32768+), which outgoing connections take.
    """
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(low, high)
        if all(_port_free(base + off + i) for off in (0, _QUORUM_OFFSET, _ELECTION_OFFSET) for i in range(servers)):
            return base
    raise EnsembleError(f"no free port range for an ensemble in {low}–{high + _ELECTION_OFFSET}: free some ports")


def _port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a ZooKeeper server could listen on ``port`` now.

    The probe sets ``SO_REUSEADDR`` as the JVM's server sockets do: without it, connections of a stopped
    ensemble lingering in TIME_WAIT (about a minute) would make a free port look taken. With it, only a
    port something listens on (or holds bound without ``SO_REUSEADDR``) is refused.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


@dataclass
class Server:
    """One ZooKeeper server of the ensemble; ``name`` is ``zk<id>``."""

    server_id: int
    client_port: int
    quorum_port: int
    election_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    host: str = "127.0.0.1"  # the client address it listens on (quorum traffic stays on loopback)

    @property
    def name(self) -> str:
        return f"zk{self.server_id}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def mode(self) -> str | None:
        """``leader``, ``follower`` or ``standalone`` when serving; ``None`` when not serving."""
        try:
            reply = four_letter_word(self.host, self.client_port, "srvr")
        except OSError:
            return None
        match = re.search(r"^Mode: (\w+)", reply, re.MULTILINE)
        return match.group(1) if match else None


class Ensemble:
    """A ZooKeeper ensemble of 1 or 3 local servers run from the PySpark jars.

    Client ports are ``port, port+1, …``; quorum ports ``port+1000+i`` and election ports ``port+2000+i``,
    so the three kinds never clash. Data and logs live under ``directory/zk<id>/``. Clients connect on
    ``client_address`` (loopback by default; drills use a veth address that a network namespace can reach).

    Timing: ZooKeeper expires sessions in buckets one ``tickTime`` wide (its ``ExpiryQueue``), and a follower
    passes its clients' heartbeats on to the leader only at the leader's pings, twice a tick. A crashed leader's
    session therefore ends up to 1.5 ticks after its timeout, and every crash failover waits for that: up to 3 s
    at ZooKeeper's usual 2000 ms. ``DEFAULT_TICK_MS`` (200 ms) makes it at most 0.3 s, leaving room within
    "session timeout + 0.5 s" for the watch and the successor's checks, for ten pings a second per follower (no
    measurable cost). A shorter tick would gain little more and bring ticks near a loaded machine's scheduling
    delays (a JVM thread woken late). The written ``zoo.cfg`` keeps what ticks would otherwise
    shrink: ``initLimit``/``syncLimit`` give the quorum 20 s / 10 s whatever the tick, and ``min/maxSessionTimeout``
    grant sessions of 2–60 s as asked (see ``session_timeout_bounds_s``) instead of clamping them to 2–20 ticks.

    Example::

        with Ensemble(servers=3, port=2181, directory=Path("/tmp/zk")) as zk:
            print(zk.connect_string)   # 127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183
            zk.kill(zk.leader())       # SIGKILL the ZooKeeper leader
    """

    #: The embedded ensemble's tickTime (see "Timing" above); `tenure zk`, `tenure up` and drills use it.
    DEFAULT_TICK_MS: ClassVar[int] = 200

    def __init__(self, *, servers: int = 3, port: int = 2181, directory: Path, tick_ms: int = DEFAULT_TICK_MS,
                 heap_mb: int = 256, client_address: str = "127.0.0.1", max_client_cnxns: int | None = None) -> None:
        if tick_ms <= 0:
            raise EnsembleError(f"tick_ms={tick_ms} must be positive: ZooKeeper's tickTime is in milliseconds "
                                f"(default {self.DEFAULT_TICK_MS})")
        if servers not in (1, 3):
            raise EnsembleError(f"servers={servers} is not supported: use 1 (standalone) or 3 (a quorum of 2)")
        if not 1024 <= port <= 65535 - _ELECTION_OFFSET - servers:
            raise EnsembleError(f"port={port} is out of range: pick a client port between 1024 and "
                                f"{65535 - _ELECTION_OFFSET - servers}")
        self.tick_ms = tick_ms
        self.heap_mb = heap_mb
        # ZooKeeper caps connections per address and server (60); 0 lifts the cap, for a benchmark that opens one
        # session per contender, all from 127.0.0.1.
        self.max_client_cnxns = max_client_cnxns
        self.directory = Path(directory)
        self.servers = [
            Server(i, port + i - 1, port + _QUORUM_OFFSET + i - 1, port + _ELECTION_OFFSET + i - 1,
                   self.directory / f"zk{i}", host=client_address)
            for i in range(1, servers + 1)
        ]
        self._java: str | None = None
        self._classpath: str | None = None

    @property
    def connect_string(self) -> str:
        return ",".join(s.address for s in self.servers)

    @property
    def session_timeout_bounds_s(self) -> tuple[float, float]:
        """The session timeouts the servers grant as asked: 2–60 s, each bound raised to ZooKeeper's own (2 and
        20 ticks) where that is higher, as at a long tick: a session under 2 ticks cannot be expired on time."""
        tick_s = self.tick_ms / 1000
        return max(_MIN_SESSION_S, 2 * tick_s), max(_MAX_SESSION_S, 20 * tick_s)

    def __enter__(self) -> Ensemble:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __iter__(self) -> Iterator[Server]:
        return iter(self.servers)

    def server(self, name_or_id: str | int) -> Server:
        for s in self.servers:
            if name_or_id in (s.server_id, s.name):
                return s
        raise EnsembleError(f"no server {name_or_id!r} in this ensemble (have {[s.name for s in self.servers]})")

    # 1. Preflight: java, jars, ports and directory, so every error is one clear line before any launch.
    def _preflight(self) -> None:
        self._java = find_java()
        self._classpath = find_zk_classpath()
        for s in self.servers:
            ports = (s.client_port,) if len(self.servers) == 1 else (s.client_port, s.quorum_port, s.election_port)
            for p in ports:
                if not _port_free(p, s.host if p == s.client_port else "127.0.0.1"):
                    raise EnsembleError(f"port {p} (for {s.name}) is already in use: stop what holds it or "
                                        "choose another --port")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            probe = self.directory / ".write-probe"
            probe.write_text("ok")
            probe.unlink()
        except OSError as exc:
            raise EnsembleError(f"cannot write to {self.directory} ({exc.strerror}): choose a writable --dir") \
                from exc

    def _write_config(self, s: Server) -> Path:
        data = s.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        low_s, high_s = self.session_timeout_bounds_s
        lines = [
            f"tickTime={self.tick_ms}",
            f"initLimit={math.ceil(_INIT_LIMIT_S * 1000 / self.tick_ms)}",
            f"syncLimit={math.ceil(_SYNC_LIMIT_S * 1000 / self.tick_ms)}",
            f"minSessionTimeout={round(low_s * 1000)}",
            f"maxSessionTimeout={round(high_s * 1000)}",
            f"dataDir={data}",
            f"clientPort={s.client_port}",
            f"clientPortAddress={s.host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
            "preAllocSize=4096",
        ]
        if self.max_client_cnxns is not None:
            lines.append(f"maxClientCnxns={self.max_client_cnxns}")
        if len(self.servers) > 1:
            (data / "myid").write_text(f"{s.server_id}\n")
            lines += [f"server.{o.server_id}=127.0.0.1:{o.quorum_port}:{o.election_port}" for o in self.servers]
        cfg = s.directory / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        return cfg

    def start(self, timeout_s: float = 60.0) -> None:
        """Launch every server and return once each one serves clients (raises ``EnsembleError``)."""
        self._preflight()
        for s in self.servers:
            self._launch(s)
        self.wait_serving(timeout_s)
        _log.info("ensemble_serving", connect=self.connect_string, servers=len(self.servers))

    def _launch(self, s: Server) -> None:
        assert self._java and self._classpath, "start() runs the preflight first"
        cfg = self._write_config(s)
        log = (s.directory / "server.log").open("ab")
        cmd = [
            self._java, f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC", "-Xshare:auto",
            f"-Dzookeeper.log.dir={s.directory}", "-Dzookeeper.root.logger=INFO,CONSOLE",
            "-cp", self._classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg),
        ]
        # A session of its own: Ctrl-C at a terminal signals the terminal's whole foreground process group, and
        # the servers must outlive the replicas that release their nodes on them (`tenure up` stops them last).
        s.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True,
                                     preexec_fn=die_with_parent())  # noqa: PLW1509 - only prctl, async-signal-safe
        log.close()
        _log.debug("zk_launched", server=s.name, pid=s.process.pid, port=s.client_port)

    def wait_serving(self, timeout_s: float = 60.0, servers: list[Server] | None = None) -> None:
        """Block until each given server (default: all) answers ``srvr`` with a mode."""
        deadline = time.monotonic() + timeout_s
        pending = list(servers or self.servers)
        while pending:
            for s in list(pending):
                if s.process is not None and s.process.poll() is not None:
                    raise EnsembleError(f"{s.name} (client port {s.client_port}) exited with code "
                                        f"{s.process.returncode} while starting: see {s.directory / 'server.log'}")
                if s.mode():
                    pending.remove(s)
            if pending and time.monotonic() > deadline:
                raise EnsembleError(f"{', '.join(s.name for s in pending)} not serving after {timeout_s:.0f} s: "
                                    f"see {self.directory}/zk*/server.log")
            if pending:
                time.sleep(0.1)

    def leader(self) -> Server:
        """The server that is ZooKeeper's leader now (or the standalone one)."""
        for s in self.servers:
            if s.mode() in ("leader", "standalone"):
                return s
        raise EnsembleError("no ZooKeeper server reports itself leader: the quorum is lost")

    def followers(self) -> list[Server]:
        return [s for s in self.servers if s.mode() == "follower"]

    def kill(self, server: Server | str | int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL by default) to one server and reap it."""
        s = server if isinstance(server, Server) else self.server(server)
        if s.process is None:
            return
        if s.process.poll() is None:
            s.process.send_signal(sig)
            try:
                s.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                s.process.kill()
                s.process.wait()
        _log.info("zk_server_stopped", server=s.name, signal=signal.Signals(sig).name)

    def stop_server(self, server: Server | str | int) -> None:
        """Stop one server gracefully (SIGTERM)."""
        self.kill(server, signal.SIGTERM)

    def start_server(self, server: Server | str | int, *, wait: bool = False, timeout_s: float = 60.0) -> None:
        """(Re)start one stopped server; with ``wait``, return once it serves (needs a quorum)."""
        s = server if isinstance(server, Server) else self.server(server)
        if s.running:
            return
        if self._java is None:
            self._preflight()
        self._launch(s)
        if wait:
            self.wait_serving(timeout_s, [s])

    def dead_servers(self) -> list[Server]:
        """Servers whose process has exited on its own (not reaped by ``kill``)."""
        return [s for s in self.servers if s.process is not None and s.process.poll() is not None]

    def run_until_stopped(self, stop: threading.Event, on_serving: Callable[[str], None]) -> None:
        """``tenure zk``: start, tell ``on_serving`` the connect string, log each server that dies on its own,
        until ``stop`` is set; every server is stopped at the end, also when ``start`` fails.

        Raises:
            EnsembleError: the ensemble cannot start (after stopping what it launched).
        """
        try:
            self.start()
            on_serving(self.connect_string)
            watch_until_stopped(stop, lambda: [s.name for s in self.dead_servers()], self._report_death)
        finally:
            self.stop()

    def _report_death(self, name: str) -> None:
        s = self.server(name)
        _log.error("zk_server_died", server=s.name, port=s.client_port,
                   exit_code=s.process.returncode if s.process else None, log=str(s.directory / "server.log"))

    def stop(self) -> None:
        """Stop every server (SIGTERM, then SIGKILL after a grace period) and reap them."""
        for s in self.servers:
            if s.process is not None and s.process.poll() is None:
                s.process.terminate()
        for s in self.servers:
            if s.process is None:
                continue
            try:
                s.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                s.process.kill()
                s.process.wait()
        _log.info("ensemble_stopped", connect=self.connect_string)


def start_ensemble(directory: Path, *, servers: int = 3, tick_ms: int = Ensemble.DEFAULT_TICK_MS,
                   max_client_cnxns: int | None = None, timeout_s: float = 60.0, attempts: int = 1) -> Ensemble:
    """Start an ensemble on free ports (``free_base_port``); the caller stops it (or use ``running_ensemble``).

    Args:
        attempts: tries, each on a fresh port range, when a port is taken between the probe and the launch
            (other work on this machine takes ports too).

    Raises:
        EnsembleError: it cannot start (what it launched is stopped again).
    """
    for attempt in range(1, attempts + 1):
        ensemble = Ensemble(servers=servers, port=free_base_port(servers), directory=directory, tick_ms=tick_ms,
                            max_client_cnxns=max_client_cnxns)
        try:
            ensemble.start(timeout_s=timeout_s)
            return ensemble
        except EnsembleError as exc:
            ensemble.stop()
            if "already in use" not in str(exc) or attempt == attempts:
                raise
        except BaseException:
            ensemble.stop()
            raise
    raise EnsembleError(f"attempts={attempts} must be at least 1")


@contextlib.contextmanager
def running_ensemble(directory: Path, *, servers: int = 3, tick_ms: int = Ensemble.DEFAULT_TICK_MS,
                     max_client_cnxns: int | None = None, timeout_s: float = 60.0,
                     attempts: int = 1) -> Iterator[Ensemble]:
    """``start_ensemble`` as a context: the ensemble serves inside the block and is stopped at its end.

    Example::

        with running_ensemble(tmp_path / "zk", servers=1) as ensemble:
            client = KazooClient(hosts=ensemble.connect_string)
    """
    ensemble = start_ensemble(directory, servers=servers, tick_ms=tick_ms, max_client_cnxns=max_client_cnxns,
                              timeout_s=timeout_s, attempts=attempts)
    try:
        yield ensemble
    finally:
        ensemble.stop()
