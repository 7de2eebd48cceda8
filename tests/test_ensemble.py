"""The embedded ZooKeeper ensemble: serving, quorum arithmetic, clear errors, and the `tenure zk` command."""

from __future__ import annotations

import errno
import inspect
import re
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from tenure.election import four_letter_word
from tenure.service.cli._local import zk as zk_command
from tenure.service.drill._settings import DrillSettings
from tenure.service.local import (
    Ensemble,
    EnsembleError,
    Topology,
    find_java,
    free_port,
    running_ensemble,
    wait_for,
)
from tests._replicas import TENURE, descendants, tenure
from tests.conftest import ZK_TICK_MS, free_zk_base_port


def _write(hosts: str, path: str, timeout_s: float = 5.0) -> None:
    """Create a znode through a fresh client (raises if the ensemble cannot serve the write)."""
    client = KazooClient(hosts=hosts, timeout=timeout_s, connection_retry={"max_tries": 2})
    try:
        client.start(timeout=timeout_s)
        client.create(path, b"v", makepath=True)
    finally:
        client.stop()
        client.close()


def test_shared_ensemble_serves_reads_and_writes(zk_client: KazooClient, zk_group: str) -> None:
    """The session ensemble serves: a znode written is read back, from ZooKeeper 3.9."""
    zk_client.create(f"/tenure/{zk_group}/probe", b"hello", makepath=True)
    assert zk_client.get(f"/tenure/{zk_group}/probe")[0] == b"hello"
    assert zk_client.server_version()[:2] == (3, 9)


def _zoo_cfg(tick_ms: int, directory: Path) -> dict[str, str]:
    """The zoo.cfg an ensemble at ``tick_ms`` writes for its first server, as key → value (nothing started)."""
    ensemble = Ensemble(servers=3, port=2181, directory=directory, tick_ms=tick_ms)
    text = ensemble._write_config(ensemble.servers[0]).read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@pytest.mark.parametrize(
    ("tick_ms", "init_limit", "sync_limit", "min_session_ms", "max_session_ms"),
    [
        pytest.param(Ensemble.DEFAULT_TICK_MS, "100", "50", "2000", "60000", id="default-200ms"),
        pytest.param(500, "40", "20", "2000", "60000", id="500ms"),
        pytest.param(2000, "10", "5", "4000", "60000", id="zookeeper-usual-2000ms"),
        pytest.param(10000, "2", "1", "20000", "200000", id="longest-10s-widens-bounds"),
    ],
)
def test_config_keeps_wall_clock_limits_and_explicit_session_bounds(
        tmp_path: Path, tick_ms: int, init_limit: str, sync_limit: str, min_session_ms: str,
        max_session_ms: str) -> None:
    """zoo.cfg gives the quorum 20 s to sync and 10 s to answer whatever the tick (initLimit and syncLimit
    count ticks), and grants sessions of 2–60 s, widened to ZooKeeper's 2 and 20 ticks only at a long tick."""
    cfg = _zoo_cfg(tick_ms, tmp_path)
    assert (cfg["tickTime"], cfg["initLimit"], cfg["syncLimit"]) == (str(tick_ms), init_limit, sync_limit)
    assert (cfg["minSessionTimeout"], cfg["maxSessionTimeout"]) == (min_session_ms, max_session_ms)


def test_default_tick_is_short(tmp_path: Path) -> None:
    """The default tick is 200 ms, so a dead session is expired within 0.3 s of its timeout (1.5 ticks)."""
    ensemble = Ensemble(servers=1, port=2181, directory=tmp_path)
    assert ensemble.tick_ms == Ensemble.DEFAULT_TICK_MS == 200
    assert ensemble.session_timeout_bounds_s == (2.0, 60.0)


@pytest.mark.parametrize(
    "tick_of",
    [
        pytest.param(lambda _d: next(p.default for p in zk_command.params if p.name == "tick_ms"), id="tenure-zk"),
        pytest.param(lambda d: Topology(d, replicas=0).ensemble.tick_ms, id="topology-up-demo"),
        pytest.param(lambda _d: DrillSettings.make(career="counter", records=None, short=False).zk_tick_ms,
                     id="drill"),
        pytest.param(lambda _d: DrillSettings.make(career="counter", records=None, short=True).zk_tick_ms,
                     id="drill-short"),
        pytest.param(lambda _d: inspect.signature(running_ensemble).parameters["tick_ms"].default, id="bench"),
        pytest.param(lambda _d: ZK_TICK_MS, id="tests"),
    ],
)
def test_every_launcher_of_the_embedded_ensemble_uses_the_default_tick(
        tmp_path: Path, tick_of: Callable[[Path], int]) -> None:
    """`tenure zk`, the local topology (`tenure up`, demo, drills), the benchmarks and the tests' ensemble all
    run ZooKeeper at the default tick, so each gets the same prompt session expiry."""
    assert tick_of(tmp_path) == Ensemble.DEFAULT_TICK_MS


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ensemble]:
    """One standalone server with every default (tick included), for the session negotiation tests."""
    ensemble = Ensemble(servers=1, port=free_zk_base_port(1), directory=tmp_path_factory.mktemp("zk-default"))
    try:
        ensemble.start()
        yield ensemble
    finally:
        ensemble.stop()


