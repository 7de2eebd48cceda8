"""`tenure up`: run the local topology with a live status view until Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

from tenure.service._signals import on_signals
from tenure.service.local._replica_process import ReplicaStatus
from tenure.service.local._supervise import Supervisor
from tenure.service.local._topology import Topology

__all__ = ["render_status", "run_up"]


def _led(status: ReplicaStatus) -> str:
    return ",".join(map(str, status.led)) or "-"


def render_status(statuses: list[ReplicaStatus], zk: str, *, queues: int = 1) -> Table:
    """The per-replica table: role, epoch (the highest of its queues'), batches, records, backlog, and with several
    ``queues`` the queues it leads; the leaders highlighted."""
    table = Table(title=f"tenure up — ZooKeeper {zk}", title_justify="left")
    columns = ("replica", "pid", "role", *(("queues led",) if queues > 1 else ()), "epoch", "batches", "records",
               "backlog", "zk")
    for column in columns:
        table.add_column(column, justify="right" if column not in ("replica", "role", "queues led") else "left")
    for s in statuses:
        role = "leader" if s.leader else ("follower" if s.up else "down")
        table.add_row(s.replica_id, str(s.pid or "-"), role, *((_led(s),) if queues > 1 else ()), str(s.epoch or "-"),
                      str(s.batches), str(s.records), str(s.backlog), "yes" if s.zk_connected else "no",
                      style="bold green" if s.leader else ("dim" if not s.up else ""))
    return table


def _plain_line(statuses: list[ReplicaStatus], queues: int) -> str:
    parts = []
    for s in statuses:
        role = "LEADER" if s.leader else ("follower" if s.up else "down")
        led = f"queues={_led(s)}," if queues > 1 else ""
        parts.append(f"{s.replica_id}={role}" + (f"({led}epoch={s.epoch},batches={s.batches},records={s.records},"
                                                  f"backlog={s.backlog})" if s.leader else ""))
    return time.strftime("%H:%M:%S ") + " ".join(parts)


def _stamped(line: str) -> str:
    return time.strftime("%H:%M:%S ") + line


def run_up(topology: Topology, *, producer_args: list[str] | None = None, plain_interval_s: float = 5.0) -> int:
    """Start ``topology``, show its status until a signal, then stop everything in order. A replica that exits
    meanwhile (a crash, or a stall: it gave its lock up) is restarted with a back-off, and said so."""
    stop = threading.Event()
    on_signals(lambda _signum: stop.set(), signal.SIGTERM, signal.SIGINT)
    console = Console()
    queues = topology.spec.value("queues") or 1
    try:
        topology.start()
        if producer_args is not None:
            topology.start_producer(producer_args)
        spark = f"Spark: {topology.spark.master_url}   " if topology.spark is not None else ""
        spark += f"Redis: {topology.spec.value('queue_url')}   " if topology.redis is not None else ""
        print(f"ZooKeeper: {topology.ensemble.connect_string}   {spark}data: {topology.data_root}   "
              f"logs: {topology.logs}   metrics: " + ", ".join(f"127.0.0.1:{r.port}" for r in topology.replicas),
              flush=True)
        if sys.stdout.isatty():
            with Live(render_status(topology.statuses(), topology.ensemble.connect_string, queues=queues),
                      console=console, refresh_per_second=2) as live:
                supervisor = Supervisor(topology, report=lambda line: live.console.print(_stamped(line)))
                while not stop.wait(1.0):
                    supervisor.check()
                    live.update(render_status(topology.statuses(), topology.ensemble.connect_string, queues=queues))
        else:
            supervisor = Supervisor(topology, report=lambda line: print(_stamped(line), flush=True))
            next_line = time.monotonic() + plain_interval_s
            while not stop.wait(1.0):
                supervisor.check()
                if time.monotonic() >= next_line:
                    next_line += plain_interval_s
                    print(_plain_line(topology.statuses(), queues), flush=True)
    finally:
        print("stopping: producer, followers, then the leader (a graceful handover), then Spark and ZooKeeper",
              flush=True)
        topology.stop()
    return 0
