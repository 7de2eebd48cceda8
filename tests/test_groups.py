"""Consumer groups on one shared queue: the registry, consumption marks, `tenure groups`, status, and two
Spark groups each writing every message exactly once while archiving waits for the slower one."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from tenure.career import Outcome
from tenure.career.identity import ensure_data_root_id, ensure_topic
from tenure.career.spark import SparkCareer
from tenure.career.spark._layout import Layout
from tenure.career.spark._marks import ConsumptionMarks
from tenure.election import (
    DigestCredential,
    GroupIdentity,
    QueueKey,
    QueuePaths,
    RegisteredGroup,
    bind_group,
    connected,
    list_groups,
    register_group,
    registered_groups,
)
from tenure.errors import ConfigError, ElectionError
from tenure.service.local import free_port, wait_for
from tenure.service.ops import GroupError, queue_key, queue_lag, remove_group, show_status, verify
from tenure.service.replica import ReplicaSpec
from tests._replicas import Replica, tenure
from tests.test_spark_career import MAX_LINE, Queue, Recorder, leadership, make_config, run_until

NOW = 1_800_000_000.0  # the group clock the marks archive on (any value: retention is not under test here)

# --------------------------------------------------------------------------------------------- helpers



def one_error(result: subprocess.CompletedProcess[str]) -> str:
    """The single `tenure: error:` line of a run that exited 2."""
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("tenure: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def listed(zk_hosts: str, queue: Path) -> list[str]:
    """The groups `tenure groups list` shows on the queue folder at ``queue``."""
    result = tenure("groups", "list", "--zk", zk_hosts, "--queue-dir", str(queue), "--json")
    assert result.returncode == 0, result.stderr
    return sorted(g["group"] for g in json.loads(result.stdout)["groups"])


def put_files(landing: Path, names: list[str]) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    for name in names:
        (landing / name).write_text('{"id":"x","key":"k","seq":1,"ts":1,"payload":null}\n')


def names_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.jsonl")) if folder.is_dir() else []


def registry(client: KazooClient, queue: Path) -> Callable[[], list[str]]:
    return lambda: registered_groups(client, queue_key(queue), timeout_s=5.0)


def enroll(client: KazooClient, queue: Path, group: str, data_root: Path, **kwargs: Any) -> RegisteredGroup:
    """Register ``group`` on ``queue`` as its replicas do: by the queue's topic id and the data root's id, each
    file written first if the folder has none."""
    return register_group(client, QueueKey(ensure_topic(queue).topic_id, str(queue)), group, data_root,
                          ensure_data_root_id(data_root), **kwargs)


# --------------------------------------------------------------------------------------------- registry


def test_register_is_idempotent_and_lists_the_queue_groups(zk_client: KazooClient, zk_group: str,
                                                           tmp_path: Path) -> None:
    """A group registers once however often it starts; the queue's node is one quoted name under _queues."""
    queue = tmp_path / "queue"
    a, b = f"{zk_group}-a", f"{zk_group}-b"
    first = enroll(zk_client, queue, a, tmp_path / "a")
    again = enroll(zk_client, queue, a, tmp_path / "a")
    enroll(zk_client, queue, b, tmp_path / "b")
    assert again == first and first.data_root == str((tmp_path / "a").resolve())
    topic = json.loads((queue / "_topic.json").read_text())
    assert topic["queues"] == 1 and QueuePaths(topic["topic_id"]).root == f"/tenure/_queues/{topic['topic_id']}"
    assert [g.group for g in list_groups(zk_client, queue_key(queue))] == sorted([a, b])
    assert registered_groups(zk_client, queue_key(queue), timeout_s=5) == sorted([a, b])
    assert registered_groups(zk_client, queue_key(tmp_path / "nobody"), timeout_s=5) == []
    data = json.loads(zk_client.get(QueuePaths(topic["topic_id"]).group(a))[0])
    assert set(data) == {"group", "data_root", "data_root_id", "queue_dir", "registered_at"} and data["group"] == a
    assert data["data_root_id"] == json.loads((tmp_path / "a" / "_data_root.json").read_text())["data_root_id"]


