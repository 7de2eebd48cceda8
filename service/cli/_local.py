"""Commands that run infrastructure on this machine: ``tenure zk``, ``redis``, ``spark``, ``up`` and ``demo``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tenure.errors import TenureError
from tenure.service._logs import log_to_file
from tenure.service.cli._replica import setting_option
from tenure.service.cli._root import fail, spark_cluster_option, stop_on_signals
from tenure.service.local import LOCAL_SPEC, Ensemble, RedisServer, SparkCluster, Topology, run_demo, run_up
from tenure.service.replica import ReplicaSpec

__all__ = ["demo", "redis", "spark", "up", "zk"]


def _announce(address: str) -> None:
    """The one line of a foreground daemon's stdout: where to reach it, flushed for a script that waits on it."""
    click.echo(address, nl=True)
    sys.stdout.flush()


@click.command()
@click.option("--servers", type=click.IntRange(1, 3), default=3, envvar="TENURE_ZK_SERVERS", show_default=True,
              help="Ensemble size: 1 (standalone) or 3.")
@click.option("--port", type=int, default=2181, envvar="TENURE_ZK_PORT", show_default=True,
              help="First client port; servers use PORT, PORT+1, …")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path(".tenure/zk"),
              envvar="TENURE_ZK_DIR", show_default=True, help="Data and logs, one folder per server.")
@click.option("--tick-ms", type=click.IntRange(100, 10000), default=Ensemble.DEFAULT_TICK_MS,
              envvar="TENURE_ZK_TICK_MS", show_default=True,
              help="ZooKeeper tickTime. Sessions expire on tick boundaries, so a crashed leader is noticed up to "
              "1.5 ticks after its session timeout; sessions of 2–60 s (and at least 2 ticks) are granted as asked.")
def zk(servers: int, port: int, directory: Path, tick_ms: int) -> None:
    """Run a real ZooKeeper ensemble from the PySpark jars, in the foreground until SIGTERM or Ctrl-C."""
    if servers == 2:
        fail(TenureError("--servers 2 cannot tolerate any loss: use 1 or 3"))
    stop = stop_on_signals()
    try:
        Ensemble(servers=servers, port=port, directory=directory, tick_ms=tick_ms).run_until_stopped(stop, _announce)
    except TenureError as exc:
        fail(exc)


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=6379, envvar="TENURE_REDIS_PORT", show_default=True,
              help="The port it listens on (loopback only).")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path(".tenure/redis"),
              envvar="TENURE_REDIS_DIR", show_default=True, help="Its append-only file and log.")
def redis(port: int, directory: Path) -> None:
    """Run Debian's redis-server with its append-only file on and fsynced before each reply (appendfsync always),
    in the foreground until SIGTERM or Ctrl-C; prints its URL once serving (add ?prefix=<prefix> for a topic)."""
    stop = stop_on_signals()
    try:
        RedisServer(port, directory).run_until_stopped(stop, _announce)
    except TenureError as exc:
        fail(exc)


@click.command()
@click.option("--workers", type=click.IntRange(1, 16), default=2, envvar="TENURE_SPARK_WORKERS", show_default=True,
              help="Number of workers, each a JVM that runs executors.")
@click.option("--port", type=int, default=7077, envvar="TENURE_SPARK_PORT", show_default=True,
              help="The master's port; workers use PORT+1, PORT+2, …, web UIs PORT+1000, PORT+1001, …")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path(".tenure/spark"),
              envvar="TENURE_SPARK_DIR", show_default=True,
              help="Logs, the master's recovery state and the workers' work folders.")
@click.option("--cores-per-worker", type=click.IntRange(1, 64), default=1, envvar="TENURE_SPARK_CORES_PER_WORKER",
              show_default=True, help="Cores each worker offers to executors.")
@click.option("--worker-memory-mb", type=click.IntRange(512), default=1024, envvar="TENURE_SPARK_WORKER_MEMORY_MB",
              show_default=True, help="Memory each worker offers to executors.")
