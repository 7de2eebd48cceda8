"""The naive baseline: kazoo's own ``Election`` recipe with a Spark consumer started COLD on election.

What users would otherwise build: every replica waits in ``client.Election(...).run(lead)``; the winner starts a
SparkSession and the Structured Streaming query (the same pipeline as tenure's, see ``bench._query``, writing
Parquet from ``foreachBatch``), and on SIGTERM stops the query and returns, which releases the lock. There is
no fence: after each batch it writes the same commit record tenure writes (batch_id, epoch, committed_at) with a
plain ``set``, only so the benchmark can watch both on one timeline.

Run: ``python -m bench._naive --zk HOSTS --group G --data-root D --replica-id R``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient

from tenure.career.spark._layout import Layout
from tenure.election import ELECTED, GroupPaths
from tenure.service._signals import on_signals

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._naive")
    parser.add_argument("--zk", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--data-root", type=Path, required=True)
    parser.add_argument("--replica-id", required=True)
    parser.add_argument("--session-timeout-s", type=float, default=6.0)
    parser.add_argument("--max-files-per-trigger", type=int, default=5)
    args = parser.parse_args(argv)

    stop = threading.Event()
    client = KazooClient(hosts=args.zk, timeout=args.session_timeout_s)
    client.start(timeout=30)
    election = client.Election(f"/tenure-naive/{args.group}/election", identifier=args.replica_id)
    commit_path = GroupPaths(args.group).commit
    client.ensure_path(commit_path)

    def on_term(_signum: signal.Signals) -> None:
        stop.set()
        election.cancel()  # leaves the queue when still waiting; the leader sees ``stop`` instead

    on_signals(on_term, signal.SIGTERM, signal.SIGINT)

    def lead() -> None:
        # Imported here, as a user's leader callback would: nothing of Spark exists until election.
        from bench._query import session, start_query
        from tenure.career.spark import SparkCareerConfig

        elected_at = time.time()
        epoch = int(elected_at * 1000)
        print(json.dumps({"event": ELECTED, "at": elected_at, "replica_id": args.replica_id}), flush=True)
        config = SparkCareerConfig(data_root=args.data_root, max_files_per_trigger=args.max_files_per_trigger)
        spark = session(config, "naive")

        def on_batch(info: dict[str, object]) -> None:
            record = {**info, "epoch": epoch, "replica_id": args.replica_id}
            client.set(commit_path, json.dumps(record, sort_keys=True).encode())  # unfenced: any writer wins

        query = start_query(spark, config, checkpoint=args.data_root / "checkpoint-naive",
                            table=Layout(args.data_root).table, quarantine=Layout(args.data_root).quarantine,
                            on_batch=on_batch, epoch=epoch)
        while not stop.is_set() and query.isActive:
            stop.wait(0.2)
        query.stop()  # interrupts the batch in flight: Spark has no "finish this batch" stop
        print(json.dumps({"event": "stepped_down", "at": time.time()}), flush=True)

    print(json.dumps({"event": "waiting", "replica_id": args.replica_id}), flush=True)
    while not stop.is_set():
        election.run(lead)
    client.stop()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
