"""Election: the recipe, its events, the fence, status and ACLs, against a real ZooKeeper ensemble."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NotEmptyError

from tenure.election import (
    TRANSITIONS,
    DigestCredential,
    Elected,
    Election,
    ElectionEvent,
    Following,
    GroupPaths,
    HandoverRecord,
    Identity,
    IllegalTransitionError,
    LeadershipState,
    Revoked,
    check_transition,
    group_status,
)
from tenure.election._transaction import fenced_set
from tenure.errors import ConfigError, ElectionError, Fenced, NotLeader
from tenure.service.local import wait_for

T = TypeVar("T")
SESSION_TIMEOUT_S = 3.0  # short sessions keep expiry tests quick (the test ensemble allows 2–60 s)


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.005) -> T:
    """``wait_for`` polling every 5 ms by default: election latencies are measured in milliseconds."""
    return wait_for(predicate, timeout_s, what, interval_s=interval_s)


@dataclass
class Recorder:
    """Collects events with the monotonic time each arrived (the on_event callback: it only appends)."""

    events: list[tuple[float, ElectionEvent]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: ElectionEvent) -> None:
        with self.lock:
            self.events.append((time.monotonic(), event))

    def of(self, kind: type[Any]) -> list[tuple[float, Any]]:
        with self.lock:
            return [(t, e) for t, e in self.events if isinstance(e, kind)]

    def kinds(self, *, skip_connection: bool = True) -> list[str]:
        with self.lock:
            return [type(e).__name__ for _, e in self.events
                    if not (skip_connection and type(e).__name__ == "ConnectionChanged")]

    def wait_for(self, kind: type[Any], timeout_s: float, count: int = 1) -> tuple[float, Any]:
        """The ``count``-th event of ``kind`` (time, event), waiting up to ``timeout_s``."""
        found = wait_until(lambda: len(self.of(kind)) >= count and self.of(kind), timeout_s,
                           f"{count} {kind.__name__} event(s); got {self.kinds()}")
        return found[count - 1]


@dataclass
class Contender:
    """One replica of the test: its own kazoo client, its election and its event recorder."""

    name: str
    client: KazooClient
    election: Election
    events: Recorder


def new_client(hosts: str, timeout_s: float = SESSION_TIMEOUT_S, **kwargs: Any) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=timeout_s, **kwargs)
    client.start(timeout=15)
    return client


class Contenders:
    """A factory of contenders for one group, stopping every client and election it made at the end."""

    def __init__(self, hosts: str, group: str) -> None:
        self.hosts = hosts
        self.group = group
        self.made: list[Contender] = []

    def add(self, name: str, *, start: bool = True, timeout_s: float = SESSION_TIMEOUT_S,
            credential: DigestCredential | None = None, client_kwargs: dict[str, Any] | None = None,
            **election_kwargs: Any) -> Contender:
        kwargs = dict(client_kwargs or {})
        if credential is not None:
            kwargs["auth_data"] = credential.auth_data()
        client = new_client(self.hosts, timeout_s, **kwargs)
        events = Recorder()
        election = Election(client, group=self.group, identity=Identity.local(name, f"http://{name}/metrics"),
                            on_event=events, credential=credential, **election_kwargs)
        contender = Contender(name, client, election, events)
        self.made.append(contender)
        if start:
            election.start()
        return contender

    def close(self) -> None:
        for c in self.made:
            # a test that broke the connection on purpose may fail the release: the client stop below ends it
            with contextlib.suppress(Exception):
                c.election.close(timeout_s=2.0)
            c.client.stop()
            c.client.close()
        errors = [(c.name, e) for c in self.made for e in c.election.control_errors]
        assert not errors, f"unexpected errors on election control threads: {errors}"

    def leaders(self) -> list[Contender]:
        return [c for c in self.made if c.election.is_leader()]


@contextmanager
def contenders(hosts: str, group: str) -> Iterator[Contenders]:
    made = Contenders(hosts, group)
    try:
        yield made
    finally:
        made.close()


def expire_session(hosts: str, client: KazooClient) -> None:
    """Expire ``client``'s session for real (kazoo's own test harness trick): open a second connection with
    the same session id and password, then close it; the server ends the session and its ephemerals."""
    session_id, password = client.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=SESSION_TIMEOUT_S)
    twin.start(timeout=15)
    twin.stop()
    twin.close()


# ---------------------------------------------------------------- pure logic: the transition table

_S = LeadershipState
_LEGAL = [(a, b) for a in _S for b in _S if b in TRANSITIONS[a]]
_ILLEGAL = [(a, b) for a in _S for b in _S if b not in TRANSITIONS[a]]


@pytest.mark.parametrize(("current", "target"), _LEGAL, ids=[f"{a.name}->{b.name}" for a, b in _LEGAL])
def test_legal_transition_is_allowed(current: LeadershipState, target: LeadershipState) -> None:
    """Every step listed in TRANSITIONS is accepted and returns the target state."""
    assert check_transition(current, target) is target


@pytest.mark.parametrize(("current", "target"), _ILLEGAL, ids=[f"{a.name}->{b.name}" for a, b in _ILLEGAL])
def test_illegal_transition_raises_clear_error(current: LeadershipState, target: LeadershipState) -> None:
    """Any step not in TRANSITIONS raises IllegalTransitionError naming both states."""
    with pytest.raises(IllegalTransitionError, match=f"{current.name} → {target.name}"):
        check_transition(current, target)


@pytest.mark.parametrize(
    ("name", "current", "target", "legal"),
    [
        ("elected from following", _S.FOLLOWING, _S.LEADING, True),
        ("suspend a leader", _S.LEADING, _S.SUSPENDED, True),
        ("resume", _S.SUSPENDED, _S.LEADING, True),
        ("revoke a suspended leader", _S.SUSPENDED, _S.JOINING, True),
        ("a follower cannot be suspended", _S.FOLLOWING, _S.SUSPENDED, False),
        ("no lead without joining", _S.IDLE, _S.LEADING, False),
        ("release ends idle, not following", _S.RELEASING, _S.FOLLOWING, False),
        ("closed is terminal", _S.CLOSED, _S.IDLE, False),
        ("a revoked leader rejoins, never follows directly", _S.LEADING, _S.FOLLOWING, False),
    ],
)
def test_transition_table_cases(name: str, current: LeadershipState, target: LeadershipState, legal: bool) -> None:
    """Named cases of the table that the recipe's safety rests on."""
    if legal:
        assert check_transition(current, target) is target, name
    else:
        with pytest.raises(IllegalTransitionError):
            check_transition(current, target)


