"""A group of several queues on `tenure run` replicas of the counter career: every queue led once, a replica's queues
moved when it dies or stops, a stalled queue revoked alone, the cap on queues led, the group's queue count.

Real processes, real signals, the shared real ensemble. The counter career writes a file per queue
(``counter-queue-<k>.log``), each line ``epoch,n`` published only after its fenced commit: its audit checks every n
once and in order, and no older epoch after a newer one, in each queue.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from kazoo.client import KazooClient

from tenure.career import counter_path
from tenure.career.lifecycle import HANDED_OVER, HANDOVER_RECORDED, INAUGURATED, LEFT_LINE_AT_CAP, QUEUE_STALLED
from tenure.election import GroupPaths, read_history
from tenure.service.local import free_port, wait_for
from tenure.service.ops import by_queue, sample_key
from tenure.service.replica import IS_LEADER, QUEUES_LED, ReplicaSpec
from tests._prometheus import ALERT_RULES
from tests._replicas import Replica, ReplicaSet, tenure

QUEUES = 3
SESSION_S = 3.0
HANDOVER_S = 2.0


@pytest.fixture()
def replicas(zk_hosts: str, zk_group: str, tmp_path: Path) -> Iterator[ReplicaSet]:
    """Replicas of the counter career on a group of three queues, one data root; every process reaped afterwards."""
    spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "data", career="counter", queues=QUEUES,
                       session_timeout_s=SESSION_S, handover_timeout_s=HANDOVER_S, counter_interval_s=0.05)
    replica_set = ReplicaSet(zk_hosts, spec, tmp_path)
    yield replica_set
    replica_set.reap_all()


def _led(replica: Replica) -> set[int]:
    """The queues ``replica`` says it leads (``tenure_is_leader{queue=…}``)."""
    return {q for q, leading in by_queue(replica.metrics(), IS_LEADER).items() if leading == 1.0}


def _leaders(replicas: ReplicaSet) -> dict[int, list[str]]:
    """Each queue's leaders, as the live replicas' metrics say."""
    led = {r.replica_id: _led(r) for r in replicas.alive()}
    return {q: sorted(r for r, queues in led.items() if q in queues) for q in range(QUEUES)}


def _one_leader_each(replicas: ReplicaSet) -> dict[int, str] | None:
    """{queue: its one leader} once every queue has exactly one; None before."""
    leaders = _leaders(replicas)
    return {q: names[0] for q, names in leaders.items()} if all(len(n) == 1 for n in leaders.values()) else None


def _counter(data_root: Path, queue: int) -> list[tuple[int, int]]:
    path = counter_path(data_root, queue, QUEUES)
    if not path.exists():
        return []
    return [(int(e), int(n)) for e, n in (line.split(",") for line in path.read_text().splitlines())]


def _audit(data_root: Path, queue: int) -> list[tuple[int, int]]:
    """Queue ``queue``'s counter: every n from 1 to the last once, in order, and one epoch at a time (an older
    epoch never published after a newer one)."""
    lines = _counter(data_root, queue)
    assert [n for _, n in lines] == list(range(1, len(lines) + 1)), f"queue {queue}: a duplicate or missing n"
    epochs = [e for e, _ in lines]
    assert epochs == sorted(epochs), f"queue {queue}: an older epoch published after a newer one"
    return lines


def _event_time(replica: Replica, name: str, **fields: object) -> float:
    """Unix time of the last log event ``name`` (with matching fields) of a replica."""
    stamps = [e["timestamp"] for e in replica.log_events()
              if e.get("event") == name and all(e.get(k) == v for k, v in fields.items())]
    assert stamps, f"{replica.replica_id} logged no {name} {fields}"
    return datetime.fromisoformat(stamps[-1].replace("Z", "+00:00")).timestamp()


def _all_counting(data_root: Path, more_than: dict[int, int]) -> bool:
    return all(len(_counter(data_root, q)) > n for q, n in more_than.items())


def test_two_replicas_share_three_queues_and_a_killed_replicas_queues_move_within_the_session_timeout(
        replicas: ReplicaSet, tmp_path: Path) -> None:
    """Every queue gets exactly one leader; r1, capped at two queues, leads two and r2 the third, and each one's
    /leader lists its queues. SIGKILL r1: r2
    leads its two queues too, each inaugurated within the session timeout and a second, and every queue's counter
    stays exactly once and one epoch at a time."""
    r1 = replicas.start("r1", max_queues_led=2)
    wait_for(lambda: len(_led(r1)) == 2, 30, "r1 to lead two queues")
    r2 = replicas.start("r2")
    leaders = wait_for(lambda: _one_leader_each(replicas), 30, "one leader per queue")
    moved = sorted(q for q, name in leaders.items() if name == "r1")
    assert len(moved) == 2 and _led(r2) == set(range(QUEUES)) - set(moved), leaders
    assert r1.metrics()[QUEUES_LED] == 2.0 and r2.metrics()[QUEUES_LED] == 1.0
    for replica in (r1, r2):
        code, body = replica.get("/leader")
        assert code == 200 and [led["queue"] for led in json.loads(body)["leading"]] == sorted(_led(replica)), body
    data = tmp_path / "data"
    wait_for(lambda: _all_counting(data, dict.fromkeys(range(QUEUES), 3)), 20, "every queue counting")
    killed_at = time.time()
    r1.signal(signal.SIGKILL)
    r1.wait(10)
    wait_for(lambda: _led(r2) == set(range(QUEUES)), SESSION_S + 10, "r2 to lead every queue")
    for q in moved:
        took = _event_time(r2, INAUGURATED, queue=q) - killed_at
        assert took < SESSION_S + 1.0, f"queue {q} had a new leader {took:.2f} s after SIGKILL"
    counts = {q: len(_counter(data, q)) for q in range(QUEUES)}
    wait_for(lambda: _all_counting(data, {q: n + 2 for q, n in counts.items()}), 10, "every queue counting again")
    for q in range(QUEUES):
        lines = _audit(data, q)
        assert len({e for e, _ in lines}) >= (2 if q in moved else 1), f"queue {q}: {sorted({e for e, _ in lines})}"


def test_sigterm_hands_every_led_queue_over_cleanly(replicas: ReplicaSet, zk_client: KazooClient,
                                                    zk_group: str, tmp_path: Path) -> None:
    """SIGTERM on a replica leading all three queues: each queue's term ends with a clean handover record, the
    follower inaugurates each on the fast path, and the replica exits 0 within a handover budget per queue. (The
    balance is held off by a long settle time, so that r1 still leads all three when it is stopped.)"""
    r1 = replicas.start("r1", balance_settle_s=120.0)
    wait_for(lambda: _led(r1) == set(range(QUEUES)), 30, "r1 to lead every queue")
    r2 = replicas.start("r2", balance_settle_s=120.0)
    wait_for(lambda: r2.get("/readyz")[0] == 200, 30, "r2 in line")
    data = tmp_path / "data"
    wait_for(lambda: _all_counting(data, dict.fromkeys(range(QUEUES), 3)), 20, "every queue counting")
    r1.signal(signal.SIGTERM)
    assert r1.wait(QUEUES * (HANDOVER_S + 2) + 5) == 0
    recorded = {e["queue"]: e for e in r1.log_events() if e.get("event") == HANDOVER_RECORDED}
    assert sorted(recorded) == list(range(QUEUES)) and all(e["clean"] for e in recorded.values()), recorded
    assert sorted(e["queue"] for e in r1.log_events() if e.get("event") == HANDED_OVER) == list(range(QUEUES))
    wait_for(lambda: _led(r2) == set(range(QUEUES)), 10, "r2 to lead every queue")
    for q in range(QUEUES):
        assert r2.has_event("inaugurating", path="fast", previous="r1", queue=q), f"queue {q}"
        record = json.loads(zk_client.get(GroupPaths(zk_group, q, QUEUES).handover)[0])
        assert record["replica_id"] == "r2" and record["clean"] is False, record  # r2's own term, in progress
    counts = {q: recorded[q]["last_batch"] for q in range(QUEUES)}
    wait_for(lambda: _all_counting(data, counts), 10, "r2 counting past r1's last in every queue")
    for q in range(QUEUES):
        _audit(data, q)


def test_a_stalled_queue_is_revoked_alone_while_the_others_keep_committing(
        replicas: ReplicaSet, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """Queue 1's batch hangs (its career never finishes it while input waits): after the stall timeout its term
    alone is revoked — ended stalled in queue 1's history, one attempt counted against the batch, the seat backed
    off and back in line — while queues 0 and 2 keep committing in the same term and the process lives on."""
    r1 = replicas.start("r1", career="tests.careers:hangs_in_queue_1", stall_timeout_s=2.0,
                        first_batch_allowance_s=0.0, liveness_timeout_s=10.0, probe_timeout_s=1.0)
    wait_for(lambda: _led(r1) == set(range(QUEUES)), 30, "r1 to lead every queue")
    data = tmp_path / "data"
    wait_for(lambda: r1.has_event(QUEUE_STALLED, queue=1), 20, "queue 1's stall to be revoked")
    stalled = [e for e in r1.log_events() if e.get("event") == QUEUE_STALLED]
    assert {e["queue"] for e in stalled} == {1} and stalled[0]["reason"] == "no_progress", stalled
    counts = {q: len(_counter(data, q)) for q in (0, 2)}
    wait_for(lambda: _all_counting(data, {q: n + 20 for q, n in counts.items()}), 20,
             "queues 0 and 2 counting on after the revoke")
    assert r1.alive, "a queue's stall is not the replica's"
    for q in (0, 2):
        assert len({e for e, _ in _audit(data, q)}) == 1, f"queue {q} kept its one term"
    history = read_history(zk_client, zk_group, queue=1, queues=QUEUES)
    assert history[0].ended == "stalled", history
    record = json.loads(zk_client.get(GroupPaths(zk_group, 1, QUEUES).handover)[0])
    assert record["failed_batch"]["batch_id"] == 1 and record["failed_batch"]["attempts"] >= 1, record
    wait_for(lambda: r1.has_event(INAUGURATED, queue=1) and len(
        [e for e in r1.log_events() if e.get("event") == INAUGURATED and e.get("queue") == 1]) >= 2, 20,
        "queue 1's seat back in line and elected again")


def test_a_cap_of_one_queue_led_leaves_a_queue_leaderless_and_the_alert_sees_it(
        replicas: ReplicaSet, tmp_path: Path) -> None:
    """Two replicas capped at one queue each, three queues: each leads one, leaves the other lines, and one queue
    has no leader. TenureNoLeader's expression, evaluated by promtool on the series the two replicas export,
    names that queue alone."""
    r1 = replicas.start("r1", max_queues_led=1)
    r2 = replicas.start("r2", max_queues_led=1)
    wait_for(lambda: len(_led(r1)) == 1 and len(_led(r2)) == 1 and _led(r1) != _led(r2), 30,
             "each replica leading one queue")
    leaderless = (set(range(QUEUES)) - _led(r1) - _led(r2)).pop()
    wait_for(lambda: r1.has_event(LEFT_LINE_AT_CAP) and r2.has_event(LEFT_LINE_AT_CAP), 10,
             "both to leave the lines of the queues they do not lead")
    time.sleep(1.0)  # a leaderless queue stays leaderless: nobody is left in its line
    assert _counter(tmp_path / "data", leaderless) == []
    assert _led(r1) | _led(r2) == set(range(QUEUES)) - {leaderless}
    _expect_no_leader(tmp_path, [r1, r2], {leaderless})


def _expect_no_leader(workdir: Path, replicas: list[Replica], leaderless: set[int]) -> None:
    """``promtool test rules``: TenureNoLeader's expression (as shipped in deploy/prometheus/alerts.yml), on each
    replica's ``tenure_is_leader`` series as scraped now, gives one sample per queue in ``leaderless`` and no
    other."""
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    rules = yaml.safe_load(ALERT_RULES.read_text(encoding="utf-8"))["groups"]
    expr = next(rule["expr"] for group in rules for rule in group["rules"] if rule.get("alert") == "TenureNoLeader")
    series = [{"series": f'tenure_is_leader{{job="tenure", replica="{replica.replica_id}", queue="{q}"}}',
               "values": f"{replica.metrics()[sample_key(IS_LEADER, queue=str(q))]:g}x30"}
              for replica in replicas for q in range(QUEUES)]
    expected = [{"labels": f'{{queue="{q}"}}', "value": 0} for q in sorted(leaderless)]
    test = workdir / "no_leader_test.yml"
    test.write_text(yaml.safe_dump({"tests": [{"interval": "10s", "input_series": series, "promql_expr_test": [
        {"expr": expr, "eval_time": "2m", "exp_samples": expected}]}]}))
    done = subprocess.run(["promtool", "test", "rules", str(test)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_replica_given_another_number_of_queues_is_refused(zk_hosts: str, zk_client: KazooClient, zk_group: str,
                                                             tmp_path: Path) -> None:
    """The group records its number of queues once, at its first replica: a replica given another refuses to
    start with one line naming both, and one given none takes the group's."""
    spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "data", career="counter", session_timeout_s=SESSION_S,
                       handover_timeout_s=HANDOVER_S)
    first = ReplicaSet(zk_hosts, spec, tmp_path)
    try:
        r1 = first.start("r1", queues=QUEUES)
        wait_for(lambda: len(_led(r1)) == QUEUES, 30, "r1 to lead its three queues")
        identity = json.loads(zk_client.get(GroupPaths(zk_group).identity)[0])
        assert identity["queues"] == QUEUES
        done = tenure("run", *(spec | ReplicaSpec(queues=2)).argv(zk=zk_hosts, replica_id="r2",
                                                                    metrics_port=free_port()))
        assert done.returncode == 2, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        assert errors == [f"tenure: error: --queues 2 does not match group {zk_group!r}, which has 3 queues "
                          f"(/tenure/{zk_group}/identity): pass --queues 3, or give this deployment a group of its "
                          "own (--group)"], done.stderr
        r3 = first.start("r3")  # no --queues: the group's three
        wait_for(lambda: r3.get("/readyz")[0] == 200, 30, "r3 in the three lines")
        assert sorted(c for c in zk_client.get_children(f"/tenure/{zk_group}/queues")) == ["0", "1", "2"]
    finally:
        first.reap_all()


