"""`tenure up`: the local topology starts, elects one leader, is scraped by a real Prometheus, and stops clean."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from tenure.career.lifecycle import HANDED_OVER
from tenure.election import RELEASE_INCOMPLETE, GroupPaths, connected, read_group_identity
from tenure.service.local import REPLICA_STOPPED, TOPOLOGY_STOPPED, Topology, free_port, wait_for
from tenure.service.replica import ReplicaSpec
from tests._prometheus import alerts, prometheus_binary, query, running_prometheus, scrape_config
from tests._replicas import REPO, TENURE, counter_replica_set, descendants


def _up(tmp_path: Path, *flags: str) -> subprocess.Popen[str]:
    """`tenure up` on a counter career in tmp_path with quick elections and ``flags``, its terminal on a pipe."""
    return subprocess.Popen([*TENURE, "up", "--dir", str(tmp_path), "--career", "counter", "--session-timeout-s", "4",
                             "--handover-timeout-s", "2", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _endpoints(proc: subprocess.Popen[str]) -> str:
    """The line where `tenure up` prints its endpoints (metrics, ZooKeeper, Redis), read off its terminal."""
    assert proc.stdout is not None
    stdout = proc.stdout

    def endpoints() -> str | None:
        line = stdout.readline()
        assert line, "tenure up exited before printing its endpoints"
        return line if "metrics:" in line else None

    return wait_for(endpoints, 90, "tenure up to print its endpoints", interval_s=0)


def test_up_elects_one_leader_and_stops_clean(tmp_path: Path) -> None:
    """`tenure up --career counter`: one leader, metrics on every replica; a replica that dies is restarted and
    the terminal says so; SIGTERM leaves no process behind."""
    proc = _up(tmp_path, "--replicas", "3")
    try:
        first = _endpoints(proc)
        assert proc.stdout is not None
        stdout = proc.stdout
        ports = [int(p.rsplit(":", 1)[1]) for p in first.split("metrics:")[1].strip().split(", ")]
        assert len(ports) == 3
        # A replica still importing answers no scrape yet and shows as down: wait until all three are up.
        line = wait_for(lambda: next((ln for ln in iter(stdout.readline, "")
                                      if "LEADER" in ln and "=down" not in ln), None),
                        90, "a status line naming the leader, every replica up")
        assert line.count("LEADER") == 1 and line.count("follower") == 2, line
        follower = next(part.split("=")[0] for part in line.split()[1:] if part.endswith("=follower"))
        replica_pid = next(pid for pid in descendants(proc.pid)
                           if f"--replica-id\0{follower}\0".encode() in Path(f"/proc/{pid}/cmdline").read_bytes())
        os.kill(replica_pid, signal.SIGKILL)
        exited = wait_for(lambda: next((ln for ln in iter(stdout.readline, "") if f"{follower} exited" in ln),
                                       None), 30, f"up to report {follower}'s exit")
        assert "killed by signal 9" in exited and "restarting in 1 s" in exited
        wait_for(lambda: next((ln for ln in iter(stdout.readline, "") if f"{follower} restarted" in ln), None),
                 30, f"up to restart {follower}")
        wait_for(lambda: next((ln for ln in iter(stdout.readline, "") if ln.count("follower") == 2), None),
                 60, f"{follower} back in line")
        children = descendants(proc.pid)
        assert len(children) >= 6  # 3 ZooKeeper servers and 3 replicas
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children), 15,
                 "every child process to be gone")
        rest = proc.stdout.read()
        assert not [ln for ln in rest.splitlines() if ln.startswith('{"')], "events belong in logs/up.log"
        assert f'"event": "{TOPOLOGY_STOPPED}"' in (tmp_path / "logs" / "up.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_up_queues_runs_a_topic_of_several_queues_for_replicas_and_producer(tmp_path: Path) -> None:
    """`tenure up --queues 3 --produce N`: the replicas' group records three queues, the producer writes a topic of
    three, every queue is led, and each status line names the queues each leader leads; SIGTERM stops it with 0."""
    proc = _up(tmp_path, "--replicas", "2", "--queues", "3", "--produce", "300", "--rate", "500")
    try:
        first = _endpoints(proc)
        assert proc.stdout is not None
        stdout = proc.stdout
        zk = first.split("ZooKeeper:")[1].split()[0]

        def every_queue_led() -> str | None:
            line = stdout.readline()
            assert line, "tenure up exited early"
            led = {int(q) for part in re.findall(r"queues=(\d+(?:,\d+)*)", line) for q in part.split(",")}
            return line if led == {0, 1, 2} and "=down" not in line else None

        line = wait_for(every_queue_led, 90, "a status line where the leaders lead queues 0, 1 and 2")
        assert "LEADER(queues=" in line, line
        with connected(zk, read_only=True) as client:
            bound = read_group_identity(client, "default")
        assert bound is not None and bound.queue_count == 3
        topic = tmp_path / "data" / "_topic.json"  # the producer writes it; a new leader may start sooner
        wait_for(topic.is_file, 30, "the producer's _topic.json")
        assert json.loads(topic.read_text())["queues"] == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _read_pty(fd: int, out: bytearray, until: Callable[[str], bool], timeout_s: float) -> bool:
    """Append what the terminal shows to ``out`` until ``until(text)`` or EOF; False on the deadline."""

    def shown() -> bool:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child side closed
                chunk = b""
            if not chunk:
                return True  # EOF: nothing more will show
            out.extend(chunk)
        return until(_ANSI.sub("", out.decode(errors="replace")))

    try:
        wait_for(shown, timeout_s, "the terminal to show it", interval_s=0)
    except TimeoutError:
        return False
    return until(_ANSI.sub("", out.decode(errors="replace")))


def test_ctrl_c_at_a_terminal_stops_in_the_promised_order(tmp_path: Path) -> None:
    """Ctrl-C at a terminal sends SIGINT to the terminal's whole foreground process group. Only `tenure up` may
    take it: the followers, then the leader with a graceful handover, then ZooKeeper. Were the ZooKeeper servers in
    the group, they would die first and every replica's release would fail (exit 1)."""
    argv = [*TENURE, "up", "--replicas", "3", "--dir", str(tmp_path), "--career", "counter",
            "--session-timeout-s", "4", "--handover-timeout-s", "2"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session leader with the pseudo-terminal as its controlling terminal
        os.chdir(REPO)
        os.execve(sys.executable, argv, {**os.environ, "PYTHONUNBUFFERED": "1"})
    out = bytearray()
    try:
        assert _read_pty(fd, out, lambda text: " leader " in text, 90), _ANSI.sub("", out.decode(errors="replace"))
        children = descendants(pid)
        assert len(children) >= 6  # 3 ZooKeeper servers and 3 replicas
        os.write(fd, b"\x03")  # Ctrl-C, as a user types it: the line discipline turns it into SIGINT
        _read_pty(fd, out, lambda _text: False, 90)  # until EOF
        _, status = os.waitpid(pid, 0)
        text = _ANSI.sub("", out.decode(errors="replace"))
        assert os.waitstatus_to_exitcode(status) == 0, text[-3000:]
        assert REPLICA_STOPPED not in text, "the terminal shows the report; events go to logs/up.log"
        events = [json.loads(line) for line in (tmp_path / "logs" / "up.log").read_text().splitlines()]
        names = [e["event"] for e in events]
        stopped = [(e["exit_code"], e["replica_id"]) for e in events if e["event"] == REPLICA_STOPPED]
        assert [code for code, _ in stopped] == [0, 0, 0], names
        leader_log = (tmp_path / "logs" / f"{stopped[-1][1]}.log").read_text()
        assert f'"{HANDED_OVER}"' in leader_log and RELEASE_INCOMPLETE not in leader_log
        assert names.index(REPLICA_STOPPED) < names.index(TOPOLOGY_STOPPED)
        wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in children), 15, "every child process to be gone")
    finally:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG) == (0, 0):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        os.close(fd)