def test_every_state_but_closed_can_reach_idle_or_closed() -> None:
    """No state is a trap: from every non-terminal state some path leads to CLOSED."""
    for start in _S:
        seen, frontier = {start}, [start]
        while frontier:
            for nxt in TRANSITIONS[frontier.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        assert _S.CLOSED in seen, start


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"safe_fraction": 0.0}, "safe_fraction=0.0"),
        ({"safe_fraction": 1.0}, "safe_fraction=1.0"),
        ({"group": "a/b"}, "group='a/b'"),
        ({"tick_s": 5.0}, "tick_s=5.0"),
    ],
)
def test_config_is_validated_with_clear_messages(kwargs: dict[str, Any], message: str) -> None:
    """Bad settings fail at construction, naming the field and its value."""
    client = KazooClient(hosts="127.0.0.1:1", timeout=SESSION_TIMEOUT_S)
    args: dict[str, Any] = {"group": "g", "identity": Identity.local("r1"), **kwargs}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Election(client, **args)


def test_identity_and_credential_basics() -> None:
    """Identity round-trips through node data; the credential yields kazoo auth data and hides its password."""
    ident = Identity.local("r9", "http://h:1/metrics")
    assert Identity.from_bytes(ident.to_bytes()) == ident
    assert Identity.from_bytes(b"not json") is None
    cred = DigestCredential("tenure", "pw")
    assert cred.auth_data() == [("digest", "tenure:pw")]
    assert "pw" not in repr(cred)
    assert len(cred.acls()) == 2 and len(DigestCredential("u", "p", world_readable=False).acls()) == 1