def spark(workers: int, port: int, directory: Path, cores_per_worker: int, worker_memory_mb: int) -> None:
    """Run a Spark standalone cluster from the PySpark jars, in the foreground until SIGTERM or Ctrl-C."""
    stop = stop_on_signals()
    try:
        cluster = SparkCluster(workers=workers, port=port, directory=directory, cores_per_worker=cores_per_worker,
                               worker_memory_mb=worker_memory_mb)
        cluster.run_until_stopped(stop, _announce)
    except TenureError as exc:
        fail(exc)


@click.command()
@click.option("--replicas", type=click.IntRange(1, 9), default=3, envvar="TENURE_UP_REPLICAS", show_default=True)
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path(".tenure/up"),
              envvar="TENURE_UP_DIR", show_default=True, help="ZooKeeper data, the data root and per-process logs.")
@setting_option("career", envvar=True)
@setting_option("group", envvar=True)
@setting_option("session_timeout_s", default=LOCAL_SPEC["session_timeout_s"])
@setting_option("handover_timeout_s", default=LOCAL_SPEC["handover_timeout_s"])
@setting_option("standby")
@click.option("--queues", type=click.IntRange(min=1), default=None, envvar="TENURE_QUEUES",
              help="The topic's number of queues, for the replicas and the producer [default: what the group or the "
                   "topic records, 1 for a new one].")
@click.option("--produce", "produce_records", type=int, default=0, show_default=True,
              help="Also run a producer of this many records (0: none).")
@click.option("--rate", type=float, default=1000.0, show_default=True, help="Producer records per second.")
@click.option("--redis", is_flag=True, envvar="TENURE_UP_REDIS",
              help="Read (and produce into) a Redis topic on an embedded Redis started beside the ensemble "
                   "(append-only file, appendfsync always; its prefix the group) instead of a queue folder.")
@spark_cluster_option
def up(replicas: int, directory: Path, career: str, group: str, session_timeout_s: float,
       handover_timeout_s: float, standby: str, queues: int | None, produce_records: int, rate: float, redis: bool,
       spark_workers: int) -> None:
    """Run the compose topology as local processes: a 3-server ensemble, N replicas (on a topic of --queues
    queues, in a folder or on an embedded Redis), optionally a producer."""
    spec = ReplicaSpec(career=career, group=group, session_timeout_s=session_timeout_s,
                       handover_timeout_s=handover_timeout_s, standby=standby)
    if queues is not None:
        spec |= ReplicaSpec(queues=queues)
    topology = Topology(directory, replicas=replicas, spec=spec, spark_workers=spark_workers, redis=redis)
    producer = ["--records", str(produce_records), "--keys", "50", "--rate", f"{rate:g}",
                *(["--queues", str(queues)] if queues is not None else [])] if produce_records else None
    log_to_file(topology.logs / "up.log")
    try:
        sys.exit(run_up(topology, producer_args=producer))
    except TenureError as exc:
        fail(exc)


@click.command()
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path(".tenure/demo"),
              show_default=True, help="Wiped and re-created: ZooKeeper data, data root, logs.")
@click.option("--records", type=click.IntRange(min=100), default=20000, show_default=True)
@click.option("--rate", type=click.FloatRange(min=1), default=2000.0, show_default=True)
@setting_option("career")
@click.option("--redis", is_flag=True, help="The topic on an embedded Redis (as `tenure up --redis`) instead of a "
              "queue folder; audited with the group's commit records before Redis stops.")
@spark_cluster_option
def demo(directory: Path, records: int, rate: float, career: str, redis: bool, spark_workers: int) -> None:
    """The README's main job: 3 replicas and a producer, the leader SIGKILLed midway, then `verify`."""
    log_to_file(directory / "logs" / "demo.log")  # opened at its first event, once the demo has wiped the folder
    try:
        sys.exit(run_demo(directory, records=records, rate=rate, career=career, spark_workers=spark_workers,
                          redis=redis))
    except TenureError as exc:
        fail(exc)