def _granted_timeout_ms(ensemble: Ensemble, client: KazooClient) -> int:
    """The session timeout the server negotiated for ``client`` (``to=`` in its ``cons`` line); kazoo keeps
    only the timeout it asked for."""
    server = ensemble.servers[0]
    session = f"sid=0x{client.client_id[0]:x}"
    reply = four_letter_word(server.host, server.client_port, "cons")
    line = next((row for row in reply.splitlines() if re.search(rf"{session}\b", row)), None)
    assert line is not None, f"the server lists no {session}: {reply}"
    match = re.search(r"\bto=(\d+)", line)
    assert match is not None, line
    return int(match.group(1))


@pytest.mark.parametrize(
    ("asked_s", "granted_ms"),
    [
        pytest.param(2.0, 2000, id="2s-below-2-ticks-of-the-old-2000ms"),
        pytest.param(4.0, 4000, id="4s-the-benchmarks-timeout"),
        pytest.param(60.0, 60000, id="60s-far-above-20-ticks"),
        pytest.param(1.0, 2000, id="1s-raised-to-the-2s-minimum"),
        pytest.param(90.0, 60000, id="90s-lowered-to-the-60s-maximum"),
    ],
)
def test_session_timeouts_are_granted_as_asked(default_server: Ensemble, asked_s: float, granted_ms: int) -> None:
    """With the defaults a client gets the session timeout it asks for anywhere in 2–60 s (far outside the 2 to
    20 ticks ZooKeeper would allow on its own), and the nearest bound outside it; `conf` reports those bounds,
    which `tenure run` checks its --session-timeout-s against."""
    client = KazooClient(hosts=default_server.connect_string, timeout=asked_s)
    try:
        client.start(timeout=30)
        assert _granted_timeout_ms(default_server, client) == granted_ms
    finally:
        client.stop()
        client.close()
    server = default_server.servers[0]
    conf = four_letter_word(server.host, server.client_port, "conf")
    bounds = dict(re.findall(r"^(tickTime|minSessionTimeout|maxSessionTimeout)=(\d+)", conf, re.M))
    assert bounds == {"tickTime": "200", "minSessionTimeout": "2000", "maxSessionTimeout": "60000"}


def test_quorum_arithmetic(private_ensemble: Ensemble) -> None:
    """1 of 3 lost: writes go on; 2 of 3 lost: writes fail; both back: writes succeed again."""
    hosts = private_ensemble.connect_string
    zk_leader = private_ensemble.leader()
    private_ensemble.kill(zk_leader)
    private_ensemble.wait_serving(30, [s for s in private_ensemble if s is not zk_leader])
    _write(hosts, "/q/one-lost")

    second = next(s for s in private_ensemble if s.running)
    private_ensemble.kill(second)
    with pytest.raises((KazooException, KazooTimeoutError)):
        _write(hosts, "/q/two-lost", timeout_s=3.0)

    private_ensemble.start_server(zk_leader)
    private_ensemble.start_server(second)
    private_ensemble.wait_serving(60)
    _write(hosts, "/q/recovered")


def test_port_clash_is_one_clear_error(tmp_path: Path) -> None:
    """A client port already held gives EnsembleError naming the port and the fix, and starts nothing."""
    base = free_zk_base_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 1))
        holder.listen()
        ensemble = Ensemble(servers=3, port=base, directory=tmp_path)
        with pytest.raises(EnsembleError, match=rf"port {base + 1} \(for zk2\) is already in use"):
            ensemble.start()
    assert all(s.process is None for s in ensemble)


