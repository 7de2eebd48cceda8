"""`tenure demo`: the README's main job — three replicas and a producer, the leader killed midway, an audit."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from rich.console import Console

from tenure.career.output import TABLE, snapshot_rows
from tenure.career.queue import QueueLayout, is_queue_file
from tenure.service.local._topology import Topology
from tenure.service.ops import verify
from tenure.service.replica import ReplicaSpec

__all__ = ["run_demo"]

_MAX_LINE_BYTES = 64 * 1024


def _say(console: Console, text: str) -> None:
    console.print(f"[bold cyan]demo[/] {time.strftime('%H:%M:%S')} {text}")


def _waiting_files(data_root: Path) -> int:
    """Queue files still in ``landing/``: a file is archived only once its batch is published and checkpointed."""
    return sum(1 for entry in os.scandir(QueueLayout(data_root).landing) if is_queue_file(entry.name))


def _written(data_root: Path) -> int:
    """Rows a Delta reader of ``table/`` sees so far (whole batches only)."""
    return snapshot_rows(data_root / TABLE)


class _DrainProgress:
    """The wait for the queue to drain, told as progress (written of expected, files waiting) every few seconds,
    not as audits that fail until the end: the one audit runs once everything is stopped."""

    def __init__(self, console: Console, data_root: Path, expected: int, every_s: float = 5.0) -> None:
        self._console, self._data_root, self._expected, self._every_s = console, data_root, expected, every_s
        self._next = 0.0

    def __call__(self) -> bool:
        waiting = _waiting_files(self._data_root)
        now = time.monotonic()
        if waiting == 0 or now >= self._next:
            self._next = now + self._every_s
            _say(self._console, f"written {_written(self._data_root)} of {self._expected} records, "
                                f"{waiting} queue file{'' if waiting == 1 else 's'} waiting")
        return waiting == 0


def run_demo(directory: Path, *, records: int = 20000, rate: float = 2000.0, keys: int = 50,
             career: str = "spark", settle_timeout_s: float = 240.0, warmup_timeout_s: float = 600.0,
             spark_workers: int = 0) -> int:
    """Run the scripted demonstration; returns 0 when the audit finds every message exactly once, in order."""
    console = Console(soft_wrap=True)  # long lines stay whole in logs and pipes
    if directory.exists():
        shutil.rmtree(directory)
    # Injected oversized lines are max_line_bytes + 1 long: a 64 KiB limit keeps the demo's queue small.
    topology = Topology(directory, replicas=3, spec=ReplicaSpec(career=career, max_line_bytes=_MAX_LINE_BYTES),
                        spark_workers=spark_workers)
    session_timeout_s = topology.spec.value("session_timeout_s")
    try:
        cluster = f", a Spark cluster of {spark_workers} workers" if spark_workers else ""
        _say(console, f"starting a 3-server ZooKeeper ensemble{cluster} and 3 {career} replicas under {directory}")
        topology.start()
        first = topology.wait_for_leader(warmup_timeout_s)
        _say(console, f"[green]{first.replica_id}[/] leads with epoch {first.epoch}; the others follow, warm")
        _say(console, f"producing {records} records over {keys} keys at {rate:g}/s, with 5% repeats and 1% bad lines")
        producer = topology.start_producer(["--records", str(records), "--keys", str(keys), "--rate", f"{rate:g}",
                                            "--duplicates", "0.05", "--bad", "0.01", "--seed", "7",
                                            "--max-line-bytes", str(_MAX_LINE_BYTES)])
        topology.wait_for(lambda: topology.replica(first.replica_id).status().records >= records // 3, 180,
                          "the leader to write a third of the records")
        killed = topology.replica(first.replica_id)
        _say(console, f"[red]SIGKILL[/] the leader {first.replica_id} (pid {killed.pid}) after "
                      f"{killed.status().records} records")
        killed_at = time.monotonic()
        killed.signal(signal.SIGKILL)
        second = topology.wait_for_leader(session_timeout_s + 120)
        _say(console, f"[green]{second.replica_id}[/] took over with epoch {second.epoch} after "
                      f"{time.monotonic() - killed_at:.1f} s (session timeout {session_timeout_s:g} s)")
        topology.wait_for(lambda: producer.poll() is not None, settle_timeout_s, "the producer to finish")
        _say(console, "producer done; waiting for the new leader to drain the queue")
        topology.wait_for(_DrainProgress(console, topology.data_root, records), settle_timeout_s, "the queue to drain",
                          interval_s=0.5)
    except TimeoutError as exc:
        _say(console, f"[red]{exc}[/]: see the logs under {topology.logs}")
        return 1
    finally:
        _say(console, "stopping every process (followers, then the leader with a graceful handover)")
        topology.stop()
    report = verify(topology.data_root, max_line_bytes=_MAX_LINE_BYTES)
    print(report.render(), flush=True)
    return 0 if report.ok else 1