# ---------------------------------------------------------------- the recipe against a real ensemble


@pytest.fixture()
def group_contenders(zk_hosts: str, zk_group: str) -> Iterator[Contenders]:
    """A contender factory for the test's own group (every client stopped afterwards)."""
    with contenders(zk_hosts, zk_group) as made:
        yield made


def test_single_contender_is_elected_with_czxid_epoch(group_contenders: Contenders, zk_client: KazooClient) -> None:
    """A lone contender leads; its epoch is the czxid of its own node and its data is its identity."""
    c = group_contenders.add("r1")
    _, elected = c.events.wait_for(Elected, 10)
    assert c.election.state is LeadershipState.LEADING and c.election.is_leader()
    node = c.election.node
    assert node is not None and "-n_" in node
    data, stat = zk_client.get(node)
    assert elected.epoch == c.election.epoch == stat.czxid
    assert json.loads(data)["replica_id"] == "r1"
    assert stat.ephemeralOwner == c.client.client_id[0]
    assert c.events.kinds() == ["Elected"]


def test_fenced_commit_round_trip(group_contenders: Contenders) -> None:
    """commit() CASes the record, adds the epoch, returns the new version; a stale version is Fenced."""
    c = group_contenders.add("r1")
    c.events.wait_for(Elected, 10)
    fence = c.election.fence()
    assert fence.read_commit() == (None, 0)
    v1 = fence.commit({"batch": 1}, expected_version=0)
    record, version = fence.read_commit()
    assert version == v1 == 1 and record == {"batch": 1, "epoch": fence.epoch}
    with pytest.raises(Fenced, match=r"expected version 0"):
        fence.commit({"batch": 2}, expected_version=0)
    assert fence.commits_attempted == 2 and fence.commits_fenced == 1
    assert c.election.commits_attempted == 2 and c.election.commits_fenced == 1
    assert fence.commit({"batch": 2}, expected_version=1) == 2


def test_five_contenders_exactly_one_leader_and_it_is_the_lowest(group_contenders: Contenders) -> None:
    """5 contenders: at every sampled moment at most one leads; whenever the line is settled exactly one
    leads and it owns the lowest live node. Checked across three leader changes (release + rejoin)."""
    made = [group_contenders.add(f"r{i}") for i in range(5)]
    group = group_contenders.group
    zk = made[0].client

    def settled_leader() -> Contender | None:
        leaders = group_contenders.leaders()
        states = [c.election.state for c in made]
        if len(leaders) == 1 and states.count(LeadershipState.FOLLOWING) == 4:
            return leaders[0]
        return None

    for _round in range(4):
        leader = wait_until(settled_leader, 10, "one settled leader")
        status = group_status(zk, group)
        assert status.leader is not None and leader.election.node is not None
        assert status.leader.node == leader.election.node.rsplit("/", 1)[1], "leader is the lowest live node"
        assert status.leader.epoch == leader.election.epoch
        # sample while the leader hands over and rejoins at the back
        stop = threading.Event()
        counts: list[int] = []

        def sample(stop: threading.Event, counts: list[int]) -> None:
            while not stop.is_set():
                counts.append(len(group_contenders.leaders()))
                time.sleep(0.002)

        sampler = threading.Thread(target=sample, args=(stop, counts))
        sampler.start()
        leader.election.release(5)
        leader.election.join()
        wait_until(settled_leader, 10, "a new settled leader")
        stop.set()
        sampler.join()
        assert counts and max(counts) <= 1, f"two leaders at once in samples: {sorted(set(counts))}"
    for c in made:  # revoked exactly once per term, only after elected
        kinds = [k for k in c.events.kinds() if k in ("Elected", "Revoked")]
        assert kinds[::2] == ["Elected"] * len(kinds[::2]) and kinds[1::2] == ["Revoked"] * len(kinds[1::2])


