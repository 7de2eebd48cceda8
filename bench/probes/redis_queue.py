"""The Redis queue against the file queue, side by side in one run, on the same records: throughput, end-to-end
latency (a record added → its batch committed and published in the table) and a handover's gap.

`.venv/bin/python -m bench.probes.redis_queue [RECORDS] [RATE] [SECONDS] [HANDOVERS]` (from the repository root,
nothing else running) starts a ZooKeeper ensemble, a Redis (``appendonly yes``, ``appendfsync always``) and one
Spark context, then for each queue in turn — a queue folder (files of 1 000 records, renamed into ``landing/``), a
Redis topic of one stream (pipelines of 1 000 ``XADD``s) — drives one leader's Spark career (the product's, with
its fenced commit) through two phases on a data root of its own:

- **throughput**: RECORDS records (default 50 000) already queued, then the career started: records written per
  second from its query's start to the last one in the table (both bounded by the same ``--max-bytes-per-trigger``,
  about 5 000 records a batch, whole files or entries);
- **latency**: records added at RATE per second (default 500) for SECONDS (default 20) while it runs: each
  record's latency is from its addition (the file's rename, the pipeline's reply) to its batch's commit and
  publish (the batch writer's return), read per batch from the table's ``_batch`` and the observer's commits.

Then both careers run at once for the **handover gap**: records are added to both queues at RATE per second each
while the leader's term ends and a successor's term begins on the same career (``inaugurate`` with the next epoch:
a new election node), HANDOVERS times of each kind (default 5) per queue, alternating file and Redis so that the
machine's load falls on both alike:

- **clean**: ``hand_over(CLEAN)`` (the batch in flight finishes), the handover record written through the fence,
  the election node released; the successor elected and inaugurated after a clean handover;
- **crash**: the term abandoned: its election node deleted first (the fence revoked: a commit in flight is
  fenced), then its query stopped at once (``hand_over(FAILED)``: no wait for the batch in flight, no handover
  record); the successor inaugurated to recover.

The gap is from the old term's last commit to the new term's first (the observer's commit events). One process
cannot show what a real successor adds: the ZooKeeper session's timeout before a crashed leader's node goes, the
election of another process, and that process's own JVM (a warm standby's, already started and warmed, so the
same JVM stands in for it here). At the end each table's rows and distinct ids are counted against the records added.

It writes ``results.json`` and ``results.md`` to ``bench/results/issue-52-redis-queue/``, which
``docs/performance/redis-queue.md`` quotes.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import redis

from bench.probes import results_folder
from tenure.career import CareerContext, Outcome
from tenure.career.redis_queue import RedisTopic
from tenure.career.spark import SparkCareer, SparkCareerConfig, SparkCareerError
from tenure.election import Elected, Election, HandoverRecord, Identity, connect, disconnect
from tenure.service.local import running_ensemble, running_redis, wait_for

_HERE = results_folder("issue-52-redis-queue")
_PER_FILE = 1000
_BATCH_BYTES = 5 * _PER_FILE * 80  # about 5 000 records: the one bound both sources take (files or entries whole)


class _Commits:
    """A career observer that keeps when each batch's commit returned (batch id → time.time(), and every commit's
    time in order: a batch a crashed term left is committed again by its successor)."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}
        self.times: list[float] = []
        self._batch = -1

    def batch_started(self, batch_id: int) -> None:
        self._batch = batch_id

    def batch_finished(self, outcome: str, duration_s: float, records: dict[str, int], *,
                       progressed: bool = True) -> None:
        if outcome == "committed":
            now = time.time()  # committed and published: the rows are in the table
            self.at[self._batch] = now
            self.times.append(now)

    def commit_finished(self, duration_s: float, committed_at: float) -> None: ...

    def backlog(self, files: int, *, retry_due: bool = False) -> None: ...

    def retry_waiting(self, records: int) -> None: ...

    def queue_lost(self, lost: bool) -> None: ...


def _line(i: int) -> bytes:
    return json.dumps({"id": f"id-{i}", "key": f"k-{i % 50}", "seq": i, "ts": i, "payload": {"i": i}},
                      separators=(",", ":")).encode()


