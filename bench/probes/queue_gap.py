"""A moved queue's gap in a topic of 4 queues on 3 replicas, against one queue's on 3 replicas, side by side.

`.venv/bin/python -m bench.probes.queue_gap [--rounds R] [--moves M] [--rate RATE]` (from the repository root)
starts two topologies at once, each of 3 warm Spark replicas on a one-server ensemble with a producer of RATE
records/s (default 200 for each queue): ``1q`` (a group of one queue: today's handover) and ``4q`` (a group of 4
queues, balanced 2, 1, 1). Each round makes, alternating between the two, M graceful moves each (default 3):
``tenure handover --queue K --to R`` of queue 0 to another replica in ``1q``, and in ``4q`` of a queue of the
replica leading two to one leading one (the group stays balanced); then one crash each: SIGKILL of queue 0's leader
in ``1q``, of the replica leading two queues in ``4q`` (both its queues move). The killed replicas restart together
and, in ``4q``, the balance moves a queue back to the restarted one: those moves are timed too (``balance``). The
next round waits until both groups are balanced and every queue has made three commits under its leader.

A queue's gap is from the last commit of its old leader to the first of the new, both from the queue's commit
record in ZooKeeper (the committer's ``committed_at``), polled every 50 ms. Writes ``<name>.json``, ``<name>.md`` and
``<name>.png`` (``--name``, default ``gap``) to ``bench/results/issue-51-scaling/``, which
``docs/performance/scaling.md`` quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from bench._cluster import producer_args
from bench._common import markdown_table, percentiles
from bench._group import GROUP, QueueTimeline, balanced, group_topology
from bench._plots import pyplot, save
from bench.probes import results_folder, run_header
from tenure.election import connected
from tenure.service.local import wait_for
from tenure.service.ops import request_handover
from tenure.service.replica import ReplicaSpec

_OUT = results_folder("issue-51-scaling")
_START_TIMEOUT_S = 900.0
_MOVE_TIMEOUT_S = 120.0
_STEADY_COMMITS = 3


class _Group:
    """One of the two topologies, its queue count and its commit timeline."""

    def __init__(self, label: str, directory: Path, queues: int, career: str) -> None:
        self.label = label
        self.queues = queues
        self.topology = group_topology(directory, queues=queues, replicas=3, spec=ReplicaSpec(career=career))
        self.timeline: QueueTimeline | None = None

    def steady(self) -> dict[str, tuple[int, ...]]:
        """Wait until the group is balanced and every queue has made ``_STEADY_COMMITS`` commits under its leader;
        who leads what."""
        led: dict[str, tuple[int, ...]] = {}
        assert self.timeline is not None
        timeline = self.timeline

        def ok() -> bool:
            led.clear()
            led.update(balanced(self.topology, self.queues) or {})
            if not led:
                return False
            latest = [timeline.latest(q) for q in range(self.queues)]
            return all(c is not None and sum(x.epoch == c.epoch for x in timeline.of(q)) >= _STEADY_COMMITS
                       for q, c in enumerate(latest))

        wait_for(ok, _START_TIMEOUT_S, f"{self.label}: balanced and steady", interval_s=0.5)
        return dict(led)

    def epoch(self, queue: int) -> int:
        assert self.timeline is not None
        latest = self.timeline.latest(queue)
        assert latest is not None
        return latest.epoch

    def gap(self, kind: str, queue: int, old_epoch: int, started_at: float, **extra: Any) -> dict[str, Any]:
        assert self.timeline is not None
        first, gap = self.timeline.gap(queue, old_epoch, _MOVE_TIMEOUT_S)
        return {"group": self.label, "kind": kind, "queue": queue, "to": first.replica_id, "gap_s": round(gap, 3),
                "action_to_first_commit_s": round(first.committed_at - started_at, 3), **extra}


def _graceful(group: _Group) -> dict[str, Any]:
    """Hand a queue over with ``tenure handover --queue K --to R`` (in ``4q``: from the replica leading two to one
    leading one)."""
    led = group.steady()
    source = max(led, key=lambda r: (len(led[r]), r))
    queue = led[source][0]
    target = min((r for r in led if r != source), key=lambda r: (len(led[r]), r))
    old = group.epoch(queue)
    started = time.time()
    with connected(group.topology.ensemble.connect_string) as client:
        request_handover(client, GROUP, to=target, queue=queue, queues=group.queues)
    row = group.gap("graceful", queue, old, started, **{"from": source})
    if row["to"] and row["to"] != target:  # the counter's records name no replica
        row["note"] = f"asked for {target}"
    return row


def _crash(group: _Group) -> tuple[str, list[dict[str, Any]]]:
    """SIGKILL the replica leading the most queues (queue 0's in ``1q``); the gap of each queue it led."""
    led = group.steady()
    victim = max(led, key=lambda r: (len(led[r]), r))
    old = {q: group.epoch(q) for q in led[victim]}
    replica = group.topology.replica(victim)
    started = time.time()
    replica.signal(signal.SIGKILL)
    if replica.process is not None:
        replica.process.wait(30)
    rows: list[dict[str, Any]] = []

    def moved(queue: int) -> None:
        rows.append(group.gap("crash", queue, old[queue], started, **{"from": victim}))

    threads = [threading.Thread(target=moved, args=(q,)) for q in old]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if len(rows) != len(old):
        raise RuntimeError(f"{group.label}: not every queue of {victim} moved within {_MOVE_TIMEOUT_S:g} s")
    return victim, rows


def _balance_moves(group: _Group, since: dict[int, int], restarted: str) -> list[dict[str, Any]]:
    """After a restart: the moves the balance made (each queue whose epoch changed since ``since`` to the restarted
    replica), once the group is steady again."""
    group.steady()
    assert group.timeline is not None
    rows = []
    for queue, old in since.items():
        later = [c for c in group.timeline.of(queue) if c.epoch > old]
        if later and later[0].replica_id == restarted:
            last_old = max(c.committed_at for c in group.timeline.of(queue) if c.epoch == old)
            rows.append({"group": group.label, "kind": "balance", "queue": queue, "to": restarted,
                         "gap_s": round(later[0].committed_at - last_old, 3)})
    return rows


def render(body: dict[str, Any], name: str = "gap") -> None:
    """``<name>.md`` and ``<name>.png`` from ``<name>.json``'s ``body``."""
    moves = body["moves"]
    summary: list[dict[str, Any]] = []
    for kind in ("graceful", "crash", "balance"):
        for label in ("1q", "4q"):
            gaps = [m["gap_s"] for m in moves if m["kind"] == kind and m["group"] == label]
            if gaps:
                p = percentiles(gaps)
                summary.append({"move": kind, "group": label, "n": p["n"], "gap p50 s": p["p50"],
                                "gap p90 s": p["p90"], "gap max s": p["max"]})
    for kind in ("graceful", "crash"):
        p50: dict[str, float] = {r["group"]: r["gap p50 s"] for r in summary if r["move"] == kind}
        if p50.get("1q") and p50.get("4q"):
            body.setdefault("ratios", {})[f"{kind} p50 4q / 1q"] = round(p50["4q"] / p50["1q"], 3)
    lines = ["# A moved queue's gap: 4 queues on 3 replicas against 1 queue on 3 (`python -m bench.probes.queue_gap`)",
             "", f"`{body['command']}`; the {body.get('career', 'spark')} career; {body['rate']:g} records/s per "
             "queue; load average (1 min) before: "
             f"{body['load_before']}, after: {body.get('load_after')}; {body['machine']['cores']} cores.", "",
             markdown_table(summary), "", f"Ratios of the p50s: {body.get('ratios')}", "", "Every move:", "",
             markdown_table([{k: v for k, v in m.items() if m["to"] or k not in ("to", "note")} for m in moves]), ""]
    (_OUT / f"{name}.md").write_text("\n".join(lines))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = []
    for index, row in enumerate(summary):
        gaps = [m["gap_s"] for m in moves if m["kind"] == row["move"] and m["group"] == row["group"]]
        ax.scatter([index] * len(gaps), gaps, color="#4c9a6a" if row["group"] == "4q" else "#888888", s=16)
        ax.hlines(row["gap p50 s"], index - 0.3, index + 0.3, color="black")
        labels.append(f"{row['move']}\n{row['group']}")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("gap s (last commit of the old leader → first of the new)")
    ax.set_title("A moved queue's gap: 4 queues on 3 replicas (green) vs 1 queue (grey); bar: p50")
    save(fig, _OUT / f"{name}.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.queue_gap", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--moves", type=int, default=3, help="graceful moves per group per round")
    parser.add_argument("--rate", type=float, default=200.0, help="records/s per queue")
    parser.add_argument("--career", default="spark", choices=("spark", "counter"),
                        help="counter: the election, fence, handover and balance without Spark (no query to stop or "
                             "start: the coordination's part of a gap)")
    parser.add_argument("--render", action="store_true", help="write NAME.md and NAME.png from NAME.json")
    parser.add_argument("--name", default="gap", help="the results' file names (default gap)")
    args = parser.parse_args(argv)
    if args.render:
        render(json.loads((_OUT / f"{args.name}.json").read_text()), args.name)
        return
    body: dict[str, Any] = {**run_header("queue_gap", argv), "career": args.career, "rate": args.rate, "moves": []}

    def keep(rows: list[dict[str, Any]], round_: int) -> None:
        for row in rows:
            body["moves"].append({"round": round_, **row})
            print(f"queue_gap: {row}", file=sys.stderr, flush=True)
        body["load_after"] = [round(x, 2) for x in os.getloadavg()]
        (_OUT / f"{args.name}.json").write_text(json.dumps(body, indent=2) + "\n")

    with TemporaryDirectory(prefix="tenure-gap-") as scratch, ExitStack() as stack:
        groups = [_Group(label, Path(scratch) / label, queues, args.career) for label, queues in (("1q", 1), ("4q", 4))]
        for group in groups:
            stack.callback(group.topology.stop)
            group.topology.start()
        for group in groups:
            group.timeline = stack.enter_context(QueueTimeline(group.topology.ensemble.connect_string, group.queues))
            group.topology.start_producer([*producer_args(args.rate * group.queues), "--queues", str(group.queues)])
        for group in groups:
            group.steady()
        for index in range(args.rounds):
            for _ in range(args.moves):
                for group in groups:
                    keep([_graceful(group)], index + 1)
            restarts: list[tuple[_Group, str, dict[int, int]]] = []
            for group in groups:
                victim, rows = _crash(group)
                keep(rows, index + 1)
                restarts.append((group, victim, {q: group.epoch(q) for q in range(group.queues)}))
            for group, victim, _since in restarts:
                group.topology.restart(victim)
            for group, victim, since in restarts:
                keep(_balance_moves(group, since, victim) if group.queues > 1 else [], index + 1)
    render(body, args.name)
    (_OUT / f"{args.name}.json").write_text(json.dumps(body, indent=2) + "\n")


if __name__ == "__main__":
    main()