def test_graceful_release_elects_successor_within_200ms(group_contenders: Contenders) -> None:
    """release() deletes the node at once: the successor is elected within 200 ms (kazoo: ~13 ms)."""
    first = group_contenders.add("r1")
    first.events.wait_for(Elected, 10)
    second = group_contenders.add("r2")
    second.events.wait_for(Following, 10)
    t0 = time.monotonic()
    first.election.release(5)
    t_elected, elected = second.events.wait_for(Elected, 2)
    latency = t_elected - t0
    print(f"graceful re-election latency: {latency * 1000:.1f} ms")
    assert latency < 0.2
    assert first.election.state is LeadershipState.IDLE
    assert first.events.of(Revoked)[0][1].reason == "released"
    assert elected.epoch > first.events.of(Elected)[0][1].epoch
    first.election.join()
    _, following = first.events.wait_for(Following, 10)
    assert following == Following(leader_replica="r2", position=1)


def test_follower_events_name_the_leader_and_position(group_contenders: Contenders) -> None:
    """Following carries the leader's replica id and the place in line; each predecessor change re-emits it."""
    made = [group_contenders.add("r0")]
    made[0].events.wait_for(Elected, 10)
    for i in (1, 2):  # one at a time, so the line order is known
        made.append(group_contenders.add(f"r{i}"))
        made[i].events.wait_for(Following, 10)
    assert made[2].events.of(Following)[0][1] == Following("r0", 2)
    made[1].election.release(5)
    assert made[2].events.wait_for(Following, 10, count=2)[1] == Following("r0", 1)
    assert [c.identity.replica_id for c in made[0].election.contenders() if c.identity] == ["r0", "r2"]


def test_session_expiry_revokes_once_and_rejoins_with_higher_epoch(
        group_contenders: Contenders, zk_hosts: str) -> None:
    """An expired leader session: Revoked("session lost") once, the follower takes over, and the old
    leader rejoins at the back with a new node and a higher epoch; its old fence is rejected."""
    first = group_contenders.add("r1")
    first.events.wait_for(Elected, 10)
    old_fence = first.election.fence()
    _, version = old_fence.read_commit()
    second = group_contenders.add("r2")
    second.events.wait_for(Following, 10)
    old_node = first.election.node
    expire_session(zk_hosts, first.client)
    _, revoked = first.events.wait_for(Revoked, 10)
    assert revoked.reason == "session lost"
    _, elected = second.events.wait_for(Elected, SESSION_TIMEOUT_S + 1)
    wait_until(lambda: first.election.state is LeadershipState.FOLLOWING, 10, "the old leader following")
    assert first.election.node != old_node
    assert len(first.events.of(Revoked)) == 1
    with pytest.raises((Fenced, NotLeader)):
        old_fence.commit({"batch": 1}, expected_version=version)
    second.election.release(5)
    _, again = first.events.wait_for(Elected, 5, count=2)
    assert again.epoch > elected.epoch > revoked.epoch


def test_transaction_from_expired_session_is_fenced(group_contenders: Contenders, zk_hosts: str) -> None:
    """The fence itself (no Python pre-check): check(own node) + set_data sent after the session that owned
    the node expired fails with Fenced naming the group, epoch and node; the record is untouched."""
    c = group_contenders.add("r1")
    _, elected = c.events.wait_for(Elected, 10)
    fence = c.election.fence()
    _, version = fence.read_commit()
    node = c.election.node
    assert node is not None
    expire_session(zk_hosts, c.client)
    wait_until(lambda: c.client.connected and c.client.client_id and c.events.of(Revoked), 10, "a new session")
    context = f"group {c.election.group}, epoch {elected.epoch}, node {node}, expected version {version}"
    with pytest.raises(Fenced, match=r"own election node .* is gone") as info:
        fenced_set(c.client, node=node, node_version=0, target=GroupPaths(c.election.group).commit,
                   data=b'{"batch":1}', expected_version=version, timeout_s=5, context=context)
    assert str(elected.epoch) in str(info.value) and node in str(info.value)
    assert fence.read_commit() == (None, version)
    with pytest.raises(Fenced, match="term is over"):  # and the public path refuses too
        fence.commit({"batch": 1}, expected_version=version)