def test_two_groups_on_one_data_root_are_refused(zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """Two groups sharing a data root would mix checkpoints and output: the second is refused with one line."""
    enroll(zk_client, tmp_path / "q1", f"{zk_group}-a", tmp_path / "shared")
    with pytest.raises(ConfigError, match=r"is already the data root of group '.*-a' .*own --data-root"):
        enroll(zk_client, tmp_path / "q2", f"{zk_group}-b", tmp_path / "shared")


def test_registry_nodes_carry_the_digest_acl(zk_hosts: str, zk_client: KazooClient, zk_group: str,
                                             tmp_path: Path) -> None:
    """With a credential, the queue's node and the group's entry are writable by the credential only."""
    cred = DigestCredential("tenure", "s3cret")
    zk_client.ensure_path("/tenure/_queues")  # shared by every test's queues: keep it open on this ensemble
    authed = KazooClient(hosts=zk_hosts, timeout=10.0, auth_data=cred.auth_data())
    authed.start(timeout=15)
    try:
        queue = tmp_path / "queue"
        enroll(authed, queue, zk_group, tmp_path / "a", credential=cred)
        node = QueuePaths(queue_key(queue).topic_id or "").group(zk_group)
        assert make_digest_acl("tenure", "s3cret", all=True) in authed.get_acls(node)[0]
        assert json.loads(zk_client.get(node)[0])["group"] == zk_group  # world-readable: status works
        with pytest.raises(NoAuthError):
            zk_client.delete(node)
        with pytest.raises(NoAuthError):
            zk_client.create(QueuePaths(queue_key(queue).topic_id or "").group("intruder"), b"{}")
        remove_group(authed, queue, zk_group)
        assert list_groups(zk_client, queue_key(queue)) == []
    finally:
        authed.stop()
        authed.close()


def test_a_legacy_registry_entry_moves_to_the_topic_and_stays_while_other_groups_share_its_path(
        zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """Entries the previous release keyed by the queue's path: a group registering by topic id moves its entry
    when it is alone under that key, and copies it while another group is there (that group's replicas of the
    previous release archive by that key alone); the registry reads both keys, each group once."""
    queue, lone = tmp_path / "queue", tmp_path / "lone"
    a, b, c = f"{zk_group}-a", f"{zk_group}-b", f"{zk_group}-c"
    for where, group in ((queue, a), (queue, b), (lone, c)):
        zk_client.create(QueuePaths.of_path(where).group(group), makepath=True, value=json.dumps(
            {"group": group, "data_root": str((tmp_path / group).resolve()), "registered_at": 1.0}).encode())
    enroll(zk_client, lone, c, tmp_path / c)
    assert not zk_client.exists(QueuePaths.of_path(lone).root), "moved: c was alone under the path key"
    assert [g.group for g in list_groups(zk_client, queue_key(lone))] == [c]
    enroll(zk_client, queue, a, tmp_path / a)
    assert zk_client.exists(QueuePaths.of_path(queue).group(a)), "copied: b's replicas read only the path key"
    assert registered_groups(zk_client, queue_key(queue), timeout_s=5) == [a, b]
    entries = list_groups(zk_client, queue_key(queue))
    assert [(g.group, bool(g.data_root_id), g.registered_at) for g in entries] == [(a, True, 1.0), (b, False, 1.0)]
    remove_group(zk_client, queue, a)
    assert not zk_client.exists(QueuePaths.of_path(queue).group(a)) and registered_groups(
        zk_client, queue_key(queue), timeout_s=5) == [b], "removed under both keys"


@pytest.mark.timeout(240)
def test_a_group_refuses_a_replica_on_other_data(zk_hosts: str, zk_client: KazooClient, zk_group: str,
                                                 tmp_path: Path) -> None:
    """A group is bound to its first replica's data root and queue, by their ids: a replica of the group on
    another data root (a second deployment on the same ensemble and queue folder), or on another queue, exits 2
    with one line naming the group's data and its own, ids and paths."""
    queue = tmp_path / "queue"
    spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "a", queue_dir=queue, career="spark", standby="cold",
                       session_timeout_s=4, handover_timeout_s=2)
    with leadership(zk_client, zk_group, "holder"):  # someone else leads: the replica follows, no Spark starts
        replica = Replica("r1", zk_hosts, spec, tmp_path)
        try:
            replica.start()
            wait_for(lambda: [g.group for g in list_groups(zk_client, queue_key(queue))] == [zk_group], 60,
                     "the replica to bind and register its group")
        finally:
            replica.reap()
    root_a = json.loads((tmp_path / "a" / "_data_root.json").read_text())["data_root_id"]
    topic = json.loads((queue / "_topic.json").read_text())["topic_id"]

    def refused(changes: ReplicaSpec) -> str:
        return one_error(tenure("run", *(spec | changes).argv(zk=zk_hosts, replica_id="r2", metrics_port=free_port())))

    line = refused(ReplicaSpec(data_root=tmp_path / "b"))
    root_b = json.loads((tmp_path / "b" / "_data_root.json").read_text())["data_root_id"]
    assert f"bound to data root {root_a} ({(tmp_path / 'a').resolve()})" in line, line
    assert f"works on data root {root_b} ({(tmp_path / 'b').resolve()})" in line, line
    line = refused(ReplicaSpec(queue_dir=tmp_path / "other"))
    other = json.loads((tmp_path / "other" / "_topic.json").read_text())["topic_id"]
    assert f"bound to queue {topic} ({queue.resolve()})" in line and "data root" not in line.split(":")[1], line
    assert f"works on queue {other} ({(tmp_path / 'other').resolve()})" in line, line


@pytest.mark.timeout(240)
def test_one_queue_folder_reached_by_two_paths_is_one_queue_to_the_registry(
        zk_hosts: str, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """Group a reaches the queue folder at one path, group b at another (a bind mount of it): the registry knows
    one queue, by its topic id, so `tenure groups list` by either path shows both groups, whose leaders' archiving
    therefore waits for both."""
    queue, mounted = tmp_path / "queue", tmp_path / "mnt" / "queue"
    queue.mkdir()
    mounted.mkdir(parents=True)
    if subprocess.run(["mount", "--bind", str(queue), str(mounted)], capture_output=True, check=False).returncode:
        pytest.skip("a bind mount needs root")
    a, b = f"{zk_group}-a", f"{zk_group}-b"
    replicas = [Replica(group, zk_hosts, ReplicaSpec(group=group, data_root=tmp_path / group, queue_dir=where,
                                                     career="spark", standby="cold", session_timeout_s=4,
                                                     handover_timeout_s=2), tmp_path)
                for group, where in ((a, queue), (b, mounted))]
    try:
        with leadership(zk_client, a, "holder"), leadership(zk_client, b, "holder"):
            for replica in replicas:
                replica.start()
            wait_for(lambda: all(listed(zk_hosts, where) == [a, b] for where in (queue, mounted)), 60,
                     "both groups on the queue, seen at either path")
    finally:
        for replica in replicas:
            replica.reap()
        subprocess.run(["umount", str(mounted)], check=False)


def test_produce_writes_the_topic_and_verify_audits_only_the_groups_data(zk_hosts: str, zk_client: KazooClient,
                                                                          zk_group: str, tmp_path: Path) -> None:
    """`tenure produce` writes the queue's `_topic.json` once (a later run keeps its id); `tenure verify --zk
    --group` refuses, in one line naming both, a data root the group is not bound to; a number of queues other than
    the topic's is refused by produce and verify alike, naming both and the file."""
    root = tmp_path / "data"
    topics = []
    for _ in range(2):
        assert tenure("produce", "--data-root", str(root), "--records", "3", "--keys", "2").returncode == 0
        topics.append(json.loads((root / "_topic.json").read_text()))
    topic = topics[0]
    assert topic["queues"] == 1 and topics[1] == topic
    bind_group(zk_client, zk_group, GroupIdentity(data_root_id="elsewhere-id", data_root="/srv/elsewhere",
                                                  topic_id=topic["topic_id"], queue_dir=str(root)))
    line = one_error(tenure("verify", "--data-root", str(root), "--zk", zk_hosts, "--group", zk_group))
    assert "bound to data root elsewhere-id (/srv/elsewhere)" in line, line
    assert f"works on data root (none: no _data_root.json) ({root.resolve()})" in line, line
    (root / "_topic.json").write_text(json.dumps({"topic_id": topic["topic_id"], "queues": 2}))
    for args in (("produce", "--data-root", str(root), "--records", "1"), ("verify", "--data-root", str(root))):
        line = one_error(tenure(*args, "--queues", "1"))
        assert f"--queues 1 does not match the topic at {root}, which has 2 queues ({root / '_topic.json'})" in line


# --------------------------------------------------------------------------------------------- marks


def as_now(*names: str) -> list[tuple[str, None]]:
    """Marks of ``names`` for the files now under them (a batch's admitted identities, when it recorded none)."""
    return [(name, None) for name in names]


def test_archiving_waits_for_every_registered_group(zk_hosts: str, zk_client: KazooClient, zk_group: str,
                                                    tmp_path: Path) -> None:
    """A file is archived only once every registered group marked it; its marks then go. Re-runs are harmless,
    stale marks are swept, an unreadable registry archives nothing, and removing a group releases its files."""
    queue = tmp_path / "queue"
    a, b = f"{zk_group}-a", f"{zk_group}-b"
    enroll(zk_client, queue, a, tmp_path / "a")
    enroll(zk_client, queue, b, tmp_path / "b")
    layout_a, layout_b = Layout(tmp_path / "a", queue), Layout(tmp_path / "b", queue)
    marks_a = ConsumptionMarks(layout_a, a, registry(zk_client, queue))
    marks_b = ConsumptionMarks(layout_b, b, registry(zk_client, queue))
    put_files(queue / "landing", ["f1.jsonl", "f2.jsonl", "f3.jsonl"])

    assert marks_a.consumed(as_now("f1.jsonl", "f2.jsonl"), NOW) == 0, "b has consumed nothing yet"
    assert names_in(queue / "landing") == ["f1.jsonl", "f2.jsonl", "f3.jsonl"]
    assert queue_lag(queue, a) == 1 and queue_lag(queue, b) == 3
    assert marks_b.consumed(as_now("f1.jsonl"), NOW) == 1
    assert names_in(queue / "archive") == ["f1.jsonl"]
    assert marks_a.marked() == {"f2.jsonl"} and marks_b.marked() == set(), "marks of an archived file stay"
    assert marks_a.consumed(as_now("f1.jsonl", "f2.jsonl"), NOW) == 0, "a re-run after a crash must be harmless"
    assert marks_a.marked() == {"f2.jsonl"}

    # A crash between archiving and unmarking leaves a mark whose file is gone: swept as stale.
    (queue / "consumed" / b / "f1.jsonl").touch()
    assert marks_a.sweep() == 1 and marks_b.marked() == set()

    # The registry cannot be read: nothing is archived, even what every group has marked.
    down = KazooClient(hosts=zk_hosts)  # never started: not connected
    blind = ConsumptionMarks(layout_b, b, lambda: registered_groups(down, queue_key(queue), timeout_s=1))
    assert blind.consumed(as_now("f2.jsonl"), NOW) == 0
    assert names_in(queue / "landing") == ["f2.jsonl", "f3.jsonl"]
    assert marks_b.archive_ready(NOW) == 1 and names_in(queue / "landing") == ["f3.jsonl"]

    # A group that never consumes holds files back until it is removed.
    marks_a.consumed(as_now("f3.jsonl"), NOW)
    assert names_in(queue / "landing") == ["f3.jsonl"]
    entry, deleted = remove_group(zk_client, queue, b)
    assert entry.group == b and deleted == 0
    assert marks_a.archive_ready(NOW) == 1
    assert names_in(queue / "landing") == [] and names_in(queue / "archive") == ["f1.jsonl", "f2.jsonl", "f3.jsonl"]
    assert not (queue / "consumed" / b).exists() and marks_a.marked() == set()


# --------------------------------------------------------------------------------------------- the command


def test_groups_remove_refuses_live_groups_and_unknown_names(zk_hosts: str, zk_client: KazooClient,
                                                             zk_group: str, tmp_path: Path) -> None:
    """`tenure groups remove`: an unknown group and a group whose replicas still run (without --force) are each
    one error line and exit 2, as is an unreachable ensemble; a forced removal deletes the entry and its marks."""
    queue = tmp_path / "queue"
    enroll(zk_client, queue, zk_group, tmp_path / "a")
    put_files(queue / "landing", ["f1.jsonl"])
    ConsumptionMarks(Layout(tmp_path / "a", queue), zk_group).mark(as_now("f1.jsonl"))
    common = ["--zk", zk_hosts, "--queue-dir", str(queue)]

    line = one_error(tenure("groups", "remove", "no-such-group", *common))
    assert f"'no-such-group' is not registered on queue {queue.resolve()} (registered: {zk_group})" in line
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(ElectionError, match=f"cannot reach ZooKeeper at {dead} within 1 s"), \
            connected(dead, timeout_s=1):
        pass

    with leadership(zk_client, zk_group, "r1"):
        line = one_error(tenure("groups", "remove", zk_group, *common))
        assert "still has 1 live election contender(s): stop its replicas first" in line and "--force" in line
        assert [g.group for g in list_groups(zk_client, queue_key(queue))] == [zk_group]
        result = tenure("groups", "remove", zk_group, *common, "--force")
    assert result.returncode == 0, result.stderr
    assert f"removed group {zk_group}" in result.stdout and "1 marks deleted" in result.stdout
    assert list_groups(zk_client, queue_key(queue)) == [] and not (queue / "consumed" / zk_group).exists()
    with pytest.raises(GroupError, match="is not registered"):
        remove_group(zk_client, queue, zk_group)


def test_status_and_groups_list_show_each_group_with_its_lag(zk_hosts: str, zk_client: KazooClient,
                                                            zk_group: str, tmp_path: Path) -> None:
    """`tenure status` of one group lists every group on its queue with its lag (landing files it has not
    consumed), as text and JSON; `tenure groups list` shows the same; a queue not on this machine is unknown."""
    queue = tmp_path / "queue"
    a, b = f"{zk_group}-a", f"{zk_group}-b"
    enroll(zk_client, queue, a, tmp_path / "a")
    enroll(zk_client, queue, b, tmp_path / "b")
    put_files(queue / "landing", ["f1.jsonl", "f2.jsonl", "f3.jsonl"])
    ConsumptionMarks(Layout(tmp_path / "a", queue), a).mark(as_now("f1.jsonl", "f2.jsonl", "f3.jsonl"))
    ConsumptionMarks(Layout(tmp_path / "b", queue), b).mark(as_now("f1.jsonl"))

    out = io.StringIO()
    show_status(zk_hosts, a, out=out)
    text = out.getvalue()
    print(text)
    assert f"queue {queue.resolve()}: 2 groups" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip().startswith(zk_group)}
    assert rows[a][-1] == "0" and rows[b][-1] == "2"
    assert rows[a][1] == str((tmp_path / "a").resolve())
    out = io.StringIO()
    show_status(zk_hosts, b, as_json=True, out=out)
    queues = json.loads(out.getvalue())["queues"]
    assert [q["queue_dir"] for q in queues] == [str(queue.resolve())]
    assert {g["group"]: g["lag"] for g in queues[0]["groups"]} == {a: 0, b: 2}

    listed = tenure("groups", "list", "--zk", zk_hosts, "--queue-dir", str(queue), "--json")
    assert listed.returncode == 0, listed.stderr
    assert {g["group"]: g["lag"] for g in json.loads(listed.stdout)["groups"]} == {a: 0, b: 2}

    elsewhere = Path("/nonexistent-tenure-queue") / zk_group
    register_group(zk_client, QueueKey(str(uuid.uuid4()), str(elsewhere)), f"{zk_group}-c", tmp_path / "c",
                   ensure_data_root_id(tmp_path / "c"))
    out = io.StringIO()
    show_status(zk_hosts, f"{zk_group}-c", out=out)
    assert f"queue {elsewhere}: 1 group" in out.getvalue() and "unknown" in out.getvalue()
    out = io.StringIO()
    show_status(zk_hosts, f"{zk_group}-none", out=out)
    assert "queue: not registered" in out.getvalue()


@pytest.mark.timeout(180)
def test_a_spark_replica_registers_its_group_and_a_shared_data_root_is_refused(
    zk_hosts: str, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """`tenure run --queue-dir` registers the group at start-up (here as a cold follower: no Spark starts);
    a second group on the same data root exits 2 with one line; SIGTERM still exits 0."""
    queue = tmp_path / "queue"
    spec = ReplicaSpec(group=zk_group, data_root=tmp_path / "a", queue_dir=queue, career="spark", standby="cold",
                       session_timeout_s=4, handover_timeout_s=2)
    with leadership(zk_client, zk_group, "holder"):  # someone else leads: the replica follows
        replica = Replica("r1", zk_hosts, spec, tmp_path)
        try:
            replica.start()
            wait_for(lambda: [g.group for g in list_groups(zk_client, queue_key(queue))] == [zk_group], 60,
                     "the replica to register its group")
            wait_for(lambda: replica.get("/readyz")[0] == 200, 60, "the follower to be ready")
            second = ReplicaSpec(group=f"{zk_group}-b", data_root=tmp_path / "a", queue_dir=queue, career="spark")
            line = one_error(tenure("run", *second.argv(zk=zk_hosts, replica_id="r2", metrics_port=free_port())))
            assert f"is already the data root of group '{zk_group}'" in line
            replica.signal(signal.SIGTERM)
            assert replica.wait(60) == 0
        finally:
            replica.reap()
    registered = [g.group for g in list_groups(zk_client, queue_key(queue))]
    assert registered == [zk_group], "registration outlives the process"


# --------------------------------------------------------------------------------------------- Spark, end to end


def caught_up(root: Path, queue: Path, group: str) -> Callable[[], bool]:
    """Done when the group wrote every id and quarantined every bad line, and marked every landing file."""

    def check() -> bool:
        report = verify(root, max_line_bytes=MAX_LINE, queue_dir=queue, group=group)
        return report.unaccounted == 0 and report.unquarantined == 0 and queue_lag(queue, group) == 0

    return check


def exactly_once(root: Path, queue: Path, group: str) -> Any:
    report = verify(root, max_line_bytes=MAX_LINE, queue_dir=queue, group=group)
    assert report.ok, report.render()
    assert report.ids_written == report.ids_in == report.rows_written
    assert report.quarantined == report.bad_lines_in == report.quarantine_rows
    return report


@pytest.mark.timeout(900)
def test_two_groups_each_write_every_message_once_and_archiving_waits_for_the_slower(
    spark: Any, zk_hosts: str, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """Groups A and B read one queue, each into its own data root. A consumes first while B is not leading:
    the files stay in landing/. Once B has consumed them they are archived. Then a third group C registers
    and never runs; A and B, running together, consume new files exactly once, which stay in landing/ until
    C is removed with `tenure groups remove`. verify is clean for each group."""
    queue = tmp_path / "queue"
    a, b, c = f"{zk_group}-a", f"{zk_group}-b", f"{zk_group}-c"
    enroll(zk_client, queue, a, tmp_path / "a")
    enroll(zk_client, queue, b, tmp_path / "b")
    q = Queue(queue)
    q.standard(files=3)
    reg = registry(zk_client, queue)
    career_a = SparkCareer(make_config(tmp_path / "a", queue_dir=queue), Recorder(), replica_id="a1", group=a,
                           registered_groups=reg)
    career_b = SparkCareer(make_config(tmp_path / "b", queue_dir=queue), Recorder(), replica_id="b1", group=b,
                           registered_groups=reg)
    try:
        with leadership(zk_client, a, "a1") as (_, ctx):
            career_a.inaugurate(ctx)
            run_until([career_a], caught_up(tmp_path / "a", queue, a))
            career_a.hand_over(Outcome.CLEAN)
        exactly_once(tmp_path / "a", queue, a)
        assert names_in(queue / "landing") == [f"q-{i:05d}.jsonl" for i in range(1, 4)], "B still needs them"
        assert names_in(queue / "archive") == []
        assert not list((tmp_path / "a").glob("landing")), "the queue lives in the queue dir, not the data root"

        with leadership(zk_client, b, "b1") as (_, ctx):
            career_b.inaugurate(ctx)
            run_until([career_b], lambda: caught_up(tmp_path / "b", queue, b)() and not names_in(queue / "landing"))
            career_b.hand_over(Outcome.CLEAN)
        exactly_once(tmp_path / "b", queue, b)
        assert names_in(queue / "archive") == [f"q-{i:05d}.jsonl" for i in range(1, 4)]
        assert not any((queue / "consumed").rglob("*.jsonl")), "marks of archived files are removed"

        # C registers but never runs: A and B, together, consume two new files, which C holds back.
        enroll(zk_client, queue, c, tmp_path / "c")
        q.standard(files=2, start=1000)
        with leadership(zk_client, a, "a1") as (_, ctx_a), leadership(zk_client, b, "b1") as (_, ctx_b):
            career_a.inaugurate(ctx_a)
            career_b.inaugurate(ctx_b)
            run_until([career_a, career_b], lambda: caught_up(tmp_path / "a", queue, a)()
                    and caught_up(tmp_path / "b", queue, b)())
            assert names_in(queue / "landing") == ["q-00004.jsonl", "q-00005.jsonl"], "C still needs them"
            assert queue_lag(queue, c) == 2
            result = tenure("groups", "remove", c, "--zk", zk_hosts, "--queue-dir", str(queue))
            assert result.returncode == 0, result.stderr
            run_until([career_a, career_b], lambda: not names_in(queue / "landing"), timeout_s=60)
            career_a.hand_over(Outcome.CLEAN)
            career_b.hand_over(Outcome.CLEAN)
    finally:
        career_a.close()
        career_b.close()
    for root, group in ((tmp_path / "a", a), (tmp_path / "b", b)):
        report = exactly_once(root, queue, group)
        assert report.ids_in == 100 and report.bad_lines_in == 5
    assert names_in(queue / "archive") == [f"q-{i:05d}.jsonl" for i in range(1, 6)]
