"""Operators' commands on a group of several queues: `tenure status` (each queue's leader, epoch, last commit,
handover request and backlog, each replica's led queues), `tenure handover --queue K [--to R]`, `tenure history`
per queue and labelled, `tenure verify --zk` against each queue's commit record, and their refusals of a queue the
group does not have.

Real `tenure run` replicas of the counter career on the shared real ensemble (the commands do not depend on Spark),
real `tenure` processes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tenure.career import counter_path
from tenure.career.identity import ensure_data_root_id, ensure_topic
from tenure.career.queue import QueueLayout
from tenure.election import GroupIdentity, GroupPaths, QueueKey, bind_group, register_group
from tenure.election._transaction import encode_record
from tenure.service.local import wait_for
from tenure.service.ops import by_queue, fetch_status, produce
from tenure.service.ops._verify import iter_queue_files
from tenure.service.replica import IS_LEADER, ReplicaSpec
from tests._replicas import Replica, ReplicaSet, tenure

QUEUES = 4


@pytest.fixture()
def replicas(zk_hosts: str, zk_group: str, tmp_path: Path) -> Iterator[ReplicaSet]:
    """Replicas of the counter career on a group of four queues, one data root; every process reaped afterwards.
    The balance waits longer than any test here (its settle time), so the leaders are the ones the operators'
    commands made."""
    spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "data", career="counter", queues=QUEUES,
                       session_timeout_s=3.0, handover_timeout_s=2.0, counter_interval_s=0.05,
                       balance_settle_s=600.0)
    replica_set = ReplicaSet(zk_hosts, spec, tmp_path)
    yield replica_set
    replica_set.reap_all()


def _led(replica: Replica) -> set[int]:
    return {q for q, leading in by_queue(replica.metrics(), IS_LEADER).items() if leading == 1.0}


def _counted(data_root: Path, queue: int) -> int:
    path = counter_path(data_root, queue, QUEUES)
    return len(path.read_text().splitlines()) if path.exists() else 0


def _one_leads_all_two_follow(replicas: ReplicaSet) -> tuple[Replica, Replica, Replica]:
    """r1 leads every queue (started first, no balance asked of it); r2 and r3 stand in every line, ready."""
    r1 = replicas.start("r1")
    wait_for(lambda: _led(r1) == set(range(QUEUES)), 30, "r1 to lead every queue")
    r2, r3 = replicas.start("r2"), replicas.start("r3")
    wait_for(lambda: r2.get("/readyz")[0] == 200 and r3.get("/readyz")[0] == 200, 30, "r2 and r3 ready")
    data = replicas.spec.value("data_root")
    wait_for(lambda: all(_counted(data, q) > 2 for q in range(QUEUES)), 20, "every queue committing")
    return r1, r2, r3


def test_status_handover_and_history_of_one_queue_of_four(replicas: ReplicaSet, zk_hosts: str,
                                                          zk_group: str) -> None:
    """`tenure status` of a group of four queues names the count, each queue's leader and epoch and last commit,
    and what each replica leads (text and --json); `tenure handover --queue 2 --to r3 --wait` moves queue 2 alone to
    r3, past r2 next in line, while r1 keeps the others; status then shows it; `tenure history --queue 2` shows
    queue 2's two terms, and without --queue every queue's terms, each labelled with its queue."""
    r1, _r2, r3 = _one_leads_all_two_follow(replicas)
    zk = ["--zk", zk_hosts, "--group", zk_group]

    shown = tenure("status", *zk)
    assert shown.returncode == 0, shown.stderr
    print(shown.stdout)
    assert f"group {zk_group}: 4 queues, every queue led; 3 replicas in line" in shown.stdout
    rows = {line.split()[0]: line.split() for line in shown.stdout.splitlines() if line.split()}
    assert all(rows[str(q)][1] == "r1" and rows[str(q)][3] == "3" for q in range(QUEUES)), rows
    assert rows["r1"][1:] == ["0,", "1,", "2,", "3"] and rows["r2"][1:] == ["none"] and rows["r3"][1:] == ["none"]
    body = json.loads(tenure("status", *zk, "--json").stdout)
    assert body["queue_count"] == QUEUES and [q["queue"] for q in body["per_queue"]] == list(range(QUEUES))
    assert "leader" not in body and "commit" not in body  # each queue's, in per_queue
    for each in body["per_queue"]:
        assert each["leader"]["identity"]["replica_id"] == "r1" and each["epoch"] == each["leader"]["epoch"]
        assert each["commit"]["epoch"] == each["epoch"] and each["commit_version"] > 0
        assert each["handover_request"] is None and each["backlog"] is None  # no topic folder: counter career
    assert body["replicas"] == {"r1": {"leads": [0, 1, 2, 3]}, "r2": {"leads": []}, "r3": {"leads": []}}
    old_epoch = body["per_queue"][2]["epoch"]

    moved = tenure("handover", *zk, "--queue", "2", "--to", "r3", "--wait", "--timeout-s", "30")
    assert moved.returncode == 0, moved.stderr
    assert f"handover of queue 2, epoch {old_epoch} to r3 requested" in moved.stdout
    assert "r3 leads (epoch" in moved.stdout and "after r1's last" in moved.stdout, moved.stdout
    wait_for(lambda: _led(r3) == {2} and _led(r1) == {0, 1, 3}, 10, "r3 to lead queue 2 alone, r1 the rest")
    after = json.loads(tenure("status", *zk, "--json").stdout)
    assert after["replicas"] == {"r1": {"leads": [0, 1, 3]}, "r2": {"leads": []}, "r3": {"leads": [2]}}
    assert [q["epoch"] == old_epoch for q in after["per_queue"]] == [False, False, False, False]
    assert [q["epoch"] for q in after["per_queue"] if q["queue"] != 2] == \
        [q["epoch"] for q in body["per_queue"] if q["queue"] != 2]

    terms = json.loads(tenure("history", *zk, "--queue", "2", "--json").stdout)["terms"]
    assert [(t["queue"], t["replica_id"], t["ended"]) for t in terms] == [(2, "r1", "clean"), (2, "r3", None)], terms
    every = json.loads(tenure("history", *zk, "--json").stdout)
    assert every["queues"] == QUEUES and sorted({t["queue"] for t in every["terms"]}) == list(range(QUEUES))
    assert [t["replica_id"] for t in every["terms"] if t["queue"] == 2] == ["r1", "r3"]
    table = tenure("history", *zk).stdout
    assert table.count("queue") == QUEUES and all(f"\n{q} " in "\n" + table for q in range(QUEUES)), table


def test_handover_of_a_queue_to_the_next_in_line(replicas: ReplicaSet, zk_hosts: str, zk_group: str) -> None:
    """`tenure handover --queue 0` without --to: queue 0 goes to the next in its line, the other queues stay."""
    r1, r2, r3 = _one_leads_all_two_follow(replicas)
    zk = ["--zk", zk_hosts, "--group", zk_group]
    line = json.loads(tenure("status", *zk, "--json").stdout)["per_queue"][0]["contenders"]
    following = line[1]["identity"]["replica_id"]  # r2 and r3 warmed up together: either may be next
    moved = tenure("handover", *zk, "--queue", "0", "--wait", "--timeout-s", "30")
    assert moved.returncode == 0, moved.stderr
    assert "to the next in line requested" in moved.stdout and f"{following} leads (epoch" in moved.stdout, moved.stdout
    successor = {"r2": r2, "r3": r3}[following]
    wait_for(lambda: _led(successor) == {0} and _led(r1) == {1, 2, 3}, 10, f"{following} to lead queue 0, r1 the rest")


def test_drain_moves_every_queue_off_a_replica_and_undrain_brings_it_back(replicas: ReplicaSet, zk_hosts: str,
                                                                         zk_group: str) -> None:
    """`tenure drain r1` of r1 leading all four queues: it leaves every queue's line (the command waits for that),
    the followers lead every queue; `tenure undrain r1` puts it back in every line."""
    r1, r2, r3 = _one_leads_all_two_follow(replicas)
    zk = ["--zk", zk_hosts, "--group", zk_group]
    done = tenure("drain", "r1", *zk, "--reason", "kernel upgrade")
    assert done.returncode == 0 and "r1 drained (kernel upgrade): out of the election" in done.stdout, done.stderr
    wait_for(lambda: not _led(r1) and _led(r2) | _led(r3) == set(range(QUEUES)), 20, "r2 and r3 to lead every queue")
    assert json.loads(tenure("status", *zk, "--json").stdout)["replicas"].keys() == {"r2", "r3"}
    done = tenure("undrain", "r1", *zk)
    assert done.returncode == 0 and "r1 undrained: back in the election" in done.stdout, done.stderr
    wait_for(lambda: all(len(q["contenders"]) == 3 for q in json.loads(tenure("status", *zk, "--json").stdout)
                         ["per_queue"]), 20, "r1 back in every queue's line")


@pytest.mark.parametrize(("command", "extra"), [("handover", ()), ("history", ())])
def test_a_queue_outside_the_group_is_refused_naming_the_range(zk_hosts: str, zk_client: KazooClient,
                                                               zk_group: str, tmp_path: Path, command: str,
                                                               extra: tuple[str, ...]) -> None:
    """In a group of four queues, `--queue 7` is refused with one line naming the range 0 to 3; `tenure handover`
    without --queue is refused naming the flag. In a group of one, `--queue 2` is refused, `--queue 0` accepted."""
    bind_group(zk_client, zk_group, GroupIdentity(data_root_id="d", data_root=str(tmp_path), queues=QUEUES))
    zk = ["--zk", zk_hosts, "--group", zk_group]
    done = tenure(command, *zk, "--queue", "7", *extra)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"--queue 7 is not a queue of group '{zk_group}', which has 4 queues: pass --queue 0 to 3" in done.stderr
    if command == "handover":
        done = tenure(command, *zk)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "has 4 queues: name one with --queue (0 to 3" in done.stderr
    one = f"{zk_group}-one"
    done = tenure(command, "--zk", zk_hosts, "--group", one, "--queue", "2")
    assert done.returncode == 2 and f"--queue 2: group '{one}' has one queue, queue 0" in done.stderr, done.stderr
    done = tenure(command, "--zk", zk_hosts, "--group", one, "--queue", "0")
    assert "--queue" not in done.stderr, done.stderr  # accepted (a group with no leader: nothing to hand over)


def test_status_shows_each_queues_backlog_and_a_live_handover_request(zk_client: KazooClient, zk_hosts: str,
                                                                       zk_group: str, tmp_path: Path) -> None:
    """A group of four queues registered on a topic folder readable here: each queue's backlog is its landing files
    the group has not consumed (marks of queue 1 subtract); a live handover request of queue 3 is shown on its row;
    a queue without a leader is named in the headline."""
    topic = tmp_path / "topic"
    produce(topic, records=400, keys=20, queues=QUEUES, seed=3, progress=False, batch_records=25)
    layouts = QueueLayout.each(topic, QUEUES)
    files = {q.queue: sorted(p.name for p in iter_queue_files(q)) for q in layouts}
    assert all(files.values())
    layouts[1].marks(zk_group).mkdir(parents=True)
    for name in files[1][:2]:
        (layouts[1].marks(zk_group) / name).touch()
    data_root = tmp_path / "data"
    bind_group(zk_client, zk_group, GroupIdentity(data_root_id=ensure_data_root_id(data_root),
                                                  data_root=str(data_root), queues=QUEUES))
    register_group(zk_client, QueueKey(ensure_topic(topic).topic_id, str(topic)), zk_group, data_root,
                   ensure_data_root_id(data_root))
    request = {"epoch": 5, "to": "r9", "requested_at": 1.0, "expires_at": 4102444800.0}
    zk_client.create(GroupPaths(zk_group, 3, QUEUES).handover_request, json.dumps(request).encode(), makepath=True)

    status = fetch_status(zk_hosts, zk_group)
    assert [q.backlog for q in status.per_queue] == [len(files[0]), len(files[1]) - 2, len(files[2]), len(files[3])]
    assert [q.request is not None for q in status.per_queue] == [False, False, False, True]
    shown = tenure("status", "--zk", zk_hosts, "--group", zk_group)
    assert shown.returncode == 0, shown.stderr
    assert f"group {zk_group}: 4 queues, no leader for queues 0, 1, 2, 3; 0 replicas in line" in shown.stdout
    row = next(line.split() for line in shown.stdout.splitlines() if line.startswith("3 "))
    assert row[-5:-1] == ["to", "r9", "until", row[-2]] and row[-1] == str(len(files[3])), row


def test_verify_zk_checks_each_queues_batches_against_its_commit_record(zk_client: KazooClient, zk_hosts: str,
                                                                         zk_group: str, tmp_path: Path) -> None:
    """`tenure verify --zk` on a topic of three queues reads each queue's commit record: output at or below each
    queue's committed batch passes; a queue whose record names a lower batch than its output fails the audit with
    batches above the commit, named by queue."""
    from tests.test_verify import _publish_topic

    produce(tmp_path, records=120, keys=9, queues=3, seed=4, progress=False, batch_records=20)
    _publish_topic(tmp_path, 3)
    top = {k: len(list(iter_queue_files(QueueLayout(tmp_path, k, 3)))) - 1 for k in range(3)}
    for k, batch in top.items():
        zk_client.create(GroupPaths(zk_group, k, 3).commit, encode_record({"batch_id": batch}, 1), makepath=True)
    for k in range(3):  # the leaders' consumption marks, as this group's
        QueueLayout(tmp_path, k, 3).marks("default").rename(QueueLayout(tmp_path, k, 3).marks(zk_group))
    args = ["verify", "--data-root", str(tmp_path), "--zk", zk_hosts, "--group", zk_group, "--json"]
    done = tenure(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(done.stdout)
    assert [q["committed_batch"] for q in body["per_queue"]] == [top[0], top[1], top[2]]
    zk_client.set(GroupPaths(zk_group, 1, 3).commit, encode_record({"batch_id": top[1] - 1}, 1))
    done = tenure(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    body = json.loads(done.stdout)
    assert body["batches_above_commit"] == 1 and body["examples"]["batches_above_commit"][0]["queue"] == 1
