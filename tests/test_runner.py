"""`tenure run` replicas with the counter career: real processes, real signals, the shared real ensemble."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tenure.career.lifecycle import (
    BACKING_OFF,
    CAREER_FAILED,
    HANDED_OVER,
    HANDOVER_RECORDED,
    INAUGURATED,
    INAUGURATING,
    RUNNER_STATE,
)
from tenure.service.local import free_port, wait_for
from tenure.service.replica import ReplicaSpec
from tests._replicas import REPO, Replica, ReplicaSet

SESSION_S = 3.0
HANDOVER_S = 2.0


@pytest.fixture()
def replicas(zk_hosts: str, zk_group: str, tmp_path: Path) -> Iterator[ReplicaSet]:
    """A replica set of the counter career on a shared data root; every process reaped afterwards."""
    spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "data", career="counter", session_timeout_s=SESSION_S,
                       handover_timeout_s=HANDOVER_S, counter_interval_s=0.05, failure_backoff_s=0.5)
    replica_set = ReplicaSet(zk_hosts, spec, tmp_path)
    yield replica_set
    replica_set.reap_all()


def _event_time(replica: Replica, name: str, **fields: object) -> float:
    """Unix time of the last log event ``name`` (with matching fields) of a replica."""
    stamps = [e["timestamp"] for e in replica.log_events()
              if e.get("event") == name and all(e.get(k) == v for k, v in fields.items())]
    assert stamps, f"{replica.replica_id} logged no {name} {fields}"
    return datetime.fromisoformat(stamps[-1].replace("Z", "+00:00")).timestamp()


def _counter_lines(data_root: Path) -> list[tuple[int, int]]:
    """The counter career's committed lines (epoch, number); none before its first commit creates the file."""
    path = data_root / "counter.log"
    if not path.exists():
        return []
    return [(int(e), int(n)) for e, n in (line.split(",") for line in path.read_text().splitlines())]


def _assert_counter_exactly_once(data_root: Path) -> list[tuple[int, int]]:
    """Every n from 1 to the last appears once, in order, and epochs never go down along the file."""
    lines = _counter_lines(data_root)
    assert [n for _, n in lines] == list(range(1, len(lines) + 1)), "a duplicate or missing n"
    epochs = [e for e, _ in lines]
    assert epochs == sorted(epochs), "an older epoch published after a newer one"
    return lines


def _start_three(replicas: ReplicaSet) -> Replica:
    for i in range(1, 4):
        replicas.start(f"r{i}")
    return wait_for(replicas.one_leader, 30, "one leader among three replicas")


def test_three_replicas_one_leader_and_health(replicas: ReplicaSet) -> None:
    """Exactly one replica reports tenure_is_leader 1; /leader is 200 only there; /readyz is 200 on all."""
    leader = _start_three(replicas)
    wait_for(lambda: all(r.get("/readyz")[0] == 200 for r in replicas), 20, "/readyz 200 on every replica")
    assert [r.replica_id for r in replicas.leaders()] == [leader.replica_id]
    for replica in replicas:
        assert replica.get("/leader")[0] == (200 if replica is leader else 503)
        assert replica.get("/livez")[0] == 200
        metrics = replica.metrics()
        assert metrics["tenure_zk_connected"] == 1.0
        assert metrics[f"tenure_info{{group={replicas.spec['group']},host={socket.gethostname()},"
                       f"replica_id={replica.replica_id},version=0.1.0}}"] == 1.0
        assert "process_resident_memory_bytes" in metrics
    assert leader.metrics()["tenure_leader_epoch"] > 0


