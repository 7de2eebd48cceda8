"""`tenure demo`: the README's main job — a topic of four queues (in a folder, or on an embedded Redis) on three
replicas and a producer, the replica leading the most queues killed midway, who led which queues before and after and
how long each moved queue went without a commit, then an audit."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from tenure.career.output import TABLE, snapshot_rows
from tenure.career.queue import QueueLayout, is_queue_file
from tenure.election import ZooKeeperClient, connected, read_commit, read_contenders, read_history
from tenure.service.local._topology import Topology
from tenure.service.ops import GroupCommits, VerifyReport, verify
from tenure.service.replica import ReplicaSpec

__all__ = ["DEMO_QUEUES", "Move", "format_leads", "format_moves", "run_demo"]

_MAX_LINE_BYTES = 64 * 1024
#: The demo's topic: four queues on three replicas, so that one replica leads more than one.
DEMO_QUEUES = 4


def _say(console: Console, text: str) -> None:
    console.print(f"[bold cyan]demo[/] {time.strftime('%H:%M:%S')} {text}")


def _waiting_files(data_root: Path, queues: int) -> int:
    """Queue files still in each queue's ``landing/``: a file is archived only once its batch is published and
    checkpointed."""
    return sum(1 for layout in QueueLayout.each(data_root, queues) for entry in os.scandir(layout.landing)
               if is_queue_file(entry.name))


def _written(data_root: Path) -> int:
    """Rows a Delta reader of ``table/`` sees so far (whole batches only)."""
    return snapshot_rows(data_root / TABLE)


@dataclass(frozen=True)
class Move:
    """A queue the killed replica led: who leads it after, how long before the SIGKILL the killed term last committed
    and how long after it the successor first committed (None where unknown: a term that never committed)."""

    queue: int
    leader: str | None
    last_before_s: float | None
    first_after_s: float | None

    @property
    def without_commit_s(self) -> float | None:
        """How long the queue went without a commit: from the killed term's last commit to its successor's first."""
        if self.last_before_s is None or self.first_after_s is None:
            return None
        return self.last_before_s + self.first_after_s


def _audit_redis(topology: Topology) -> VerifyReport:
    """The audit of a Redis topic, while Redis (its streams) and ZooKeeper (the commit records, with their trim
    points) still run: drained, with the producer done, no batch adds anything meanwhile."""
    with connected(topology.ensemble.connect_string, read_only=True) as client:
        return verify(topology.data_root, max_line_bytes=_MAX_LINE_BYTES, group=topology.group,
                      queue_url=str(topology.spec.value("queue_url")),
                      commit_records=GroupCommits(client, topology.group))


def format_leads(leaders: Mapping[int, str | None]) -> str:
    """Who leads which queues, in one line: ``replica-1 leads 0, 2; replica-2 leads 1, 3`` (and the queues without a
    leader)."""
    by_replica: dict[str, list[int]] = {}
    for queue, leader in sorted(leaders.items()):
        by_replica.setdefault(leader or "", []).append(queue)
    parts = [f"{name} leads {', '.join(map(str, queues))}" for name, queues in sorted(by_replica.items()) if name]
    if "" in by_replica:
        parts.append(f"no leader for {', '.join(map(str, by_replica['']))}")
    return "; ".join(parts)


def format_moves(killed: str, moves: list[Move]) -> list[str]:
    """One line per queue the killed replica led: its new leader and its time without a commit, split at the kill;
    a last line with the longest."""
    lines = []
    for move in moves:
        after = "unknown" if move.first_after_s is None else f"{move.first_after_s:.1f} s"
        if move.without_commit_s is None or move.last_before_s is None:
            gap = f"no commit of {killed}'s before the SIGKILL, the new leader's first {after} after"
        else:
            gap = (f"{move.without_commit_s:.1f} s without a commit ({killed}'s last {move.last_before_s:.1f} s "
                   f"before the SIGKILL, the new leader's first {after} after)")
        lines.append(f"queue {move.queue}: {killed} → {move.leader or 'no leader'}, {gap}")
    known = [m.without_commit_s for m in moves if m.without_commit_s is not None]
    if known:
        lines.append(f"{len(moves)} queue{'s' if len(moves) != 1 else ''} moved; the longest went "
                     f"{max(known):.1f} s without a commit (after the SIGKILL: the session timeout, the successor's "
                     "inauguration and its first batch)")
    return lines


def _leaders(client: ZooKeeperClient, group: str, queues: int) -> dict[int, str | None]:
    """Each queue's leader as ZooKeeper says: the first in its line (the killed replica's node until its session
    expires)."""
    found: dict[int, str | None] = {}
    for queue in range(queues):
        line = read_contenders(client, group, queue=queue, queues=queues)
        found[queue] = line[0].identity.replica_id if line and line[0].identity else None
    return found


def _last_commits(client: ZooKeeperClient, group: str, queues: list[int], count: int) -> dict[int, tuple[int, float]]:
    """Each of ``queues``' commit record's (epoch, committed_at), for those that have one."""
    found: dict[int, tuple[int, float]] = {}
    for queue in queues:
        record, _version = read_commit(client, group, queue=queue, queues=count)
        if record is not None and "committed_at" in record:
            found[queue] = (int(record["epoch"]), float(record["committed_at"]))
    return found


def _first_commit_after(client: ZooKeeperClient, group: str, queue: int, count: int, epoch: int) -> float | None:
    """When the first term of ``queue`` after ``epoch`` committed first; None before it has."""
    return next((t.first_commit_at for t in read_history(client, group, queue=queue, queues=count)
                 if t.epoch > epoch and t.first_commit_at is not None), None)


class _DrainProgress:
    """The wait for the queue to drain, told as progress (written of expected, files or entries waiting) every few
    seconds, not as audits that fail until the end: the one audit runs once the replicas are done."""

    def __init__(self, console: Console, topology: Topology, queues: int, expected: int,
                 every_s: float = 5.0) -> None:
        self._console, self._topology, self._expected, self._every_s = console, topology, expected, every_s
        self._queues = queues
        self._next = 0.0

    def _waiting(self) -> tuple[int, str, str]:
        """What waits to be read: queue files in ``landing/``, or a Redis topic's entries after the committed
        positions (the leaders' backlog gauges, asked each second; the rows written tell a gauge not yet set)."""
        if self._topology.redis is None:
            return _waiting_files(self._topology.data_root, self._queues), "queue file", "queue files"
        entries = sum(s.backlog for s in self._topology.statuses())
        return entries + (_written(self._topology.data_root) < self._expected), "stream entry", "stream entries"

    def __call__(self) -> bool:
        waiting, one, many = self._waiting()
        now = time.monotonic()
        if waiting == 0 or now >= self._next:
            self._next = now + self._every_s
            _say(self._console, f"written {_written(self._topology.data_root)} of {self._expected} records, "
                                f"{waiting} {one if waiting == 1 else many} waiting")
        return waiting == 0


def run_demo(directory: Path, *, records: int = 20000, rate: float = 2000.0, keys: int = 50,
             career: str = "spark", settle_timeout_s: float = 240.0, warmup_timeout_s: float = 600.0,
             spark_workers: int = 0, redis: bool = False) -> int:
    """Run the scripted demonstration; returns 0 when the audit finds every message exactly once, in order. With
    ``spark_workers``, the leaders' queries run on an embedded Spark cluster of that many workers. With ``redis``,
    the topic is on an embedded Redis (as ``tenure up --redis``): audited once the queues drained, with the group's
    commit records (their trim points), before Redis and ZooKeeper stop."""
    console = Console(soft_wrap=True)  # long lines stay whole in logs and pipes
    if directory.exists():
        shutil.rmtree(directory)
    n = DEMO_QUEUES
    # Injected oversized lines are max_line_bytes + 1 long: a 64 KiB limit keeps the demo's queue small.
    topology = Topology(directory, replicas=3, spark_workers=spark_workers, redis=redis,
                        spec=ReplicaSpec(career=career, max_line_bytes=_MAX_LINE_BYTES, queues=n))
    session_timeout_s = topology.spec.value("session_timeout_s")
    group = topology.group
    try:
        cluster = f", a Spark cluster of {spark_workers} workers" if spark_workers else ""
        topic = f"{n} queues"
        where = " on an embedded Redis" if redis else ""
        _say(console, f"starting a 3-server ZooKeeper ensemble{cluster} and 3 {career} replicas on a topic of {topic}"
                      f"{where} under {directory}")
        topology.start()
        with connected(topology.ensemble.connect_string, read_only=True) as client:
            leaders: dict[int, str | None] = {}

            def every_queue_led() -> bool:
                leaders.update(_leaders(client, group, n))
                return None not in leaders.values()

            topology.wait_for(every_queue_led, warmup_timeout_s, "a leader for every queue", interval_s=0.5)
            _say(console, f"{format_leads(leaders)}; each queue's other replicas follow, warm")
            into = f"{n} queues (each key's queue by its hash)" if n > 1 else "the queue"
            _say(console, f"producing {records} records over {keys} keys at {rate:g}/s into {into}, with 5% repeats "
                          "and 1% bad lines")
            producer = topology.start_producer(["--records", str(records), "--keys", str(keys), "--rate", f"{rate:g}",
                                                "--duplicates", "0.05", "--bad", "0.01", "--seed", "7",
                                                "--queues", str(n), "--max-line-bytes", str(_MAX_LINE_BYTES)])
            topology.wait_for(lambda: sum(s.records for s in topology.statuses()) >= records // 3, 180,
                              "the leaders to write a third of the records", interval_s=0.5)
            before = _leaders(client, group, n)
            name = max(sorted({r for r in before.values() if r}), key=lambda r: list(before.values()).count(r))
            moved = sorted(q for q, r in before.items() if r == name)
            victim = topology.replica(name)
            _say(console, f"[red]SIGKILL[/] {name} (pid {victim.pid}), leader of queue{'s' if len(moved) > 1 else ''} "
                          f"{', '.join(map(str, moved))}, after {sum(s.records for s in topology.statuses())} "
                          "records written")
            victim.signal(signal.SIGKILL)
            killed_at = time.time()  # the commit records' and terms' clock: this machine's
            last = _last_commits(client, group, moved, n)  # a dead leader commits no more: these are its last
            firsts: dict[int, float | None] = {}

            def every_moved_queue_committed() -> bool:
                firsts.update({q: _first_commit_after(client, group, q, n, last[q][0] if q in last else 0)
                               for q in moved})
                return None not in firsts.values()

            topology.wait_for(every_moved_queue_committed, session_timeout_s + 120,
                              "a new leader's commit in every queue the killed replica led", interval_s=0.5)
            after = _leaders(client, group, n)
            moves = [Move(q, after[q], None if q not in last else killed_at - last[q][1],
                          None if (first := firsts[q]) is None else first - killed_at) for q in moved]
            _say(console, f"every queue {name} led has a new leader that committed (session timeout "
                          f"{session_timeout_s:g} s):")
            for line in format_moves(name, moves):
                _say(console, f"  {line}")
            _say(console, f"now: {format_leads(after)}")
        topology.wait_for(lambda: producer.poll() is not None, settle_timeout_s, "the producer to finish")
        _say(console, "producer done; waiting for the leaders to drain the queues")
        topology.wait_for(_DrainProgress(console, topology, n, records), settle_timeout_s,
                          "the queues to drain", interval_s=0.5)
        report = _audit_redis(topology) if redis else None
    except TimeoutError as exc:
        _say(console, f"[red]{exc}[/]: see the logs under {topology.logs}")
        return 1
    finally:
        _say(console, "stopping every process (followers, then leaders, each with a graceful handover)")
        topology.stop()
    if report is None:
        report = verify(topology.data_root, max_line_bytes=_MAX_LINE_BYTES)
    print(report.render(), flush=True)
    return 0 if report.ok else 1
