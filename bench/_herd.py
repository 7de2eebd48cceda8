"""Herd: ZooKeeper watch deliveries caused by one leader change, tenure's ``Election`` vs a children watch."""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent

from bench._children_watch import ChildrenWatchElection
from bench._common import ENSEMBLE_ATTEMPTS, ENSEMBLE_START_S, BenchContext, Result, Target
from tenure.election import Election, Identity, LeadershipState, four_letter_word
from tenure.service.local import Ensemble, running_ensemble, wait_for

__all__ = ["run_herd"]

_SESSION_TIMEOUT_S = 10.0


class _CountingElection(Election):
    """tenure's ``Election`` with every raw watch callback counted by kind, before the recipe filters it.

    ``watch_deliveries`` counts only the predecessor wake-ups the recipe acts upon; this also counts the
    leader's watch on its own node and any superseded delivery, so nothing hides in the filter.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.raw: Counter[str] = Counter()

    def _watch(self, token: int, kind: str) -> Callable[[WatchedEvent], None]:
        inner = super()._watch(token, kind)

        def deliver(event: WatchedEvent) -> None:
            self.raw[kind] += 1
            inner(event)

        return deliver


def _watchers_by_path(ensemble: Ensemble) -> dict[str, list[int]]:
    """ZooKeeper's own view (4lw ``wchp`` on every server): path → sessions holding a watch on it."""
    out: dict[str, list[int]] = {}
    for server in ensemble:
        reply = four_letter_word("127.0.0.1", server.client_port, "wchp", timeout_s=5.0)
        path: str | None = None
        for line in reply.splitlines():
            if line and not line[0].isspace():
                path = line.strip()
            elif path is not None and re.fullmatch(r"\s*0x[0-9a-fA-F]+\s*", line):
                out.setdefault(path, []).append(int(line.strip(), 16))
    return out


_TRIGGER_METRICS = tuple(f"zk_sum_node_{kind}_watch_count" for kind in ("created", "deleted", "changed", "children"))


def _triggered(ensemble: Ensemble) -> int:
    """Watches ZooKeeper has fired so far, data and child watches alike, summed over the servers (4lw ``mntr``).

    ``wchp``/``wchc`` list data watches only (ZooKeeper 3.9 dumps no child watches; seen here), so they cannot
    see the children-watch baseline; the ``node_*_watch_count`` summaries count every watch a change fired.
    """
    total = 0
    for server in ensemble:
        reply = four_letter_word("127.0.0.1", server.client_port, "mntr", timeout_s=5.0)
        for line in reply.splitlines():
            name, _, value = line.partition("\t")
            if name in _TRIGGER_METRICS:
                total += int(float(value))
    return total


@contextlib.contextmanager
def _clients(ensemble: Ensemble, n: int) -> Iterator[list[KazooClient]]:
    clients: list[KazooClient] = []
    try:
        for _ in range(n):
            client = KazooClient(hosts=ensemble.connect_string, timeout=_SESSION_TIMEOUT_S)
            client.start(timeout=30)
            clients.append(client)
        yield clients
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                client.stop()
                client.close()


def _session(client: KazooClient) -> int:
    return int(client.client_id[0])


@dataclass(frozen=True)
class _Change:
    """What one leader change cost."""

    contenders: int
    woken: int  # contenders other than the departing leader whose watch fired
    client_deliveries: int  # watch callbacks fired on contenders other than the departing leader
    leader_own_deliveries: int  # callbacks on the departing leader itself (its own-node or children watch)
    server_fired: int  # watches ZooKeeper fired during the change (mntr), all sessions, departing leader included
    server_watchers: int | None  # sessions other than the leader's watching the leader's node, per wchp, before
    server_watchers_leader: int | None
    reads_after: int  # re-lists the change triggered (client side)
    new_leader_s: float


def _tenure_change(ensemble: Ensemble, n: int, settle_s: float) -> _Change:
    group = f"herd-tenure-{n}-{time.monotonic_ns()}"
    with _clients(ensemble, n) as clients:
        elections = [_CountingElection(c, group=group, identity=Identity.local(f"c{i}"),
                                       session_timeout_s=_SESSION_TIMEOUT_S) for i, c in enumerate(clients)]
        try:
            for election in elections:
                election.start()

            def settled() -> bool:
                states = Counter(e.state for e in elections)
                return states[LeadershipState.LEADING] == 1 and states[LeadershipState.FOLLOWING] == n - 1

            wait_for(settled, 60 + n, f"{n} tenure contenders to settle")
            leader = next(e for e in elections if e.state is LeadershipState.LEADING)
            assert leader.node is not None
            leader_node, leader_session = leader.node, _session(leader.client)
            wait_for(lambda: len(_watchers_by_path(ensemble).get(leader_node, [])) >= 2, 10,
                  "the successor's and the leader's watches on the leader's node")
            time.sleep(settle_s)
            watchers = _watchers_by_path(ensemble).get(leader_node, [])
            before = {id(e): (sum(e.raw.values()), e.watch_deliveries) for e in elections}
            fired = _triggered(ensemble)
            started = time.monotonic()
            leader.release(timeout_s=10)
            wait_for(lambda: sum(e.state is LeadershipState.LEADING for e in elections) == 1, 30, "a new leader")
            new_leader_s = time.monotonic() - started
            time.sleep(settle_s)  # let any herd arrive
            fired = _triggered(ensemble) - fired
            others = [e for e in elections if e is not leader]
            deltas = [sum(e.raw.values()) - before[id(e)][0] for e in others]
            acted = sum(e.watch_deliveries - before[id(e)][1] for e in others)
            return _Change(
                contenders=n,
                woken=sum(d > 0 for d in deltas),
                client_deliveries=sum(deltas),
                leader_own_deliveries=sum(leader.raw.values()) - before[id(leader)][0],
                server_fired=fired,
                server_watchers=sum(s != leader_session for s in watchers),
                server_watchers_leader=sum(s == leader_session for s in watchers),
                reads_after=acted,
                new_leader_s=new_leader_s,
            )
        finally:
            for election in elections:
                with contextlib.suppress(Exception):
                    election.close(timeout_s=5)