def test_sigterm_hands_over_cleanly_and_fast(replicas: ReplicaSet, zk_client: KazooClient, zk_group: str,
                                            tmp_path: Path) -> None:
    """SIGTERM: clean handover record, successor inaugurates on the fast path within 1 s, old exits 0."""
    leader = _start_three(replicas)
    wait_for(lambda: leader.metrics().get('tenure_batches_total{outcome=committed}', 0) >= 3, 20, "commits")
    leader.signal(signal.SIGTERM)
    assert leader.wait(HANDOVER_S + 5) == 0
    recorded = [e for e in leader.log_events() if e.get("event") == HANDOVER_RECORDED]
    assert len(recorded) == 1 and recorded[0]["clean"] is True and recorded[0]["last_batch"] >= 3
    successor = wait_for(replicas.one_leader, 10, "a successor")
    wait_for(lambda: successor.has_event(INAUGURATED), 5, "the successor's inauguration")
    assert successor.has_event(INAUGURATING, path="fast", previous=leader.replica_id)
    # The successor marked its own term in progress: a crash from now on is seen as one.
    record = json.loads(zk_client.get(f"/tenure/{zk_group}/handover")[0])
    assert record["clean"] is False and record["replica_id"] == successor.replica_id
    gap = _event_time(successor, INAUGURATED) - _event_time(leader, HANDED_OVER)
    assert gap < 1.0, f"successor inaugurated {gap:.3f} s after the handover"
    wait_for(lambda: len(_counter_lines(tmp_path / "data")) > recorded[0]["last_batch"], 10, "successor commits")
    _assert_counter_exactly_once(tmp_path / "data")


def test_sigkill_successor_within_session_timeout(replicas: ReplicaSet, tmp_path: Path) -> None:
    """SIGKILL: a successor inaugurates within session timeout + 1 s, on the recovery path."""
    leader = _start_three(replicas)
    wait_for(lambda: leader.metrics().get('tenure_batches_total{outcome=committed}', 0) >= 3, 20, "commits")
    killed_at = time.time()
    leader.signal(signal.SIGKILL)
    leader.wait(10)
    successor = wait_for(replicas.one_leader, SESSION_S + 10, "a successor")
    wait_for(lambda: successor.has_event(INAUGURATED), 5, "the successor's inauguration")
    assert successor.has_event(INAUGURATING, path="recovery")
    took = _event_time(successor, INAUGURATED) - killed_at
    assert took < SESSION_S + 1.0, f"successor took {took:.2f} s after SIGKILL"
    count = len(_counter_lines(tmp_path / "data"))
    wait_for(lambda: len(_counter_lines(tmp_path / "data")) > count + 2, 10, "successor commits")
    _assert_counter_exactly_once(tmp_path / "data")


def test_paused_leader_is_fenced_and_steps_down(replicas: ReplicaSet, tmp_path: Path) -> None:
    """SIGSTOP past the session timeout, then SIGCONT: the zombie publishes nothing and follows."""
    leader = _start_three(replicas)
    wait_for(lambda: leader.metrics().get('tenure_batches_total{outcome=committed}', 0) >= 3, 20, "commits")
    zombie_epoch = int(leader.metrics()["tenure_leader_epoch"])
    leader.signal(signal.SIGSTOP)
    successor = wait_for(lambda: next((r for r in replicas.alive() if r is not leader and r.is_leader()), None),
                         SESSION_S + 10, "a successor while the leader is paused")
    before_resume = len(_counter_lines(tmp_path / "data"))
    leader.signal(signal.SIGCONT)
    wait_for(lambda: leader.has_event(RUNNER_STATE, old="paused", new="following")
             or leader.has_event(RUNNER_STATE, old="leading", new="following"), 15, "the zombie to step down")
    wait_for(lambda: len(_counter_lines(tmp_path / "data")) > before_resume + 5, 10, "successor commits")
    assert successor.is_leader() and not leader.is_leader()
    lines = _assert_counter_exactly_once(tmp_path / "data")
    successor_epoch = int(successor.metrics()["tenure_leader_epoch"])
    assert successor_epoch > zombie_epoch
    first_successor_line = next(i for i, (e, _) in enumerate(lines) if e == successor_epoch)
    assert all(e != zombie_epoch for e, _ in lines[first_successor_line:]), "the zombie published after takeover"


