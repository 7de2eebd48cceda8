"""Election under real faults: a herd of 50, a killed leader process, frozen and stopped ZooKeeper servers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from tenure.election import (
    Elected,
    Following,
    LeadershipState,
    Resumed,
    Revoked,
    Suspended,
    four_letter_word,
    group_status,
)
from tenure.errors import Fenced, NotLeader
from tenure.service.local import Ensemble, start_ensemble
from tests._polling import stays_for
from tests.test_election import SESSION_TIMEOUT_S, contenders, wait_until


@pytest.fixture(scope="module")
def fault_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ensemble]:
    """One 3-server ensemble of this module's own, shared by the tests that freeze or stop its servers."""
    ensemble = start_ensemble(tmp_path_factory.mktemp("zk-faults"))
    yield ensemble
    ensemble.stop()


@pytest.fixture()
def private_ensemble(fault_ensemble: Ensemble) -> Iterator[Ensemble]:
    """The module's ensemble, given back whole after each test: frozen servers continued, stopped ones
    restarted, all serving (overrides the conftest fixture, which starts a new ensemble per test)."""
    yield fault_ensemble
    for server in fault_ensemble:
        if server.running and server.process is not None:
            server.process.send_signal(signal.SIGCONT)
        else:
            fault_ensemble.start_server(server)
    fault_ensemble.wait_serving(60)


def _watchers_by_path(hosts: list[tuple[str, int]], prefix: str) -> dict[str, set[int]]:
    """``wchp`` from every server, merged: path → session ids watching it (under ``prefix`` only)."""
    merged: dict[str, set[int]] = defaultdict(set)
    for host, port in hosts:
        path = None
        for line in four_letter_word(host, port, "wchp").splitlines():
            if line.startswith("/"):
                path = line.strip()
            elif line.strip().startswith("0x") and path is not None and path.startswith(prefix):
                merged[path].add(int(line.strip(), 16))
    return dict(merged)


def _servers(hosts: str) -> list[tuple[str, int]]:
    return [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in hosts.split(","))]


def test_herd_free_one_leader_change_wakes_exactly_one_of_50(zk_hosts: str, zk_group: str) -> None:
    """50 contenders: each watches only its predecessor (wchp on every server shows exactly the successor
    watching each node, plus the leader on its own node), and a leader change wakes exactly one contender."""
    with contenders(zk_hosts, zk_group) as made:
        herd = [made.add(f"r{i:02d}", timeout_s=10.0) for i in range(50)]

        def settled() -> bool:
            states = [c.election.state for c in herd if c.election.state is not LeadershipState.IDLE]
            return states.count(LeadershipState.LEADING) == 1 and states.count(LeadershipState.FOLLOWING) == \
                len(states) - 1

        wait_until(settled, 30, "1 leader and 49 followers")
        old_leader = made.leaders()[0]
        before = {c.name: c.election.watch_deliveries for c in herd}
        t0 = time.monotonic()
        old_leader.election.release(5)
        new_leader = wait_until(made.leaders, 5, "a new leader")[0]
        elapsed = time.monotonic() - t0
        wait_until(settled, 10, "the line settled again")
        # the line is settled; any further wake-up would have to come from a watch already delivered
        woken = {c.name: c.election.watch_deliveries - before[c.name] for c in herd if c is not old_leader}
        assert sum(woken.values()) == 1, {k: v for k, v in woken.items() if v}
        assert woken[new_leader.name] == 1
        print(f"50 contenders: successor elected {elapsed * 1000:.1f} ms after release; 1 of 49 woken")

        status = group_status(new_leader.client, zk_group)
        assert len(status.contenders) == 49
        prefix = f"/tenure/{zk_group}/election/"
        expected: dict[str, set[int]] = {}
        for i, node in enumerate(status.contenders):
            watchers = {status.contenders[i + 1].session_id} if i + 1 < len(status.contenders) else set()
            if i == 0:
                watchers.add(node.session_id)  # the leader watches its own node (revocation on deletion)
            if watchers:
                expected[prefix + node.node] = watchers

        def watch_layout_matches() -> bool:
            return _watchers_by_path(_servers(zk_hosts), prefix) == expected

        wait_until(watch_layout_matches, 5, "wchp to show one watcher per node",
                   interval_s=0.1)
        assert f"/tenure/{zk_group}/election" not in _watchers_by_path(_servers(zk_hosts), f"/tenure/{zk_group}")