class _FileQueue:
    def __init__(self, root: Path) -> None:
        self.landing = root / "landing"
        self.landing.mkdir(parents=True, exist_ok=True)
        self.files = 0

    def add(self, first: int, count: int) -> float:
        """Records ``first`` … as one file renamed into landing/; the time it landed."""
        self.files += 1
        hidden = self.landing / f".q-{self.files:06d}.jsonl"
        with hidden.open("wb") as handle:
            handle.write(b"".join(_line(i) + b"\n" for i in range(first, first + count)))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(hidden, self.landing / hidden.name[1:])
        return time.time()


class _StreamQueue:
    def __init__(self, topic: RedisTopic) -> None:
        self.client = redis.Redis.from_url(topic.url)
        self.stream = topic.stream(0)

    def add(self, first: int, count: int) -> float:
        """Records ``first`` … in one pipeline of XADDs; the time Redis acknowledged them."""
        pipe = self.client.pipeline(transaction=False)
        for i in range(first, first + count):
            pipe.xadd(self.stream, {"record": _line(i)})
        pipe.execute()
        return time.time()


def _table(root: Path) -> Any:
    """The table's id and _batch columns (None while it has no file)."""
    parts = [str(p) for p in (root / "table").glob("*.parquet")]
    return ds.dataset(parts, format="parquet").to_table(columns=["id", "_batch"]) if parts else None


def _rows(root: Path) -> dict[str, int]:
    """id → _batch of the table's rows."""
    table = _table(root)
    if table is None:
        return {}
    return dict(zip(table.column("id").to_pylist(), table.column("_batch").to_pylist(), strict=True))


def _quantile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3)


class _Leader:
    """One queue's Spark career through the probe's phases, and the term it is in: each term a new election node
    (the next epoch), as a successor's would be."""

    def __init__(self, name: str, root: Path, config: SparkCareerConfig, add: Callable[[int, int], float],
                 client: Any) -> None:
        self.name, self.root, self.add = name, root, add
        self.commits = _Commits()
        self.career = SparkCareer(config, self.commits, replica_id="bench", group=f"bench-{name}")
        self.added = 0  # records added so far: id-0 … id-<added - 1>
        self.failed_terms: list[str] = []  # the gap phase's terms whose query died, and why
        self._client = client
        self._election: Election | None = None
        self._epoch = 0
        self._previous: HandoverRecord | None = None  # what the last term left for its successor

    @property
    def leading(self) -> bool:
        return self._election is not None

    def begin(self) -> None:
        """Elected (a new node: the next epoch), the career inaugurated after the last term's handover record (if
        it wrote one) and its query started."""
        events: list[Any] = []
        election = Election(self._client, group=f"bench-{self.name}", identity=Identity.local("bench"),
                            on_event=events.append)
        self._election = election
        election.start()
        wait_for(lambda: any(isinstance(e, Elected) for e in events), 30, f"{self.name}: the bench's term",
                 interval_s=0.01)
        fence = election.fence()
        self._epoch = fence.epoch
        self.career.inaugurate(CareerContext(epoch=fence.epoch, fence=fence, still_leading=election.is_leader,
                                             previous_handover=self._previous))
        self.career.execute()  # starts the query

    def end(self, *, clean: bool) -> None:
        """End the term: cleanly (the batch in flight finishes, the handover record written, the node released), or
        as a crash leaves it (the node deleted first, so a commit in flight is fenced, then the query stopped at
        once, no record)."""
        election = self._election
        if election is None:
            return
        self._election = None
        self._previous = None
        if not clean:
            election.close()
            self.career.hand_over(Outcome.FAILED)
            return
        record = HandoverRecord(epoch=self._epoch, last_batch=self.career.hand_over(Outcome.CLEAN), clean=True,
                                at=time.time(), replica_id="bench")
        election.write_handover(record)
        election.close()
        self._previous = record

    def close(self) -> None:
        try:
            self.career.close()
        finally:
            if self._election is not None:
                self._election.close()