def test_failing_career_moves_leadership_and_backs_off(replicas: ReplicaSet, tmp_path: Path) -> None:
    """A career that raises releases leadership to a healthy replica and backs off with growing delays."""
    bad = replicas.start("bad", career="tests.careers:always_fails")
    wait_for(lambda: bad.has_event(CAREER_FAILED), 30, "the failing career to raise")
    good = replicas.start("good")
    wait_for(good.is_leader, 30, "the healthy replica to lead")
    wait_for(lambda: len([e for e in bad.log_events() if e.get("event") == BACKING_OFF]) >= 2
             or good.metrics().get('tenure_batches_total{outcome=committed}', 0) >= 5, 20, "progress")
    delays = [e["seconds"] for e in bad.log_events() if e.get("event") == BACKING_OFF]
    assert delays == sorted(delays) and delays[0] == 0.5
    assert bad.metrics()["tenure_career_failures_total"] >= 1
    wait_for(lambda: len(_counter_lines(tmp_path / "data")) >= 5, 10, "the healthy leader's commits")
    _assert_counter_exactly_once(tmp_path / "data")


def _run_fails(command: list[str], timeout_s: float = 60) -> str:
    """Run ``command`` (`tenure run …`) expecting exit 2 and return its one error line."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=REPO, check=False)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("tenure: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


@pytest.mark.parametrize(
    ("case", "settings", "expected"),
    [
        ("session above the ensemble's maximum", {"session_timeout_s": 90},
         "session_timeout_s=90 is outside the ensemble's bounds of 2–60 s"),
        ("handover not below session", {"session_timeout_s": 4, "handover_timeout_s": 4},
         "handover_timeout_s=4 is not below session_timeout_s=4"),
        ("bad group name", {"group": "a/b"}, "group='a/b' is not a valid group name"),
        ("bad connect string", {"zk": "nonsense"}, "zk='nonsense' is not a ZooKeeper connect string"),
        ("unknown career", {"career": "nope"}, "career='nope' is not a career"),
        ("bad dedup window", {"career": "spark", "dedup_window": "soon"},
         "dedup_window='soon' is not a Spark interval"),
        ("career that cannot load", {"career": "no.such.module:make"}, "career='no.such.module:make' cannot"),
    ],
)
def test_bad_config_one_line_exit_2(zk_hosts: str, tmp_path: Path, case: str, settings: dict[str, object],
                                    expected: str) -> None:
    """Each bad setting gives one error line naming the field, value and fix, and exit code 2."""
    zk = str(settings.pop("zk", zk_hosts))
    spec = ReplicaSpec(data_root=tmp_path, career="counter") | settings
    assert expected in _run_fails(spec.command(zk=zk, replica_id="r1", metrics_port=free_port())), case


def test_port_in_use_and_unreachable_zookeeper(zk_hosts: str, tmp_path: Path) -> None:
    """A taken metrics port, and a ZooKeeper that does not answer in time, each give one line and exit 2."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        spec = ReplicaSpec(data_root=tmp_path, career="counter")
        line = _run_fails(spec.command(zk=zk_hosts, replica_id="r1", metrics_port=port))
    assert f"metrics_port={port} cannot be bound" in line
    dead = f"127.0.0.1:{free_port()}"
    spec |= ReplicaSpec(connect_timeout_s=2)
    line = _run_fails(spec.command(zk=dead, replica_id="r1", metrics_port=free_port()))
    assert f"zk='{dead}' did not answer within connect_timeout_s=2" in line


def test_toml_config_and_precedence(zk_hosts: str, tmp_path: Path) -> None:
    """A TOML file is read; an unknown key in it is named; flags override the file."""
    cfg = tmp_path / "tenure.toml"
    cfg.write_text(f'zk = "{zk_hosts}"\ncareer = "counter"\nsession_timeout_s = 4\nhandover_timeout_s = 9\n')
    run = [sys.executable, "-m", "tenure", "run", "--config", str(cfg)]
    line = _run_fails([*run, *ReplicaSpec(data_root=tmp_path).argv()])
    assert "handover_timeout_s=9 is not below session_timeout_s=4" in line
    line = _run_fails([*run, *ReplicaSpec(handover_timeout_s=2, group="bad/group").argv()])
    assert "group='bad/group'" in line
    cfg.write_text('zk = "127.0.0.1:2181"\nsesion_timeout_s = 4\n')
    assert "sesion_timeout_s is not a setting" in _run_fails(run)