def _children_change(ensemble: Ensemble, n: int, settle_s: float) -> _Change:
    path = f"/herd-children/{n}-{time.monotonic_ns()}"
    with _clients(ensemble, n) as clients:
        contenders = [ChildrenWatchElection(c, path) for c in clients]
        try:
            for contender in contenders:
                contender.start()
            # Every contender's latest list must hold all n nodes: wait for the join-time churn to pass.
            wait_for(lambda: sum(c.leading.is_set() for c in contenders) == 1, 60, "one children-watch leader")
            wait_for(lambda: all(c.seen == n for c in contenders), 30, f"all {n} contenders to list {n} nodes")
            time.sleep(settle_s)
            leader = next(c for c in contenders if c.leading.is_set())
            before = {id(c): c.deliveries for c in contenders}
            fired = _triggered(ensemble)
            started = time.monotonic()
            leader.release()
            wait_for(lambda: sum(c.leading.is_set() for c in contenders) == 1, 30, "a new children-watch leader")
            new_leader_s = time.monotonic() - started
            time.sleep(settle_s)
            fired = _triggered(ensemble) - fired
            others = [c for c in contenders if c is not leader]
            deltas = [c.deliveries - before[id(c)] for c in others]
            return _Change(
                contenders=n,
                woken=sum(d > 0 for d in deltas),
                client_deliveries=sum(deltas),
                leader_own_deliveries=leader.deliveries - before[id(leader)],
                server_fired=fired,
                server_watchers=None,  # child watches are invisible to wchp
                server_watchers_leader=None,
                reads_after=sum(deltas),  # each delivery re-lists the children
                new_leader_s=new_leader_s,
            )
        finally:
            for contender in contenders:
                with contextlib.suppress(Exception):
                    contender.release()


def run_herd(ctx: BenchContext) -> Result:
    """Count watch deliveries for one graceful leader change at each N, tenure and baseline alternating."""
    sizes = [5, 10] if ctx.quick else [10, 50, 200]
    settle_s = 0.3 if ctx.quick else 1.0
    result = Result(
        name="herd",
        title="Herd: watch deliveries per leader change",
        command="python -m bench.run --only herd",
        params={"contenders": sizes, "session_timeout_s": _SESSION_TIMEOUT_S, "zk_servers": 3,
                "clients": "one KazooClient (own session) per contender, all in the bench process",
                "settle_s": settle_s},
    )
    rows: list[dict[str, Any]] = []
    worst_tenure = 0
    with running_ensemble(ctx.work / "zk", max_client_cnxns=0, timeout_s=ENSEMBLE_START_S,
                          attempts=ENSEMBLE_ATTEMPTS) as ensemble:
        for index, n in enumerate(sizes):
            # Alternate which recipe goes first, so neither always meets a freshly started ensemble.
            order: list[tuple[str, Callable[[Ensemble, int, float], _Change]]] = [
                ("tenure", _tenure_change), ("children-watch", _children_change)]
            if index % 2:
                order.reverse()
            for recipe, measure in order:
                change = measure(ensemble, n, settle_s)
                if recipe == "tenure":
                    worst_tenure = max(worst_tenure, change.client_deliveries,
                                       change.server_fired - change.leader_own_deliveries)
                rows.append({"recipe": recipe, "N": n, "woken": change.woken,
                             "deliveries (client)": change.client_deliveries,
                             "fired (mntr) − leader's own": change.server_fired - change.leader_own_deliveries,
                             "watchers (wchp, others)": change.server_watchers,
                             "re-lists": change.reads_after,
                             "leader's own": change.leader_own_deliveries,
                             "fired (mntr, all)": change.server_fired,
                             "wchp, leader's session": change.server_watchers_leader,
                             "new leader ms": round(change.new_leader_s * 1000, 1)})
    rows.sort(key=lambda r: (r["N"], r["recipe"] != "tenure"))
    result.table = rows
    result.figures = {"changes": rows}
    result.targets.append(Target("tenure deliveries per leader change, worst N", float(worst_tenure),
                                 "1 at every N", worst_tenure == 1))
    result.notes += [
        "`deliveries (client)`: watch callbacks fired on contenders other than the departing leader (counted "
        "by wrapping each recipe's watch callback). Server side, two cross-checks: `fired (mntr, all)` is the rise "
        "of ZooKeeper's own `zk_sum_node_{created,deleted,changed,children}_watch_count` over the change, summed "
        "over the 3 servers (every watch fired, the departing leader's own included; `− leader's own` subtracts "
        "what reached the leader); `watchers (wchp, others)`: sessions other than the leader's that 4lw `wchp` "
        "listed as watching the leader's node just before the change. `wchp`/`wchc` list data watches only "
        "(ZooKeeper 3.9 dumps no child watches; checked here), hence `—` for the children-watch baseline.",
        "`leader's own`: tenure's leader watches its own node (to notice deletion); that delivery goes to the "
        "departing leader itself and wakes nobody else. The children-watch leader watches the list too.",
        "`re-lists`: ZooKeeper reads the change caused (tenure: predecessor wake-ups acted upon, one "
        "`get_children` each; children watch: every woken contender re-lists N names).",
    ]
    return result
