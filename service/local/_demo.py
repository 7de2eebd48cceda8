"""`tenure demo`: the README's main job — three replicas and a producer, the leader killed midway, an audit."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

from rich.console import Console

from service.local._topology import Topology
from service.ops import verify

__all__ = ["run_demo"]

_MAX_LINE_BYTES = 64 * 1024


def _say(console: Console, text: str) -> None:
    console.print(f"[bold cyan]demo[/] {time.strftime('%H:%M:%S')} {text}")


def _drained(data_root: Path) -> bool:
    report = verify(data_root, max_line_bytes=_MAX_LINE_BYTES)
    return report.lost == 0 and report.unquarantined == 0


def run_demo(directory: Path, *, records: int = 20000, rate: float = 2000.0, keys: int = 50,
             career: str = "spark", session_timeout_s: float = 6.0, settle_timeout_s: float = 240.0,
             warmup_timeout_s: float = 600.0) -> int:
    """Run the scripted demonstration; returns 0 when the audit finds every message exactly once, in order."""
    console = Console(soft_wrap=True)  # long lines stay whole in logs and pipes
    if directory.exists():
        shutil.rmtree(directory)
    # Injected oversized lines are max_line_bytes + 1 long: a 64 KiB limit keeps the demo's queue small.
    line_limit = ["--max-line-bytes", str(_MAX_LINE_BYTES)]
    topology = Topology(directory, replicas=3, career=career, session_timeout_s=session_timeout_s,
                        handover_timeout_s=3.0, replica_args=line_limit)
    try:
        _say(console, f"starting a 3-server ZooKeeper ensemble and 3 {career} replicas under {directory}")
        topology.start()
        first = topology.wait_for_leader(warmup_timeout_s)
        _say(console, f"[green]{first.replica_id}[/] leads with epoch {first.epoch}; the others follow, warm")
        _say(console, f"producing {records} records over {keys} keys at {rate:g}/s, with 5% repeats and 1% bad lines")
        producer = topology.start_producer(["--records", str(records), "--keys", str(keys), "--rate", f"{rate:g}",
                                            "--duplicates", "0.05", "--bad", "0.01", "--seed", "7", *line_limit])
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
        topology.wait_for(lambda: _drained(topology.data_root), settle_timeout_s, "the queue to drain", interval_s=2.0)
    except TimeoutError as exc:
        _say(console, f"[red]{exc}[/]: see the logs under {topology.logs}")
        return 1
    finally:
        _say(console, "stopping every process (followers, then the leader with a graceful handover)")
        topology.stop()
    report = verify(topology.data_root, max_line_bytes=_MAX_LINE_BYTES)
    print(report.render(), flush=True)
    return 0 if report.ok else 1