def test_lower_epoch_commit_is_rejected(group_contenders: Contenders, zk_client: KazooClient) -> None:
    """A leader whose epoch is below the one stored in /commit is Fenced before sending, and nothing changes."""
    c = group_contenders.add("r1")
    c.events.wait_for(Elected, 10)
    fence = c.election.fence()
    path = GroupPaths(c.election.group).commit
    zk_client.set(path, json.dumps({"batch": 9, "epoch": fence.epoch + 1000}).encode())
    record, version = fence.read_commit()
    assert record is not None and record["epoch"] > fence.epoch
    with pytest.raises(Fenced, match=f"stored commit has epoch {fence.epoch + 1000}"):
        fence.commit({"batch": 10}, expected_version=version)
    assert fence.read_commit() == (record, version)


def test_deleted_node_revokes_and_next_commit_is_fenced(group_contenders: Contenders, zk_client: KazooClient) -> None:
    """Deleting the leader's node (an operator, or a bug) revokes the term; a commit racing it is rejected."""
    c = group_contenders.add("r1")
    c.events.wait_for(Elected, 10)
    fence = c.election.fence()
    _, version = fence.read_commit()
    assert c.election.node is not None
    zk_client.delete(c.election.node)
    with pytest.raises((Fenced, NotLeader)):
        fence.commit({"batch": 1}, expected_version=version)
    _, revoked = c.events.wait_for(Revoked, 5)
    assert revoked.reason == "node deleted"
    _, again = c.events.wait_for(Elected, 5, count=2)
    assert again.epoch > revoked.epoch
    assert fence.read_commit() == (None, version)


def _delete_parent(client: KazooClient, path: str) -> None:
    """Delete ``path`` and its children, again when a contender's rejoin creates a child between the recursive
    delete's children and the parent (NotEmptyError)."""
    def deleted() -> bool:
        try:
            client.delete(path, recursive=True)
        except NotEmptyError:
            return False
        return True

    wait_until(deleted, 10, f"{path} deleted", interval_s=0.0)


def test_epoch_keeps_rising_after_election_parent_recreated(
        group_contenders: Contenders, zk_client: KazooClient) -> None:
    """Deleting and re-creating /tenure/<group>/election restarts sequence numbers at 0, yet the epoch
    (czxid) of the next term is still higher: that is why the epoch is not the sequence number."""
    c = group_contenders.add("r1")
    _, first = c.events.wait_for(Elected, 10)
    assert c.election.node is not None and c.election.node.endswith("-n_0000000000")
    c.election.release(5)
    c.election.join()
    _, second = c.events.wait_for(Elected, 10, count=2)
    assert c.election.node.endswith("-n_0000000001") and second.epoch > first.epoch
    c.election.release(5)
    zk_client.delete(GroupPaths(c.election.group).election, recursive=True)
    c.election.join()
    _, third = c.events.wait_for(Elected, 10, count=3)
    assert c.election.node.endswith("-n_0000000000"), "sequence restarted with the new parent"
    assert third.epoch > second.epoch > first.epoch
    # also under a live leader: deleting the whole parent revokes and the rejoin still rises
    _delete_parent(zk_client, GroupPaths(c.election.group).election)
    _, revoked = c.events.wait_for(Revoked, 10, count=3)
    assert revoked.reason == "node deleted"
    _, fourth = c.events.wait_for(Elected, 10, count=4)
    assert fourth.epoch > third.epoch


