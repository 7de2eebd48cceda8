"""Crash failover at the election level: SIGKILL the leader, time until its successor is elected, at the
embedded ensemble's default tickTime and at the old 2000 ms, side by side in one run.

Each block is its own topology (``tenure.service.local.Topology``): an embedded 3-server ensemble at one tick and 3
replicas of ``tenure run --career counter`` with a 4 s session timeout; no Spark. Per kill:

1. Wait until all 3 replicas are in the election (3 nodes, 3 replica ids, a leader), then a short settle.
2. Arm an ``exists`` watch on the leader's election node and find which server holds its session (``cons``).
3. SIGKILL the leader's process, stamping the time just before the signal.
4. Wait for the node's deletion (ZooKeeper expired the session) and for a survivor's ``elected`` log event.
5. Restart the killed replica under the same id.

Blocks alternate (default tick, old tick, default tick, …) so that other work on the machine weighs on both.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, WatchedEvent

from bench._common import BenchContext, Result, Target, percentiles
from tenure.election import ELECTED, GroupPaths, GroupStatus, four_letter_word, group_status
from tenure.service.drill import read_events
from tenure.service.local import Ensemble, EnsembleError, Topology, wait_for
from tenure.service.replica import ReplicaSpec

__all__ = ["run_election_failover"]

_SESSION_TIMEOUT_S = 4.0
_HANDOVER_TIMEOUT_S = 2.0
_OLD_TICK_MS = 2000  # the embedded ensemble's tickTime before issue 18 (`tenure zk`; `tenure up` had 1000)
_SLACK_S = 0.5  # target: kill → new leader within the session timeout plus this
_GROUP = "bench-failover"
_REPLICAS = 3
_START_TIMEOUT_S = 180.0  # a loaded 2-core machine has taken over a minute to start an ensemble
_LINE_TIMEOUT_S = 120.0  # a restarted replica back in the election
_ELECTED_TIMEOUT_S = 60.0  # far above any expiry: only a broken run waits this long
# After the line is whole again: lets the restarted replica finish starting (its CPU would otherwise compete
# with the failover measured next) and puts the kill at a random phase of the ticks and heartbeats.
_SETTLE_S = 1.0
_PLOT = "election_failover.png"



class _Deleted:
    """A one-shot ``exists`` watch that stamps when a node is deleted (kazoo's event thread only records)."""

    def __init__(self) -> None:
        self.at: float | None = None
        self._event = threading.Event()

    def __call__(self, event: WatchedEvent) -> None:
        if event.type == EventType.DELETED:
            self.at = time.time()
        self._event.set()

    def wait(self, timeout_s: float) -> float | None:
        self._event.wait(timeout_s)
        return self.at


def _whole_line(client: KazooClient) -> GroupStatus | None:
    """The group's status once every replica has one node in the election (else None)."""
    status = group_status(client, _GROUP)
    ids = {c.identity.replica_id for c in status.contenders if c.identity is not None}
    return status if len(status.contenders) == _REPLICAS and len(ids) == _REPLICAS else None


def _session_server(ensemble: Ensemble, session_id: int) -> str:
    """``leader`` or ``follower``: the role of the server the session is connected to (``?`` if none lists it).

    On a follower, the session's heartbeats reach the ZooKeeper leader (which expires sessions) only with the
    leader's pings, twice a tick, so such a session can end up to half a tick later.
    """
    sid = re.compile(rf"sid=0x{session_id:x}\b")
    for server in ensemble:
        try:
            if sid.search(four_letter_word(server.host, server.client_port, "cons")):
                return server.mode() or "?"
        except OSError:
            continue
    return "?"


def _elected_after(topology: Topology, replica_ids: list[str], since: float) -> tuple[str, float, int] | None:
    """The first ``elected`` event logged after ``since`` by one of ``replica_ids``: (replica, time, epoch)."""
    found = [(e.replica_id, e.at, int(e.fields.get("epoch", 0)))
             for rid in replica_ids for e in read_events(topology.logs / f"{rid}.log", rid)
             if e.event == ELECTED and e.at >= since]
    return min(found, key=lambda f: f[1]) if found else None


def _kill_leader(topology: Topology, client: KazooClient, tick_ms: int) -> dict[str, Any]:
    """Steps 2–5 for the current leader (the line is whole); one row of figures."""
    status = wait_for(lambda: _whole_line(client), _LINE_TIMEOUT_S, "3 replicas in the election")
    assert status.leader is not None and status.leader.identity is not None, "a whole line has a leader"
    leader, node = status.leader.identity.replica_id, status.leader.node
    session_on = _session_server(topology.ensemble, status.leader.session_id)
    deleted = _Deleted()
    if client.exists(GroupPaths(_GROUP).node(node), watch=deleted) is None:
        raise RuntimeError(f"the leader's node {node} vanished before the kill")
    survivors = [r.replica_id for r in topology if r.replica_id != leader]
    load_1m = os.getloadavg()[0]
    killed_at = time.time()
    topology.replica(leader).signal(signal.SIGKILL)
    topology.replica(leader).kill()  # reaps it (the signal is already sent)
    expired_at = deleted.wait(_ELECTED_TIMEOUT_S)
    to, elected_at, epoch = wait_for(lambda: _elected_after(topology, survivors, killed_at), _ELECTED_TIMEOUT_S,
                                  f"a successor of {leader} to log `elected`")
    topology.restart(leader)
    return {
        "tick_ms": tick_ms, "from": leader, "to": to, "epoch": epoch, "session_on": session_on,
        "kill_to_elected_s": round(elected_at - killed_at, 3),
        "kill_to_expiry_s": None if expired_at is None else round(expired_at - killed_at, 3),
        "expiry_to_elected_s": None if expired_at is None else round(elected_at - expired_at, 3),
        "load_1m": round(load_1m, 2),
    }


def _start(directory: Path, tick_ms: int) -> Topology:
    """A started topology at ``tick_ms``; a port taken between the probe and the launch gets a new range."""
    for attempt in range(1, 6):
        spec = ReplicaSpec(group=_GROUP, career="counter", session_timeout_s=_SESSION_TIMEOUT_S,
                           handover_timeout_s=_HANDOVER_TIMEOUT_S)
        topology = Topology(directory, replicas=_REPLICAS, spec=spec, zk_tick_ms=tick_ms)
        try:
            topology.make_dirs()
            topology.ensemble.start(timeout_s=_START_TIMEOUT_S)
            for replica in topology:
                replica.start()
            return topology
        except BaseException as exc:
            topology.stop()
            if not isinstance(exc, EnsembleError) or "already in use" not in str(exc) or attempt == 5:
                raise
    raise AssertionError("unreachable: the last attempt raises")


def _run_block(directory: Path, tick_ms: int, kills: int, rows: list[dict[str, Any]], block: int,
               deadline: float | None) -> None:
    """Start a topology at ``tick_ms``, kill its leader ``kills`` times (rows appended as they come), stop it."""
    topology = _start(directory, tick_ms)
    client = KazooClient(hosts=topology.ensemble.connect_string, timeout=10.0)
    try:
        client.start(timeout=60)
        for index in range(kills):
            if deadline is not None and time.monotonic() > deadline:
                break
            wait_for(lambda: _whole_line(client), _START_TIMEOUT_S if index == 0 else _LINE_TIMEOUT_S,
                  "3 replicas in the election")
            time.sleep(_SETTLE_S)  # not a poll: see _SETTLE_S
            rows.append({"block": block, "kill": index + 1, **_kill_leader(topology, client, tick_ms)})
            print(f"bench: election_failover tick {tick_ms} ms, block {block}, kill {index + 1}/{kills}: "
                  f"{rows[-1]}", file=sys.stderr, flush=True)
    finally:
        client.stop()
        client.close()
        topology.stop()


def _stats(values: list[float]) -> dict[str, Any]:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in percentiles(values).items()}


