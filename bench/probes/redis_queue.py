"""The Redis queue against the file queue, side by side in one run, on the same records: throughput and end-to-end
latency (a record added → its batch committed and published in the table).

`.venv/bin/python -m bench.probes.redis_queue [RECORDS] [RATE] [SECONDS]` (from the repository root, nothing
else running) starts a ZooKeeper ensemble, a Redis (``appendonly yes``, ``appendfsync always``) and one Spark
session, then for each queue in turn — a queue folder (files of 1 000 records, renamed into ``landing/``), a
Redis topic of one stream (pipelines of 1 000 ``XADD``s) — drives one leader's Spark career (the product's, with
its fenced commit) through two phases on a data root of its own:

- **throughput**: RECORDS records (default 50 000) already queued, then the career started: records written per
  second from its query's start to the last one in the table (both bounded by the same ``--max-bytes-per-trigger``,
  about 5 000 records a batch, whole files or entries);
- **latency**: records added at RATE per second (default 500) for SECONDS (default 20) while it runs: each
  record's latency is from its addition (the file's rename, the pipeline's reply) to its batch's commit and
  publish (the batch writer's return), read per batch from the table's ``_batch`` and the observer's commits.

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
from tenure.career.spark import SparkCareer, SparkCareerConfig
from tenure.election import Elected, Election, Identity, connect, disconnect
from tenure.service.local import running_ensemble, running_redis, wait_for

_HERE = results_folder("issue-52-redis-queue")
_PER_FILE = 1000
_BATCH_BYTES = 5 * _PER_FILE * 80  # about 5 000 records: the one bound both sources take (files or entries whole)


class _Commits:
    """A career observer that keeps when each batch's commit returned (batch id → time.time())."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}
        self._batch = -1

    def batch_started(self, batch_id: int) -> None:
        self._batch = batch_id

    def batch_finished(self, outcome: str, duration_s: float, records: dict[str, int], *,
                       progressed: bool = True) -> None:
        if outcome == "committed":
            self.at[self._batch] = time.time()  # committed and published: the rows are in the table

    def commit_finished(self, duration_s: float, committed_at: float) -> None: ...

    def backlog(self, files: int, *, retry_due: bool = False) -> None: ...

    def retry_waiting(self, records: int) -> None: ...

    def records_dropped(self, records: int) -> None: ...

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


def _rows(root: Path) -> dict[str, int]:
    """id → _batch of the table's rows."""
    parts = [str(p) for p in (root / "table").glob("*.parquet")]
    if not parts:
        return {}
    table = ds.dataset(parts, format="parquet").to_table(columns=["id", "_batch"])
    return dict(zip(table.column("id").to_pylist(), table.column("_batch").to_pylist(), strict=True))


def _term(client: Any, group: str) -> tuple[Election, CareerContext]:
    events: list[Any] = []
    election = Election(client, group=group, identity=Identity.local("bench"), on_event=events.append)
    election.start()
    wait_for(lambda: any(isinstance(e, Elected) for e in events), 30, "the bench's term", interval_s=0.05)
    fence = election.fence()
    return election, CareerContext(epoch=fence.epoch, fence=fence, still_leading=election.is_leader,
                                   previous_handover=None)


def _run(name: str, root: Path, config: SparkCareerConfig, add: Callable[[int, int], float], client: Any,
         records: int, rate: float, seconds: float) -> dict[str, Any]:
    commits = _Commits()
    career = SparkCareer(config, commits, replica_id="bench", group=f"bench-{name}")
    career.prepare()
    for first in range(0, records, _PER_FILE):
        add(first, _PER_FILE)
    election, ctx = _term(client, f"bench-{name}")
    stop = threading.Event()
    try:
        career.inaugurate(ctx)
        started = time.monotonic()
        wait_for(lambda: (career.execute(), len(_rows(root)) >= records)[1], 900, f"{name}: the backlog written",
                 interval_s=0.05)
        throughput_s = time.monotonic() - started
        added: dict[int, float] = {}  # the first record of each chunk → when it was added
        chunk = max(1, int(rate / 10))  # ten additions a second

        def produce() -> None:
            first, deadline = records, time.monotonic() + seconds
            while time.monotonic() < deadline and not stop.is_set():
                added[first] = add(first, chunk)
                first += chunk
                stop.wait(chunk / rate)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        wait_for(lambda: (career.execute(), not producer.is_alive())[1], seconds + 60, f"{name}: the producer",
                 interval_s=0.02)
        total = records + chunk * len(added)
        rows: dict[str, int] = {}

        def all_written() -> bool:
            career.execute()
            rows.update(_rows(root))  # a batch's rows are in table/ just before its batch writer returns:
            return len(rows) >= total and set(rows.values()) <= commits.at.keys()  # wait for both

        wait_for(all_written, 300, f"{name}: the last records", interval_s=0.02)
        latencies = sorted(commits.at[rows[f"id-{i}"]] - at for first, at in added.items()
                           for i in range(first, first + chunk))
        career.hand_over(Outcome.CLEAN)
    finally:
        stop.set()
        career.close()
        election.close()

    def q(p: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 3)

    return {"queue": name, "records": records, "throughput_s": round(throughput_s, 2),
            "records_per_s": round(records / throughput_s), "latency_records": len(latencies),
            "latency_p50_s": q(0.5), "latency_p90_s": q(0.9), "latency_p99_s": q(0.99),
            "latency_mean_s": round(statistics.fmean(latencies), 3)}


def main(records: int = 50_000, rate: float = 500.0, seconds: float = 20.0) -> None:
    with tempfile.TemporaryDirectory(prefix="tenure-redis-bench-") as tmp, ExitStack() as stack:
        base = Path(tmp)
        ensemble = stack.enter_context(running_ensemble(base / "zk"))
        server = stack.enter_context(running_redis(base / "redis"))
        client = connect(ensemble.connect_string, session_timeout_s=10.0)
        stack.callback(disconnect, client)
        common = {"standby": "warm", "trigger_interval_s": 0.1, "handover_budget_s": 30.0,
                  "max_bytes_per_trigger": _BATCH_BYTES}
        topic = RedisTopic.parse(f"{server.url}?prefix=bench")
        results = []
        file_root, redis_root = base / "file", base / "redis-data"
        results.append(_run("file", file_root, SparkCareerConfig(data_root=file_root, **common),
                            _FileQueue(file_root).add, client, records, rate, seconds))
        results.append(_run("redis", redis_root, SparkCareerConfig(data_root=redis_root, queue_url=str(topic),
                                                                   **common),
                            _StreamQueue(topic).add, client, records, rate, seconds))
    run = {"records": records, "rate": rate, "seconds": seconds, "cpus": os.cpu_count(), "results": results}
    (_HERE / "results.json").write_text(json.dumps(run, indent=2) + "\n")
    lines = [f"| queue | records/s (backlog of {records:,}) | latency p50 | p90 | p99 | mean |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['queue']} | {r['records_per_s']:,} | {r['latency_p50_s']} s | {r['latency_p90_s']} s | "
              f"{r['latency_p99_s']} s | {r['latency_mean_s']} s |" for r in results]
    (_HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 50_000, float(args[1]) if len(args) > 1 else 500.0,
         float(args[2]) if len(args) > 2 else 20.0)