@pytest.mark.skipif(prometheus_binary() is None, reason="prometheus server not installed (Debian package prometheus)")
@pytest.mark.timeout(180)
def test_prometheus_scrapes_the_topology_and_alerts_on_no_leader(tmp_path: Path) -> None:
    """A real Prometheus scrapes `tenure up`'s replicas: it sees one leader; with every replica stopped the
    TenureNoLeader rule goes pending."""
    topology = Topology(tmp_path / "up", replicas=3,
                        spec=ReplicaSpec(career="counter", session_timeout_s=4, handover_timeout_s=2))
    topology.start()
    try:
        config = scrape_config([f"127.0.0.1:{r.port}" for r in topology.replicas])
        port = free_port()
        with running_prometheus(config, tmp_path / "prometheus", port):
            topology.wait_for_leader(60)

            def one_leader_seen() -> bool | None:
                result = query(port, "sum(tenure_is_leader)")
                return True if result and float(result[0]["value"][1]) == 1.0 else None

            wait_for(one_leader_seen, 30, "Prometheus to see exactly one leader", interval_s=0.2)
            for replica in topology.replicas:
                replica.stop(10)

            def no_leader_alert() -> dict[str, Any] | None:
                return next((a for a in alerts(port) if a["labels"]["alertname"] == "TenureNoLeader"), None)

            started = time.monotonic()
            alert = wait_for(no_leader_alert, 30, "TenureNoLeader to go pending", interval_s=0.2)
            assert alert["state"] == "pending", f"after {time.monotonic() - started:.1f} s"
    finally:
        topology.stop()


def test_a_replica_stopped_while_it_imports_exits_0_and_joins_nothing(zk_hosts: str, zk_group: str,
                                                                     zk_client: Any, tmp_path: Path) -> None:
    """Ctrl-C a second after `tenure up` stops replicas that are still importing, before their handlers are in
    place. The launcher starts them with SIGTERM blocked, so the stop waits for the handlers and ends in a clean
    exit 0 with nothing joined, not in death by the signal (exit -15 in `tenure up`'s log, as CI once saw)."""
    replicas = counter_replica_set(zk_hosts, zk_group, tmp_path)
    try:
        replica = replicas.start("r1")
        replica.signal(signal.SIGTERM)  # at once: the interpreter is still importing tenure
        assert replica.wait(60) == 0, replica.log_path.read_text()[-2000:]
        assert replica.has_event("stopped_while_starting", signal="SIGTERM")
        assert not replica.has_event("joined")
        election = GroupPaths(zk_group).election
        assert not zk_client.exists(election) or zk_client.get_children(election) == []
    finally:
        replicas.reap_all()


def test_up_with_redis_runs_an_embedded_redis_beside_the_ensemble_and_reaps_it(tmp_path: Path) -> None:
    """`tenure up --redis`: an embedded Redis is started before the replicas (its topic's URL printed with the
    endpoints, prefixed by the group), answers, and is stopped with the rest on SIGTERM: no process left."""
    proc = _up(tmp_path, "--replicas", "1", "--redis")
    try:
        first = _endpoints(proc)
        url = re.search(r"Redis: (\S+)", first)
        assert url is not None and url.group(1).endswith("?prefix=default"), first
        client = redis.Redis.from_url(url.group(1).split("?")[0], socket_timeout=5)
        assert client.ping()
        client.close()
        children = descendants(proc.pid)
        assert any(b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children), 15,
                 "every child process to be gone, Redis's too")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