def test_connection_loss_during_create_leaves_exactly_one_node(
        group_contenders: Contenders, zk_client: KazooClient) -> None:
    """The create reaches the server but its reply is lost (forced: the node is created on the same session
    under the recipe's guid, then ConnectionLoss raised): the retry finds it by guid, creates no second one."""
    from kazoo.exceptions import ConnectionLoss

    c = group_contenders.add("r1", start=False)
    created: list[str] = []

    def lose_reply(prefix: str) -> None:
        if not created:
            created.append(c.client.create(prefix, c.election.identity.to_bytes(), ephemeral=True, sequence=True))
            raise ConnectionLoss("reply lost (forced by the test)")

    c.election._before_create = lose_reply
    c.election.start()
    c.events.wait_for(Elected, 10)
    names = zk_client.get_children(GroupPaths(c.election.group).election)
    assert len(names) == 1
    assert c.election.node == created[0]
    guid = created[0].rsplit("/", 1)[1].split("-n_")[0]
    assert sum(guid in n for n in names) == 1


def test_release_join_close_lifecycle(group_contenders: Contenders) -> None:
    """start twice is refused; release is idempotent; join rejoins; close ends in CLOSED; join after close fails."""
    c = group_contenders.add("r1")
    c.events.wait_for(Elected, 10)
    with pytest.raises(ElectionError, match="cannot be started more than once"):
        c.election.start()
    c.election.release(5)
    c.election.release(5)
    assert c.election.state is LeadershipState.IDLE and not c.election.is_leader()
    with pytest.raises(NotLeader):
        c.election.fence()
    c.election.join()
    c.events.wait_for(Elected, 10, count=2)
    c.election.close()
    assert c.election.state is LeadershipState.CLOSED
    with pytest.raises(ElectionError, match="join"):
        c.election.join()
    assert c.client.connected, "close() leaves the caller's client running"


def test_handover_record_is_fenced(group_contenders: Contenders) -> None:
    """write_handover stores the record with the epoch; a newer epoch's record cannot be overwritten."""
    first = group_contenders.add("r1")
    first.events.wait_for(Elected, 10)
    assert first.election.read_handover() is None
    epoch1 = first.election.epoch
    assert epoch1 is not None
    first.election.write_handover(HandoverRecord(epoch1, 3, True, 1.0))
    assert first.election.read_handover() == HandoverRecord(epoch1, 3, True, 1.0)
    second = group_contenders.add("r2")
    second.events.wait_for(Following, 10)
    first.election.release(5)
    with pytest.raises(NotLeader):
        first.election.write_handover(HandoverRecord(epoch1, 4, True, 2.0))
    second.events.wait_for(Elected, 5)
    # The record's epoch is the writing term's, whatever the record says.
    second.election.write_handover(HandoverRecord(epoch1, 5, False, 3.0))
    assert second.election.read_handover() == HandoverRecord(second.election.epoch or 0, 5, False, 3.0)


def test_group_status_lists_leader_contenders_and_commit(group_contenders: Contenders) -> None:
    """group_status: the leader (lowest node) with identity, epoch and session; contenders in line order."""
    made = [group_contenders.add("r0")]
    made[0].events.wait_for(Elected, 10)
    for i in (1, 2):  # one at a time, so the line order is known
        made.append(group_contenders.add(f"r{i}"))
        made[i].events.wait_for(Following, 10)
    fence = made[0].election.fence()
    fence.commit({"batch": 4}, expected_version=fence.read_commit()[1])
    status = group_status(made[0].client, group_contenders.group)
    assert status.leader is not None and status.leader.identity is not None
    assert status.leader.identity.replica_id == "r0" and status.leader.epoch == fence.epoch
    assert status.leader.session_id == made[0].client.client_id[0]
    assert [c.identity.replica_id for c in status.contenders if c.identity] == ["r0", "r1", "r2"]
    assert status.commit == {"batch": 4, "epoch": fence.epoch} and status.commit_version == 1
    as_json = status.to_json()
    assert as_json["epoch"] == fence.epoch and len(as_json["contenders"]) == 3
    json.dumps(as_json)
    empty = group_status(made[0].client, group_contenders.group + "-none")
    assert empty.leader is None and empty.contenders == [] and empty.commit is None