def test_a_group_from_before_queues_cannot_be_given_several(zk_hosts: str, zk_client: KazooClient, zk_group: str,
                                                            tmp_path: Path) -> None:
    """A group whose progress is at the one queue's paths (a commit record at /tenure/<group>/commit, no identity
    record yet) is refused more queues, naming its commit record; with none given it stays one queue."""
    zk_client.create(GroupPaths(zk_group).commit, b'{"n": 4, "line": "1,4", "epoch": 1}', makepath=True)
    spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "data", career="counter", session_timeout_s=SESSION_S,
                       handover_timeout_s=HANDOVER_S, queues=2)
    done = tenure("run", *spec.argv(zk=zk_hosts, replica_id="r1", metrics_port=free_port()))
    assert done.returncode == 2, done.stderr
    assert f"--queues 2 does not match group {zk_group!r}, which has 1 queue (its progress is at " \
           f"/tenure/{zk_group}/commit)" in done.stderr, done.stderr
    assert not zk_client.exists(GroupPaths(zk_group).identity), "a refused replica binds nothing"


def test_a_career_of_ones_own_that_serves_one_queue_is_refused_several(zk_hosts: str, zk_group: str,
                                                                      tmp_path: Path) -> None:
    """A factory of one's own that returns one career (a SoloCareer, as before queues) serves a group of one queue:
    given several, the replica refuses to start with one line saying to return Careers."""
    spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "data", career="tests.careers:always_fails",
                       session_timeout_s=SESSION_S, handover_timeout_s=HANDOVER_S, queues=2)
    done = tenure("run", *spec.argv(zk=zk_hosts, replica_id="r1", metrics_port=free_port()))
    assert done.returncode == 2, done.stderr
    assert ("career='tests.careers:always_fails' returned one career, which serves a group of one queue, and this "
            "group has 2: have the factory return tenure.career.Careers") in done.stderr, done.stderr
