"""The embedded ZooKeeper ensemble: serving, quorum arithmetic, clear errors, and the `tenure zk` command."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from service.local import Ensemble, EnsembleError, find_java
from tests._replicas import descendants, wait_for
from tests.conftest import free_zk_base_port

TENURE = [sys.executable, "-m", "service"]


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
        holder.bind(("127.0.0.1", base))
        holder.listen()
        result = subprocess.run([*TENURE, "zk", "--servers", "1", "--port", str(base), "--dir", str(tmp_path)],
                                capture_output=True, text=True, timeout=60, env={**os.environ}, check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("tenure: error:")]
    assert errors == [f"tenure: error: port {base} (for zk1) is already in use: stop what holds it or "
                      "choose another --port"]