_LEADER_SCRIPT = textwrap.dedent("""
    import sys, threading
    import structlog
    from kazoo.client import KazooClient
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    from tenure.election import Elected, Election, Identity
    client = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[3]))
    client.start(timeout=15)
    elected = threading.Event()
    election = Election(client, group=sys.argv[2], identity=Identity.local("doomed"),
                        on_event=lambda e: isinstance(e, Elected) and elected.set())
    election.start()
    elected.wait(30)
    print("ELECTED", election.epoch, flush=True)
    threading.Event().wait()
""")


def test_killed_leader_process_is_replaced_within_session_timeout_plus_1s(zk_hosts: str, zk_group: str) -> None:
    """SIGKILL the leader's process: ZooKeeper expires its session and the follower leads within the
    session timeout + 1 s (plus 0.25 s of slack: expiry is checked in tickTime buckets, then one round-trip)."""
    proc = subprocess.Popen([sys.executable, "-c", _LEADER_SCRIPT, zk_hosts, zk_group, str(SESSION_TIMEOUT_S)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ELECTED"), line
        doomed_epoch = int(line.split()[1])
        with contenders(zk_hosts, zk_group) as made:
            heir = made.add("heir")
            heir.events.wait_for(Following, 10)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            t_elected, elected = heir.events.wait_for(Elected, SESSION_TIMEOUT_S + 3)
            latency = t_elected - t0
            print(f"crash re-election latency: {latency:.3f} s (session timeout {SESSION_TIMEOUT_S} s)")
            assert latency <= SESSION_TIMEOUT_S + 1.0 + 0.25
            assert elected.epoch > doomed_epoch
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _freeze(ensemble: Ensemble, sig: signal.Signals) -> None:
    for server in ensemble:
        assert server.process is not None
        server.process.send_signal(sig)


def test_frozen_ensemble_suspends_at_safe_until_before_kazoo_notices(private_ensemble: Ensemble,
                                                                     zk_group: str) -> None:
    """All servers SIGSTOPped (the TCP connection stays up, so kazoo notices only after its read timeout):
    the leader suspends itself at the safe-until deadline, first, and no commit is sent after that."""
    hosts = private_ensemble.connect_string
    with contenders(hosts, zk_group) as made:
        leader = made.add("r1", safe_fraction=0.4)
        leader.events.wait_for(Elected, 15)
        fence = leader.election.fence()
        _, version = fence.read_commit()
        deadline_budget = 0.4 * SESSION_TIMEOUT_S
        try:
            _freeze(private_ensemble, signal.SIGSTOP)
            t0 = time.monotonic()
            t_suspended, suspended = leader.events.wait_for(Suspended, 5)
            assert suspended.reason == "safe-until deadline passed"
            assert t_suspended - t0 <= deadline_budget + leader.election.tick_s + 0.1
            assert not leader.election.is_leader()
            first_disconnect = [t for t, e in leader.events.events if type(e).__name__ == "ConnectionChanged"
                                and not e.connected]  # type: ignore[union-attr]
            assert not first_disconnect or first_disconnect[0] > t_suspended, "deadline fires before kazoo"
            with pytest.raises(NotLeader):
                fence.commit({"batch": 1}, expected_version=version)
            assert fence.commits_refused == 1
            print(f"safe-until suspension {t_suspended - t0:.3f} s after freezing (budget {deadline_budget} s)")
        finally:
            _freeze(private_ensemble, signal.SIGCONT)
        # afterwards the term either resumes (same session, node verified) or is revoked: never both
        wait_until(lambda: leader.events.of(Resumed) or leader.events.of(Revoked), 30, "Resumed or Revoked")
        assert not (leader.events.of(Resumed) and leader.events.of(Revoked) and
                    leader.events.of(Revoked)[0][0] < leader.events.of(Resumed)[0][0])


def test_stopped_ensemble_suspends_leader_and_refuses_commits(private_ensemble: Ensemble, zk_group: str) -> None:
    """Every server stopped under a leader: Suspended within the safe-until deadline, then every commit
    attempt is refused; when the ensemble is back, the old term never commits again unless it was
    re-verified (Resumed), and a lost session ends it with exactly one Revoked."""
    hosts = private_ensemble.connect_string
    with contenders(hosts, zk_group) as made:
        leader = made.add("r1")
        leader.events.wait_for(Elected, 15)
        fence = leader.election.fence()
        _, version = fence.read_commit()
        for server in private_ensemble:
            private_ensemble.stop_server(server)
        t_down = time.monotonic()
        # The servers stop one at a time, so the session may move to one still up (Suspended, then Resumed)
        # before the last goes: the term is suspended for good once Suspended is the newest event.
        wait_until(lambda: leader.events.kinds()[-1:] == ["Suspended"], 5, "Suspended as the newest event")
        t_suspended, _ = leader.events.of(Suspended)[-1]
        assert t_suspended - t_down <= 0.5 * SESSION_TIMEOUT_S + leader.election.tick_s + 0.1
        refused: list[Exception] = []

        def commit_refused() -> bool:
            try:
                fence.commit({"batch": 1}, expected_version=version)
            except (NotLeader, Fenced) as exc:
                refused.append(exc)
                return True
            return False

        stays_for(commit_refused, SESSION_TIMEOUT_S - (time.monotonic() - t_suspended),  # the whole session length
                  "every commit refused while suspended")
        for server in private_ensemble:
            private_ensemble.start_server(server)
        private_ensemble.wait_serving(60)

        def since_suspended(kind: type[Any]) -> list[Any]:
            return [e for t, e in leader.events.of(kind) if t > t_suspended]

        wait_until(lambda: since_suspended(Resumed) or since_suspended(Revoked), 40, "Resumed or Revoked")
        if since_suspended(Revoked):
            assert [e.reason for _, e in leader.events.of(Revoked)] == ["session lost"]
            with pytest.raises((NotLeader, Fenced)):
                fence.commit({"batch": 1}, expected_version=version)
        print(f"stopped ensemble: suspended {t_suspended - t_down:+.3f} s from the last stop; {len(refused)} commits "
              f"refused; events {leader.events.kinds()}")


def test_server_failover_suspends_then_resumes_same_session(private_ensemble: Ensemble, zk_group: str) -> None:
    """The leader's server stops; kazoo reconnects to another server with the same session: Suspended,
    then Resumed after the node is re-verified, with the same epoch, and commits work again."""
    servers = list(private_ensemble)
    hosts = ",".join(s.address for s in servers)
    with contenders(hosts, zk_group) as made:
        leader = made.add("r1", timeout_s=10.0, client_kwargs={"randomize_hosts": False})
        _, elected = leader.events.wait_for(Elected, 15)
        follower = made.add("r2", timeout_s=10.0)
        follower.events.wait_for(Following, 15)
        session = leader.client.client_id[0]
        connected_to = _connected_server(leader.client, private_ensemble)
        private_ensemble.stop_server(connected_to)
        _, suspended = leader.events.wait_for(Suspended, 10)
        assert suspended.reason in ("connection suspended", "safe-until deadline passed")
        _, resumed = leader.events.wait_for(Resumed, 20)
        assert resumed.epoch == elected.epoch and leader.client.client_id[0] == session
        assert leader.events.kinds() == ["Elected", "Suspended", "Resumed"]
        assert leader.election.is_leader() and not follower.election.is_leader()
        fence = leader.election.fence()
        assert fence.commit({"batch": 1}, expected_version=fence.read_commit()[1]) == 1


def _connected_server(client: KazooClient, ensemble: Ensemble) -> str:
    """The name of the server a client is connected to, from ``cons`` on each server."""
    session = f"sid=0x{client.client_id[0]:x}"
    for server in ensemble:
        reply = four_letter_word("127.0.0.1", server.client_port, "cons")
        if re.search(rf"{session}\b", reply):
            return server.name
    raise AssertionError(f"no server lists session {session}")