def test_acls_keep_other_clients_out(zk_hosts: str, zk_group: str) -> None:
    """With a digest credential, a client without it cannot delete the leader's node nor write the commit
    record, but can read them (world-readable by default); the leader's own commits still work."""
    cred = DigestCredential("tenure", "s3cret")
    with contenders(zk_hosts, zk_group) as made:
        leader = made.add("r1", credential=cred)
        leader.events.wait_for(Elected, 10)
        paths = GroupPaths(zk_group)
        stranger = new_client(zk_hosts)
        try:
            assert leader.election.node is not None
            with pytest.raises(NoAuthError):
                stranger.delete(leader.election.node)
            with pytest.raises(NoAuthError):
                stranger.set(paths.commit, b'{"batch": 666, "epoch": 99999999999}')
            with pytest.raises(NoAuthError):
                stranger.create(paths.node("intruder-n_"), b"", ephemeral=True, sequence=True)
            status = group_status(stranger, zk_group)  # world-readable: status works without the credential
            assert status.leader is not None and status.leader.identity is not None
            fence = leader.election.fence()
            assert fence.commit({"batch": 1}, expected_version=fence.read_commit()[1]) == 1
            assert leader.election.is_leader()
        finally:
            stranger.stop()
            stranger.close()


def test_acl_without_world_read_hides_the_group(zk_hosts: str, zk_group: str) -> None:
    """world_readable=False: a client without the credential cannot even read the commit record."""
    cred = DigestCredential("tenure", "s3cret", world_readable=False)
    with contenders(zk_hosts, zk_group) as made:
        made.add("r1", credential=cred).events.wait_for(Elected, 10)
        stranger = new_client(zk_hosts)
        try:
            with pytest.raises(NoAuthError):
                stranger.get(GroupPaths(zk_group).commit)
        finally:
            stranger.stop()
            stranger.close()


# ---------------------------------------------------------------- a group of several queues: a line per queue

@pytest.mark.parametrize(("queue", "queues", "election", "commit"), [
    pytest.param(0, 1, "/tenure/g/election", "/tenure/g/commit", id="one queue: the paths from before queues"),
    pytest.param(0, 4, "/tenure/g/queues/0/election", "/tenure/g/queues/0/commit", id="queue 0 of 4"),
    pytest.param(3, 4, "/tenure/g/queues/3/election", "/tenure/g/queues/3/commit", id="queue 3 of 4"),
])
def test_each_queue_has_its_paths_and_the_group_keeps_its_own(queue: int, queues: int, election: str,
                                                              commit: str) -> None:
    """A queue's election line, commit, handover, handover request and history are its own (a group of one queue
    keeps today's paths); drained, identity and members are the group's, whatever the count."""
    paths = GroupPaths("g", queue, queues)
    root = election.rsplit("/", 1)[0]
    assert (paths.election, paths.commit) == (election, commit)
    assert (paths.handover, paths.handover_request, paths.history) == (
        f"{root}/handover", f"{root}/handover-request", f"{root}/history")
    assert (paths.drained, paths.identity, paths.members) == ("/tenure/g/drained", "/tenure/g/identity",
                                                               "/tenure/g/members")
    assert GroupPaths("g", queues=queues).of_queue(queue) == paths


@pytest.mark.parametrize(("queue", "queues", "message"), [
    pytest.param(0, 0, "queues=0 is not a number of queues", id="no queues"),
    pytest.param(0, 65, "queues=65 is not a number of queues: use 1 to 64", id="too many"),
    pytest.param(4, 4, "queue=4 is not a queue of a topic of 4: use 0 to 3", id="past the last"),
])
def test_queue_paths_refuse_what_is_not_a_queue(queue: int, queues: int, message: str) -> None:
    """A count outside 1–64, or a queue outside the count, is refused naming the value and the range."""
    with pytest.raises(ConfigError, match=message):
        GroupPaths("g", queue, queues)