def _tcp_states(port: int) -> list[str]:
    """States (hex, as in /proc/net/tcp: 06 = TIME_WAIT, 0A = LISTEN) of the IPv4 sockets on local ``port``."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return [row[3] for row in rows if int(row[1].rsplit(":", 1)[1], 16) == port]


def _leave_time_wait(port: int) -> None:
    """A connection to 127.0.0.1:``port`` closed by the listening side first, so its TIME_WAIT sits on
    ``port`` (as a stopped ZooKeeper leaves its clients' connections); the listener sets SO_REUSEADDR, as the
    JVM's server sockets do."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            conn, _ = listener.accept()
            conn.close()
            assert client.recv(1) == b""  # the server's FIN
    wait_for(lambda: _tcp_states(port) == ["06"], 5, f"one TIME_WAIT and nothing else on port {port}")


def test_port_in_time_wait_is_free_but_a_listener_is_not(tmp_path: Path) -> None:
    """A port whose only socket lingers in TIME_WAIT passes the port check (ZooKeeper binds it with
    SO_REUSEADDR), and `tenure zk` serves on it; a port with a live listener is still one clear error."""
    port = free_zk_base_port(1)
    _leave_time_wait(port)
    with socket.socket() as plain, pytest.raises(OSError) as refused:
        plain.bind(("127.0.0.1", port))  # what the port check did: refused for a minute after a stop
    assert refused.value.errno == errno.EADDRINUSE
    Ensemble(servers=1, port=port, directory=tmp_path / "check")._preflight()
    proc = subprocess.Popen([*TENURE, "zk", "--servers", "1", "--port", str(port), "--dir", str(tmp_path / "zk")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != f"127.0.0.1:{port}":
            proc.kill()
            pytest.fail(f"`tenure zk` did not serve on port {port}: {line!r} {proc.communicate()[1]}")
        _write(f"127.0.0.1:{port}", "/time-wait/probe")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # reuse lets TIME_WAIT by, not a listener
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with pytest.raises(EnsembleError, match=rf"^port {port} \(for zk1\) is already in use: stop what holds "
                                                "it or choose another --port$"):
            Ensemble(servers=1, port=port, directory=tmp_path / "check")._preflight()


def test_unwritable_directory_is_one_clear_error(tmp_path: Path) -> None:
    """A data directory that cannot be created names the directory and asks for a writable one."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(EnsembleError, match="choose a writable --dir"):
        Ensemble(servers=1, port=free_zk_base_port(1), directory=blocker / "zk").start()


def test_missing_java_and_jars_are_clear_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No java on PATH, and a ZooKeeper classpath with no jar, each give a one-line error with the fix."""
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnsembleError, match="java not found: install a Java 17"):
        find_java()
    monkeypatch.undo()
    monkeypatch.setenv("TENURE_ZK_CLASSPATH", str(tmp_path / "nothing" / "*"))
    with pytest.raises(EnsembleError, match="holds no ZooKeeper jar"):
        Ensemble(servers=1, port=free_zk_base_port(1), directory=tmp_path / "zk").start()


def test_old_java_is_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A Java older than 17 is named and refused."""
    fake_home = tmp_path / "jdk8"
    (fake_home / "bin").mkdir(parents=True)
    java = fake_home / "bin" / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "1.8.0_392"\' >&2\n')
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(fake_home))
    with pytest.raises(EnsembleError, match="is Java 8; ZooKeeper from PySpark 4 needs Java 17"):
        find_java()


def test_cli_prints_connect_string_and_stops_clean_on_sigterm(tmp_path: Path) -> None:
    """`tenure zk` prints the connect string once serving, and SIGTERM leaves no java process behind."""
    base = free_zk_base_port()
    proc = subprocess.Popen([*TENURE, "zk", "--servers", "3", "--port", str(base), "--dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
        _write(line, "/cli/probe")
        ours = descendants(proc.pid)
        assert len(ours) == 3  # one java per server
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in ours), 10, "every java to be gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_port_clash_exits_nonzero_with_one_line(tmp_path: Path) -> None:
    """`tenure zk` on a held port prints one error line and exits 2."""
    base = free_zk_base_port(1)
    with socket.socket() as holder:
        # As the free-port probe and the JVM do: a connection of an earlier test lingering in TIME_WAIT on this
        # port would refuse a plain bind; a listening socket still holds the port against ZooKeeper's.
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", base))
        holder.listen()
        result = tenure("zk", "--servers", "1", "--port", str(base), "--dir", str(tmp_path), timeout_s=60)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("tenure: error:")]
    assert errors == [f"tenure: error: port {base} (for zk1) is already in use: stop what holds it or "
                      "choose another --port"]


def test_a_free_port_is_drawn_below_the_ephemeral_range_and_above_the_ensembles() -> None:
    """``free_port`` gives a port nobody holds, outside the range the kernel hands out as outgoing connections'
    source ports (where CI saw a replica's metrics port taken between the draw and the bind) and above the
    ensembles' ports."""
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(50):
        port = free_port()
        assert 22010 < port < ephemeral_start, port
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