def run_election_failover(ctx: BenchContext) -> Result:
    """``kills`` SIGKILLs of the leader at each tick (the default and the old 2000 ms), in alternating blocks."""
    kills = 2 if ctx.quick else 10
    blocks = 1 if ctx.quick else 2  # per tick; each block a fresh topology
    ticks = (Ensemble.DEFAULT_TICK_MS, _OLD_TICK_MS)
    target_s = _SESSION_TIMEOUT_S + _SLACK_S
    result = Result(
        name="election_failover", title="Crash failover at the election: SIGKILL → successor elected, by tickTime",
        command="python -m bench.run --only election_failover",
        params={"kills_per_tick": kills, "blocks_per_tick": blocks, "ticks_ms": list(ticks),
                "replicas": _REPLICAS, "career": "counter", "zk_servers": 3,
                "session_timeout_s": _SESSION_TIMEOUT_S, "settle_s": _SETTLE_S},
    )
    deadline = time.monotonic() + ctx.budget_s if ctx.budget_s else None
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    for block in range(1, blocks + 1):
        for tick_ms in ticks:
            if deadline is not None and time.monotonic() > deadline:
                break
            try:
                _run_block(ctx.work / f"tick-{tick_ms}-{block}", tick_ms, kills // blocks, rows, block, deadline)
            except Exception as exc:
                done = sum(r["tick_ms"] == tick_ms and r["block"] == block for r in rows)
                errors.append(f"tick {tick_ms} ms block {block}: {type(exc).__name__}: {exc} (after {done} kills)")
    if errors:
        result.error = "; ".join(errors)
    result.figures["kills"] = rows
    by_tick: dict[str, Any] = {}
    for tick_ms in ticks:
        mine = [r for r in rows if r["tick_ms"] == tick_ms]
        elected = [r["kill_to_elected_s"] for r in mine]
        expiry = [r["kill_to_expiry_s"] for r in mine if r["kill_to_expiry_s"] is not None]
        after = [r["expiry_to_elected_s"] for r in mine if r["expiry_to_elected_s"] is not None]
        by_tick[str(tick_ms)] = {"kill_to_elected_s": _stats(elected), "kill_to_expiry_s": _stats(expiry),
                                 "expiry_to_elected_s": _stats(after)}
        s = by_tick[str(tick_ms)]
        result.table.append({
            "tickTime ms": tick_ms, "kills": len(mine),
            "kill→elected p50 s": s["kill_to_elected_s"]["p50"], "p90 s": s["kill_to_elected_s"]["p90"],
            "max s": s["kill_to_elected_s"]["max"],
            "max over timeout s": None if not elected else round(max(elected) - _SESSION_TIMEOUT_S, 3),
            "kill→expiry p50 s": s["kill_to_expiry_s"]["p50"], "kill→expiry max s": s["kill_to_expiry_s"]["max"],
            "expiry→elected max s": s["expiry_to_elected_s"]["max"],
            "load 1m (mean)": round(sum(r["load_1m"] for r in mine) / len(mine), 2) if mine else None,
        })
    result.figures["by_tick"] = by_tick
    worst = by_tick[str(Ensemble.DEFAULT_TICK_MS)]["kill_to_elected_s"]["max"]
    result.targets.append(Target(f"worst kill → new leader, tickTime {Ensemble.DEFAULT_TICK_MS} ms (s)", worst,
                                 f"≤ {target_s:g} s (session timeout {_SESSION_TIMEOUT_S:g} s + {_SLACK_S:g} s)",
                                 None if worst is None else worst <= target_s))
    plot = ctx.out / _PLOT
    if rows:
        _plot(rows, ticks, plot)
        result.figures["plot"] = _PLOT
        result.plots.append(_PLOT)
    short = {t: n for t in ticks if (n := sum(r["tick_ms"] == t for r in rows)) < kills}
    if short and not errors:
        result.notes.append(f"Fewer kills than asked ({kills} per tick) within the time budget: {short}.")
    result.notes += [
        f"Plot: `{_PLOT}` (in the output folder): kill → new leader per kill, both ticks, with lines at the "
        f"session timeout and at the timeout + {_SLACK_S:g} s.",
        "New leader = the successor's own `elected` log event (JSON, its wall-clock timestamp, the moment its "
        "election found its node lowest and owned by its session), minus the bench's wall clock just before "
        "the SIGKILL: exact, on one machine's clock. Expiry = when the bench's `exists` watch on the dead "
        "leader's election node saw it deleted (ZooKeeper closed the session): the bench's own watch delivery, "
        "so expiry → elected only shows that the successor reacts within milliseconds (it can even be "
        "slightly negative).",
        f"Each block: a fresh embedded 3-server ensemble at that tickTime and {_REPLICAS} `tenure run --career "
        f"counter` replicas, session timeout {_SESSION_TIMEOUT_S:g} s; before each kill all {_REPLICAS} are in "
        f"the election, then {_SETTLE_S:g} s of settle; the killed replica is restarted after the successor is "
        "elected. Blocks alternate between the ticks. The baseline runs today's `Ensemble` at tickTime 2000 ms: "
        "as before issue 18 at that tick (initLimit 10, syncLimit 5; a 4 s session is granted at both ticks).",
        "`session_on` says which ZooKeeper server held the dead leader's session: on a follower its heartbeats "
        "reach the ZooKeeper leader (which expires sessions) only with the leader's pings, twice a tick, so it "
        "can end up to 1.5 ticks after the timeout; on the leader, up to 1 tick.",
    ]
    return result


def _plot(rows: list[dict[str, Any]], ticks: tuple[int, ...], path: Path) -> None:
    """kill → new leader per kill, one series per tick, with the session timeout and the target as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for tick_ms, colour in zip(ticks, ("#2e7d32", "#c62828"), strict=True):
        mine = [r for r in rows if r["tick_ms"] == tick_ms]
        ax.scatter(range(1, len(mine) + 1), [r["kill_to_elected_s"] for r in mine], color=colour, s=30,
                   label=f"tickTime {tick_ms} ms", zorder=3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.axhline(_SESSION_TIMEOUT_S, color="black", linestyle=":", label=f"session timeout {_SESSION_TIMEOUT_S:g} s")
    ax.axhline(_SESSION_TIMEOUT_S + _SLACK_S, color="black", linestyle="--",
               label=f"timeout + {_SLACK_S:g} s (target)")
    ax.set_xlabel("kill (in order, per tick)", fontsize=8)
    ax.set_ylabel("SIGKILL → successor elected (s)")
    loads = [r["load_1m"] for r in rows]
    ax.set_title(f"Crash failover by ZooKeeper tickTime — 3 counter replicas, 3 servers; load 1 min "
                 f"{min(loads):.1f}–{max(loads):.1f}", fontsize=9, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