def _queue_elections(hosts: str, group: str, name: str, queues: int) -> tuple[KazooClient, list[Election],
                                                                               list[Recorder]]:
    """One replica's elections of every queue of ``group``, all on one new client (one session)."""
    client = new_client(hosts)
    recorders = [Recorder() for _ in range(queues)]
    elections = [Election(client, group=group, queue=q, queues=queues, identity=Identity.local(name),
                          on_event=recorders[q]) for q in range(queues)]
    for election in elections:
        election.start()
    return client, elections, recorders


@pytest.fixture()
def queue_replicas(zk_hosts: str, zk_group: str) -> Iterator[Callable[[str, int], tuple[KazooClient, list[Election],
                                                                                         list[Recorder]]]]:
    """Makes one replica's elections of every queue on one client; closes them all and stops each client after."""
    made: list[tuple[KazooClient, list[Election], list[Recorder]]] = []

    def make(name: str, queues: int) -> tuple[KazooClient, list[Election], list[Recorder]]:
        made.append(_queue_elections(zk_hosts, zk_group, name, queues))
        return made[-1]

    yield make
    for client, elections, _ in made:
        for election in elections:
            with contextlib.suppress(Exception):  # a session expired on purpose may fail the release
                election.close(timeout_s=2.0)
        client.stop()
        client.close()


def test_one_session_leads_several_queues_each_with_its_own_line_and_epoch(
        queue_replicas: Callable[[str, int], tuple[KazooClient, list[Election], list[Recorder]]],
        zk_client: KazooClient, zk_group: str) -> None:
    """Three queues' elections on one client: each queue's line is its own, each elects the replica that joined it
    first, each term's epoch is its own node's czxid (three distinct epochs), each event names its queue, and the
    second replica's elections follow in each line."""
    _client, first, first_events = queue_replicas("r1", 3)
    elected = [recorder.wait_for(Elected, 10)[1] for recorder in first_events]
    _client2, second, second_events = queue_replicas("r2", 3)
    following = [recorder.wait_for(Following, 10)[1] for recorder in second_events]
    assert [e.queue for e in elected] == [f.queue for f in following] == [0, 1, 2]
    assert [f.leader_replica for f in following] == ["r1"] * 3
    for q, election in enumerate(first):
        node = election.node
        assert node is not None and node.startswith(f"/tenure/{zk_group}/queues/{q}/election/")
        assert elected[q].epoch == election.epoch == zk_client.get(node)[1].czxid
        assert len(zk_client.get_children(GroupPaths(zk_group, q, 3).election)) == 2
    assert len({e.epoch for e in elected}) == 3
    assert not zk_client.exists(f"/tenure/{zk_group}/election"), "a group of several queues has no group-wide line"
    assert all(not e.is_leader() for e in second)


def test_a_lost_session_revokes_every_queue_at_once_and_each_line_elects_the_next(
        queue_replicas: Callable[[str, int], tuple[KazooClient, list[Election], list[Recorder]]],
        zk_hosts: str) -> None:
    """The session that leads three queues expires: each of its three elections is revoked ("session lost", once),
    and the replica next in each line is elected within the session timeout and a second, each in a term of its
    own queue with a higher epoch."""
    client, _first, first_events = queue_replicas("r1", 3)
    old = [recorder.wait_for(Elected, 10)[1] for recorder in first_events]
    _client2, _second, second_events = queue_replicas("r2", 3)
    for recorder in second_events:
        recorder.wait_for(Following, 10)
    expired_at = time.monotonic()
    expire_session(zk_hosts, client)
    revoked = [recorder.wait_for(Revoked, 10)[1] for recorder in first_events]
    assert [(r.queue, r.epoch, r.reason) for r in revoked] == [(q, old[q].epoch, "session lost") for q in range(3)]
    taken = [recorder.wait_for(Elected, SESSION_TIMEOUT_S + 1) for recorder in second_events]
    assert all(at - expired_at < SESSION_TIMEOUT_S + 1 for at, _ in taken), [at - expired_at for at, _ in taken]
    assert [(e.queue, e.epoch > old[e.queue].epoch) for _, e in taken] == [(0, True), (1, True), (2, True)]
    assert all(len(recorder.of(Revoked)) == 1 for recorder in first_events)