def _pump_until(leaders: list[_Leader], done: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Wait for ``done``, doing meanwhile the control thread's part of every leading career (start its query,
    watch it, archive); a term whose query dies (under load, Spark's Python worker may not connect back in time)
    ends as a crash and a new one begins, counted in the results."""

    def check() -> bool:
        for leader in leaders:
            if leader.leading:
                try:
                    leader.career.execute()
                except SparkCareerError as exc:  # as a replica's runner does: the term ends, a new one begins
                    leader.failed_terms.append(str(exc)[:300])
                    leader.end(clean=False)
                    leader.begin()
        return done()

    wait_for(check, timeout_s, what, interval_s=0.01)


def _run(leader: _Leader, records: int, rate: float, seconds: float) -> dict[str, Any]:
    name, root, career, commits = leader.name, leader.root, leader.career, leader.commits
    for first in range(0, records, _PER_FILE):
        leader.add(first, _PER_FILE)
    stop = threading.Event()
    try:
        leader.begin()
        started = time.monotonic()
        wait_for(lambda: (career.execute(), len(_rows(root)) >= records)[1], 900, f"{name}: the backlog written",
                 interval_s=0.05)
        throughput_s = time.monotonic() - started
        added: dict[int, float] = {}  # the first record of each chunk → when it was added
        chunk = max(1, int(rate / 10))  # ten additions a second

        def produce() -> None:
            first, deadline = records, time.monotonic() + seconds
            while time.monotonic() < deadline and not stop.is_set():
                added[first] = leader.add(first, chunk)
                first += chunk
                stop.wait(chunk / rate)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        wait_for(lambda: (career.execute(), not producer.is_alive())[1], seconds + 60, f"{name}: the producer",
                 interval_s=0.02)
        total = leader.added = records + chunk * len(added)
        rows: dict[str, int] = {}

        def all_written() -> bool:
            career.execute()
            rows.update(_rows(root))  # a batch's rows are in table/ just before its batch writer returns:
            return len(rows) >= total and set(rows.values()) <= commits.at.keys()  # wait for both

        wait_for(all_written, 300, f"{name}: the last records", interval_s=0.02)
        latencies = [commits.at[rows[f"id-{i}"]] - at for first, at in added.items()
                     for i in range(first, first + chunk)]
        leader.end(clean=True)
    finally:
        stop.set()

    return {"queue": name, "records": records, "throughput_s": round(throughput_s, 2),
            "records_per_s": round(records / throughput_s), "latency_records": len(latencies),
            "latency_p50_s": _quantile(latencies, 0.5), "latency_p90_s": _quantile(latencies, 0.9),
            "latency_p99_s": _quantile(latencies, 0.99), "latency_mean_s": round(statistics.fmean(latencies), 3)}


def _handover(leaders: list[_Leader], leader: _Leader, *, clean: bool) -> float:
    """One handover of ``leader``'s queue while records flow: the gap from its old term's last commit to its new
    term's first, in seconds."""
    seen = len(leader.commits.times)  # a term in its stride: a commit since the last handover's first
    _pump_until(leaders, lambda: len(leader.commits.times) > seen, 300, f"{leader.name}: a commit")
    leader.end(clean=clean)
    ended = len(leader.commits.times)  # the query stopped: no commit of the old term comes after this one
    last = leader.commits.times[-1]
    leader.begin()
    _pump_until(leaders, lambda: len(leader.commits.times) > ended, 300, f"{leader.name}: the successor's first commit")
    return leader.commits.times[ended] - last


def _all_ids(leaders: list[_Leader], leader: _Leader) -> list[str]:
    """The ids of the rows of ``leader``'s table once every record added is there, a repeated id as often."""
    _pump_until(leaders, lambda: len(_rows(leader.root)) >= leader.added, 300, f"{leader.name}: the last records")
    ids: list[str] = _table(leader.root).column("id").to_pylist()
    return ids


def _gaps(leaders: list[_Leader], rate: float, handovers: int) -> dict[str, dict[str, Any]]:
    """HANDOVERS clean and as many crash handovers per queue, alternating queues, while RATE records a second are
    added to each; then each table's rows and distinct ids counted."""
    chunk = max(1, int(rate / 10))
    stop = threading.Event()

    def produce(leader: _Leader) -> None:
        while not stop.is_set():
            leader.add(leader.added, chunk)
            leader.added += chunk
            stop.wait(chunk / rate)

    producers = [threading.Thread(target=produce, args=(leader,), daemon=True) for leader in leaders]
    gaps: dict[str, dict[str, list[float]]] = {leader.name: {"clean": [], "crash": []} for leader in leaders}
    for leader in leaders:
        leader.begin()
    try:
        for producer in producers:
            producer.start()
        for _ in range(handovers):
            for kind in ("clean", "crash"):
                for leader in leaders:
                    gaps[leader.name][kind].append(_handover(leaders, leader, clean=kind == "clean"))
    finally:
        stop.set()
        for producer in producers:
            producer.join(10)
    out: dict[str, dict[str, Any]] = {}
    for leader in leaders:
        ids = _all_ids(leaders, leader)
        out[leader.name] = {"records": leader.added, "rows": len(ids), "distinct_ids": len(set(ids)),
                            "failed_terms": leader.failed_terms,
                            **{f"{kind}_{name}": value for kind, values in gaps[leader.name].items()
                               for name, value in (("gaps_s", [round(v, 3) for v in values]),
                                                   ("p50_s", _quantile(values, 0.5)),
                                                   ("p90_s", _quantile(values, 0.9)))}}
    return out


def main(records: int = 50_000, rate: float = 500.0, seconds: float = 20.0, handovers: int = 5) -> None:
    with tempfile.TemporaryDirectory(prefix="tenure-redis-bench-") as tmp, ExitStack() as stack:
        base = Path(tmp)
        ensemble = stack.enter_context(running_ensemble(base / "zk"))
        server = stack.enter_context(running_redis(base / "redis"))
        client = connect(ensemble.connect_string, session_timeout_s=10.0)
        stack.callback(disconnect, client)
        common: dict[str, Any] = {"standby": "warm", "trigger_interval_s": 0.1, "handover_budget_s": 30.0,
                  "max_bytes_per_trigger": _BATCH_BYTES}
        topic = RedisTopic.parse(f"{server.url}?prefix=bench")
        file_root, redis_root = base / "file", base / "redis-data"
        leaders = [_Leader("file", file_root, SparkCareerConfig(data_root=file_root, **common),
                           _FileQueue(file_root).add, client),
                   _Leader("redis", redis_root, SparkCareerConfig(data_root=redis_root, queue_url=str(topic), **common),
                           _StreamQueue(topic).add, client)]
        for leader in leaders:  # the file career's standby starts Spark, so it is closed last
            stack.callback(leader.close)
            leader.career.prepare()
        results = [_run(leader, records, rate, seconds) for leader in leaders]
        gaps = _gaps(leaders, rate, handovers)
    for result in results:
        result.update(handover=gaps[result["queue"]])
    run = {"records": records, "rate": rate, "seconds": seconds, "handovers": handovers, "cpus": os.cpu_count(),
           "load_average": os.getloadavg(), "results": results}
    (_HERE / "results.json").write_text(json.dumps(run, indent=2) + "\n")
    lines = [f"| queue | records/s (backlog of {records:,}) | latency p50 | p90 | p99 | mean |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['queue']} | {r['records_per_s']:,} | {r['latency_p50_s']} s | {r['latency_p90_s']} s | "
              f"{r['latency_p99_s']} s | {r['latency_mean_s']} s |" for r in results]
    file_gaps, redis_gaps = gaps["file"], gaps["redis"]
    lines += ["", f"Handover gap ({handovers} of each kind per queue, {rate:g} records/s added to each queue):", "",
              "| handover | file p50 | file p90 | redis p50 | redis p90 | redis/file p50 | redis/file p90 |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {kind} | {file_gaps[f'{kind}_p50_s']} s | {file_gaps[f'{kind}_p90_s']} s | "
              f"{redis_gaps[f'{kind}_p50_s']} s | {redis_gaps[f'{kind}_p90_s']} s | "
              f"{redis_gaps[f'{kind}_p50_s'] / file_gaps[f'{kind}_p50_s']:.2f} | "
              f"{redis_gaps[f'{kind}_p90_s'] / file_gaps[f'{kind}_p90_s']:.2f} |" for kind in ("clean", "crash")]
    lines += ["", "Exactly once after the handovers: " + ", ".join(
        f"{name} {g['records']:,} records added, {g['rows']:,} rows, {g['distinct_ids']:,} distinct ids"
        for name, g in gaps.items())]
    (_HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 50_000, float(args[1]) if len(args) > 1 else 500.0,
         float(args[2]) if len(args) > 2 else 20.0, int(args[3]) if len(args) > 3 else 5)
