"""The balance without a controller, on `tenure run` replicas of the counter career and the shared real ensemble: a
group of four queues shared 2, 1, 1 by three replicas, sticky through a replica's death and return, a drained
replica leading nothing, the cap on queues led respected, every queue one writer at a time throughout.

The counter career writes a file per queue, each line ``epoch,n`` published only after its fenced commit: its audit
checks every n once and in order and no older epoch after a newer one, in each queue.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tenure.career import counter_path
from tenure.career.lifecycle import QUEUE_MOVE_DONE, QUEUE_MOVE_STARTED
from tenure.election import (
    DrainRequest,
    GroupPaths,
    Member,
    OperatorRequests,
    moves,
    plan,
    read_leaders,
    read_members,
    rendezvous_weight,
)
from tenure.service.local import wait_for
from tenure.service.ops import by_queue
from tenure.service.replica import GROUP_BALANCED, IS_LEADER, ReplicaSpec
from tests._replicas import Replica, ReplicaSet

QUEUES = 4
SESSION_S = 3.0
SETTLE_S = 1.0


@pytest.fixture()
def replicas(zk_hosts: str, zk_group: str, tmp_path: Path) -> Iterator[ReplicaSet]:
    """Replicas of the counter career on a group of four queues, one data root, a settle time of a second; every
    process reaped afterwards."""
    spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "data", career="counter", queues=QUEUES,
                       session_timeout_s=SESSION_S, handover_timeout_s=2.0, counter_interval_s=0.05,
                       balance_settle_s=SETTLE_S)
    replica_set = ReplicaSet(zk_hosts, spec, tmp_path)
    yield replica_set
    replica_set.reap_all()


def _led(replica: Replica) -> set[int]:
    """The queues ``replica`` says it leads (``tenure_is_leader{queue=…}``)."""
    return {q for q, leading in by_queue(replica.metrics(), IS_LEADER).items() if leading == 1.0}


def _shares(replicas: list[Replica]) -> dict[str, set[int]] | None:
    """{replica: the queues it leads} once every queue has exactly one leader among ``replicas``; None before."""
    led = {r.replica_id: _led(r) for r in replicas}
    every = [q for queues in led.values() for q in queues]
    return led if sorted(every) == list(range(QUEUES)) else None


def _settled(replicas: list[Replica], counts: list[int]) -> dict[str, set[int]] | None:
    """The shares once each queue has one leader, they count ``counts`` (sorted) and every replica's view of the plan
    has no moves left (``tenure_group_balanced`` 1); None before."""
    shares = _shares(replicas)
    if shares is None or sorted(len(q) for q in shares.values()) != counts:
        return None
    return shares if all(r.metrics().get(GROUP_BALANCED) == 1.0 for r in replicas) else None


def _counter(data_root: Path, queue: int) -> list[tuple[int, int]]:
    path = counter_path(data_root, queue, QUEUES)
    if not path.exists():
        return []
    return [(int(e), int(n)) for e, n in (line.split(",") for line in path.read_text().splitlines())]


def _audit(data_root: Path) -> dict[int, list[int]]:
    """Every queue's counter: every n once and in order, one epoch at a time; returns each queue's epochs."""
    epochs = {}
    for q in range(QUEUES):
        lines = _counter(data_root, q)
        assert [n for _, n in lines] == list(range(1, len(lines) + 1)), f"queue {q}: a duplicate or missing n"
        seen = [e for e, _ in lines]
        assert seen == sorted(seen), f"queue {q}: an older epoch published after a newer one"
        epochs[q] = sorted(set(seen))
    return epochs


def _moves_started(replicas: list[Replica]) -> list[dict[str, object]]:
    return [e for r in replicas for e in r.log_events() if e.get("event") == QUEUE_MOVE_STARTED]


def _one_move_at_a_time(replica: Replica) -> None:
    """``replica``'s moves, from its log: each started once the one before it was done, and every one done."""
    wait_for(lambda: [e["event"] for e in replica.log_events() if e.get("event") in (
        QUEUE_MOVE_STARTED, QUEUE_MOVE_DONE)][-1:] != [QUEUE_MOVE_STARTED], 10,
        f"{replica.replica_id}'s last move done")
    events = [e["event"] for e in replica.log_events() if e.get("event") in (QUEUE_MOVE_STARTED, QUEUE_MOVE_DONE)]
    assert events == [QUEUE_MOVE_STARTED, QUEUE_MOVE_DONE] * (len(events) // 2), events


def test_four_queues_on_three_replicas_started_one_after_another_are_shared_two_one_one(
        replicas: ReplicaSet, tmp_path: Path) -> None:
    """r1 starts alone and leads all four queues; r2 and r3 join one after another: within a deadline the queues are
    led 2, 1, 1 (r1 keeping two), each replica's view of the plan has no moves left, each replica made one move at a
    time and finished each, and no queue ever had two writers (each queue's counter: every n once, in order, one
    epoch at a time)."""
    r1 = replicas.start("r1")
    wait_for(lambda: _led(r1) == set(range(QUEUES)), 30, "r1 to lead every queue")
    r2 = replicas.start("r2")
    wait_for(lambda: r2.get("/readyz")[0] == 200, 30, "r2 in line")
    r3 = replicas.start("r3")
    shares = wait_for(lambda: _settled([r1, r2, r3], [1, 1, 2]), 60, "the queues led 2, 1, 1")
    assert len(shares["r1"]) == 2, shares  # sticky: the first replica keeps two of its four
    started = _moves_started([r1, r2, r3])
    assert 2 <= len(started) <= 3, started  # two to r2 (2, 2), then one to r3; or, had r3 joined in time, one each
    for replica in (r1, r2, r3):
        _one_move_at_a_time(replica)
    data = tmp_path / "data"
    counts = {q: len(_counter(data, q)) for q in range(QUEUES)}
    wait_for(lambda: all(len(_counter(data, q)) > n + 2 for q, n in counts.items()), 20, "every queue counting")
    epochs = _audit(data)
    for e in started:
        assert len(epochs[int(str(e["queue"]))]) >= 2, epochs  # a moved queue had a term of r1's, then its target's


def test_replicas_joining_within_the_settle_time_cause_the_moves_of_the_final_set_alone(
        replicas: ReplicaSet, tmp_path: Path) -> None:
    """r1 leads all four queues; r2 and r3 start together, within the settle time (4 s) of each other: r1 waits for
    the members to settle and moves two queues, one to each, and nobody moves anything else."""
    r1 = replicas.start("r1", balance_settle_s=4.0)
    wait_for(lambda: _led(r1) == set(range(QUEUES)), 30, "r1 to lead every queue")
    joined = [replicas.start(name, balance_settle_s=4.0) for name in ("r2", "r3")]
    shares = wait_for(lambda: _settled([r1, *joined], [1, 1, 2]), 60, "the queues led 2, 1, 1")
    started = _moves_started([r1, *joined])
    assert sorted((e["replica_id"], e["to"]) for e in started) == [("r1", "r2"), ("r1", "r3")], started
    assert len(shares["r1"]) == 2, shares
    _audit(tmp_path / "data")


def test_a_killed_replicas_queues_go_to_the_others_and_on_its_return_only_the_queues_that_must_move_do(
        replicas: ReplicaSet, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """Shared 2, 1, 1: SIGKILL the replica with two queues: the other two lead two each. It comes back: exactly
    the moves the plan computed from the group as it was gives it its queue (one move), the others stay."""
    first = [replicas.start(name) for name in ("r1", "r2", "r3")]
    shares = wait_for(lambda: _settled(first, [1, 1, 2]), 60, "the queues led 2, 1, 1")
    busiest = next(r for r in first if len(shares[r.replica_id]) == 2)
    rest = [r for r in first if r is not busiest]
    busiest.signal(signal.SIGKILL)
    busiest.wait(10)
    wait_for(lambda: _settled(rest, [2, 2]), SESSION_S + 30, "the other two leading two queues each")
    before = len(_moves_started(rest))
    leaders = read_leaders(zk_client, zk_group, queues=QUEUES)
    every = frozenset(range(QUEUES))
    members = {r.replica_id: Member(None, every) for r in first}
    expected = moves(plan(QUEUES, members, leaders), leaders)
    assert len(expected) == 1 and set(expected.values()) == {busiest.replica_id}, expected
    back = replicas.start(busiest.replica_id)
    after = wait_for(lambda: _settled([back, *rest], [1, 1, 2]), 60, "the queues led 2, 1, 1 again")
    started = _moves_started(rest)[before:]
    assert [(int(str(e["queue"])), e["to"]) for e in started] == list(expected.items()), started
    assert after[busiest.replica_id] == set(expected)
    _audit(tmp_path / "data")


def test_a_drained_replica_leads_nothing_and_is_no_member_and_the_rest_balance(
        replicas: ReplicaSet, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """Shared 2, 1, 1: drain one replica: its member node goes, it leads nothing, and the other two lead two each;
    undrained, it is a member again and the group is back to 2, 1, 1."""
    group = [replicas.start(name) for name in ("r1", "r2", "r3")]
    wait_for(lambda: _settled(group, [1, 1, 2]), 60, "the queues led 2, 1, 1")
    assert sorted(read_members(zk_client, zk_group)) == ["r1", "r2", "r3"]
    drained, rest = group[0], group[1:]
    # The drain request as `tenure drain` writes it (its check of the line is queue 0's of a group of one: the
    # queues-ops branch's to widen).
    requests = OperatorRequests(zk_client, zk_group, queues=QUEUES)
    requests.put_drain(DrainRequest("r1", "test", time.time()))
    wait_for(lambda: _settled(rest, [2, 2]) and not _led(drained), 30, "r2 and r3 leading two each, r1 none")
    assert sorted(read_members(zk_client, zk_group)) == ["r2", "r3"]
    assert zk_client.exists(GroupPaths(zk_group).member_node("r1")) is None
    assert requests.remove_drain("r1")
    wait_for(lambda: _settled(group, [1, 1, 2]), 60, "the queues led 2, 1, 1 again")
    _audit(tmp_path / "data")


def test_the_balance_respects_max_queues_led(replicas: ReplicaSet, tmp_path: Path) -> None:
    """r1, capped at one queue, and r2 without a cap, r2 started first: r2 leads all four; once r1 joins, the plan
    gives r1 one queue alone (its cap), not two: shared 3, 1."""
    r2 = replicas.start("r2")
    wait_for(lambda: _led(r2) == set(range(QUEUES)), 30, "r2 to lead every queue")
    r1 = replicas.start("r1", max_queues_led=1)
    shares = wait_for(lambda: _settled([r1, r2], [1, 3]), 60, "the queues led 3, 1")
    assert len(shares["r1"]) == 1, shares
    assert len(_moves_started([r2])) == 1
    _audit(tmp_path / "data")


def test_a_member_not_ready_for_a_queue_is_not_given_it(zk_hosts: str, zk_client: KazooClient, zk_group: str,
                                                         tmp_path: Path) -> None:
    """Two queues; r1 leads both and would keep queue 1 (it weighs it higher). r2's career of queue 0 cannot
    inaugurate: given queue 0 by the plan, r2 fails, backs that seat off (minutes) and its member node says ready for
    queue 1 alone; queue 0 goes back to r1, and the plan then has r1 keep queue 0 (nobody else is ready for it) and
    give r2 queue 1 — never queue 0 again."""
    assert rendezvous_weight(1, "r1") > rendezvous_weight(0, "r1")
    spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "data", career="counter", queues=2,
                       session_timeout_s=SESSION_S, handover_timeout_s=2.0, counter_interval_s=0.05,
                       balance_settle_s=SETTLE_S)
    pair = ReplicaSet(zk_hosts, spec, tmp_path)
    try:
        r1 = pair.start("r1")
        wait_for(lambda: _led(r1) == {0, 1}, 30, "r1 to lead both queues")
        r2 = pair.start("r2", career="tests.careers:cannot_lead_queue_0", failure_backoff_s=600.0,
                        failure_backoff_max_s=600.0)
        wait_for(lambda: _led(r1) == {0} and _led(r2) == {1}, 30, "r1 leading queue 0 and r2 queue 1")
        assert read_members(zk_client, zk_group)["r2"].ready == frozenset({1})
        assert [e["queue"] for e in _moves_started([r1])] == [0, 1]  # queue 0 once, before r2 failed it
        time.sleep(3 * SETTLE_S)  # several turns of every replica's balance: nothing more moves
        assert [e["queue"] for e in _moves_started([r1, r2])] == [0, 1]
        assert _led(r1) == {0} and _led(r2) == {1}
    finally:
        pair.reap_all()
