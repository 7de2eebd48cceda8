"""The ``tenure`` command line: one entry point, flags also settable as ``TENURE_*`` environment variables."""

from __future__ import annotations

import functools
import importlib.util
import json
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Literal, get_args, get_origin

import click
import structlog
from pydantic_core import PydanticUndefined

from career.queue import DEFAULT_MAX_LINE_BYTES
from election import DigestCredential, TenureError
from service import __version__, ops
from service.local import Ensemble, SparkCluster, Topology, run_demo, run_up
from service.replica import ReplicaConfig, configure_logging, load_config, log_to_file, run_replica

__all__ = ["main"]

_log = structlog.get_logger("tenure.cli")


def _fail(exc: TenureError, code: int = 2) -> None:
    """One clear line on stderr and a non-zero exit: the convention for every fatal error."""
    click.echo(f"tenure: error: {exc}", err=True)
    sys.exit(code)


_DAEMONS = frozenset({"run", "zk", "spark"})
"""Commands whose log is their output (info on stderr); every other command is for people: its report is the
output, and its events go to a log file in the folder it owns, if any (``--log-level`` on stderr if given)."""


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="tenure")
@click.option("--log-level", default="info", envvar="TENURE_LOG_LEVEL", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="Minimum level of log events (on stderr for run, zk and spark; other commands show warnings "
                   "there unless this is given, and write their events to their folder's log, if they own one).")
@click.pass_context
def main(ctx: click.Context, log_level: str) -> None:
    """tenure: a leader-elected, single-writer Spark consumer with fenced exactly-once output."""
    chosen = ctx.get_parameter_source("log_level") is not click.core.ParameterSource.DEFAULT
    quiet = ctx.invoked_subcommand not in _DAEMONS and not chosen
    configure_logging(log_level, stderr_level="warning" if quiet else None)


def _stop_on_signals() -> threading.Event:
    """An event that SIGTERM and SIGINT set: a foreground command's loop waits on it, then stops in order."""
    stop = threading.Event()

    def _on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return stop


@main.command()
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
        _fail(TenureError("--servers 2 cannot tolerate any loss: use 1 or 3"))
    stop = _stop_on_signals()
    ensemble = Ensemble(servers=servers, port=port, directory=directory, tick_ms=tick_ms)
    try:
        ensemble.start()
    except TenureError as exc:
        ensemble.stop()
        _fail(exc)
    click.echo(ensemble.connect_string, nl=True)
    sys.stdout.flush()
    reported: set[str] = set()
    try:
        while not stop.wait(0.5):
            for s in ensemble.dead_servers():
                if s.name not in reported:
                    reported.add(s.name)
                    _log.error("zk_server_died", server=s.name, port=s.client_port,
                               exit_code=s.process.returncode if s.process else None,
                               log=str(s.directory / "server.log"))
    finally:
        ensemble.stop()


@main.command()
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
    stop = _stop_on_signals()
    try:
        cluster = SparkCluster(workers=workers, port=port, directory=directory, cores_per_worker=cores_per_worker,
                               worker_memory_mb=worker_memory_mb)
        cluster.start()
    except TenureError as exc:
        _fail(exc)  # start() has stopped whatever it launched
    click.echo(cluster.master_url, nl=True)
    sys.stdout.flush()
    reported: set[str] = set()
    try:
        while not stop.wait(0.5):
            for name in cluster.dead():
                if name not in reported:
                    reported.add(name)
                    d = cluster.master if name == "master" else cluster.worker(name)
                    _log.error("spark_process_died", process=name, port=d.port,
                               exit_code=d.process.returncode if d.process else None, log=str(d.log))
    finally:
        cluster.stop()


def _replica_options(command: Callable[..., None]) -> Callable[..., None]:
    """One ``--flag`` (and ``TENURE_FLAG`` variable) per ``ReplicaConfig`` field, help from its description.

    Defaults stay in the model: a flag left out is None here, so the TOML file and the model fill it.
    """
    for name, field in reversed(list(ReplicaConfig.model_fields.items())):
        annotation = field.annotation
        choices = get_args(annotation) if get_origin(annotation) is Literal else None
        base = next((t for t in (int, float, Path) if annotation is t or t in get_args(annotation)), str)
        click_type: Any = click.Choice(choices) if choices else base
        default = field.get_default(call_default_factory=False) if field.default_factory is None else None
        help_text = field.description or ""
        if default not in (None, PydanticUndefined):
            help_text += f" [default: {default}]"
        command = click.option(f"--{name.replace('_', '-')}", name, type=click_type, default=None,
                               envvar=f"TENURE_{name.upper()}", help=help_text)(command)
    return command


@main.command()
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              envvar="TENURE_CONFIG", help="A TOML file of settings (field names as keys); flags and "
              "TENURE_* variables override it.")
@_replica_options
def run(config_file: Path | None, **overrides: Any) -> None:
    """Run one replica in the foreground; SIGTERM hands over gracefully, then exits 0."""
    try:
        config = load_config(overrides, config_file)
        code = run_replica(config)
    except TenureError as exc:
        _fail(exc)
    sys.exit(code)


_spark_cluster_option = click.option(
    "--spark-cluster", "spark_workers", type=click.IntRange(0, 8), default=0, envvar="TENURE_SPARK_CLUSTER",
    show_default=True, help="Run the leader on an embedded Spark standalone cluster of this many workers "
    "(0: local Spark in each replica).")


@main.command()
@click.option("--replicas", type=click.IntRange(1, 9), default=3, envvar="TENURE_UP_REPLICAS", show_default=True)
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path(".tenure/up"),
              envvar="TENURE_UP_DIR", show_default=True, help="ZooKeeper data, the data root and per-process logs.")
@click.option("--career", default="spark", envvar="TENURE_CAREER", show_default=True,
              help="spark, counter, or package.module:factory.")
@click.option("--group", default="default", envvar="TENURE_GROUP", show_default=True)
@click.option("--session-timeout-s", type=float, default=6.0, show_default=True)
@click.option("--handover-timeout-s", type=float, default=3.0, show_default=True)
@click.option("--standby", type=click.Choice(["warm", "cold"]), default="warm", show_default=True)
@click.option("--produce", "produce_records", type=int, default=0, show_default=True,
              help="Also run a producer of this many records (0: none).")
@click.option("--rate", type=float, default=1000.0, show_default=True, help="Producer records per second.")
@_spark_cluster_option
def up(replicas: int, directory: Path, career: str, group: str, session_timeout_s: float,
       handover_timeout_s: float, standby: str, produce_records: int, rate: float, spark_workers: int) -> None:
    """Run the compose topology as local processes: a 3-server ensemble, N replicas, optionally a producer."""
    topology = Topology(directory, replicas=replicas, group=group, career=career,
                        session_timeout_s=session_timeout_s, handover_timeout_s=handover_timeout_s,
                        replica_args=["--standby", standby], spark_workers=spark_workers)
    producer = ["--records", str(produce_records), "--keys", "50", "--rate", f"{rate:g}"] if produce_records else None
    log_to_file(topology.logs / "up.log")
    try:
        sys.exit(run_up(topology, producer_args=producer))
    except TenureError as exc:
        _fail(exc)


@main.command()
@click.option("--data-root", type=click.Path(path_type=Path), required=True, envvar="TENURE_DATA_ROOT")
@click.option("--records", type=click.IntRange(min=0), default=10000, show_default=True,
              help="Distinct good records to write (duplicates and bad lines come on top).")
@click.option("--keys", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Lines per second (default: as fast as the disk allows).")
@click.option("--duplicates", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Probability, after each record, of repeating an earlier one.")
@click.option("--bad", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Probability, after each record, of a bad line (each class in turn).")
@click.option("--seed", type=int, default=None, help="Makes ids, keys, seqs and payloads reproducible.")
@click.option("--max-line-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_LINE_BYTES, show_default=True,
              envvar="TENURE_MAX_LINE_BYTES", help="Size of the injected oversized lines; match the pipeline.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def produce(data_root: Path, records: int, keys: int, rate: float | None, duplicates: float, bad: float,
            seed: int | None, max_line_bytes: int, as_json: bool) -> None:
    """Write records into DATA_ROOT/landing/ as atomically renamed, fsynced JSON Lines files."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _s, _f: stop.set())
    try:
        summary = ops.produce(data_root, records=records, keys=keys, rate=rate, duplicates=duplicates,
                             bad=bad, seed=seed, stop=stop, max_line_bytes=max_line_bytes)
    except TenureError as exc:
        _fail(exc)
    click.echo(summary.to_json() if as_json else summary.render())
    sys.exit(130 if summary.interrupted else 0)


@main.command()
@click.option("--data-root", type=click.Path(path_type=Path), required=True, envvar="TENURE_DATA_ROOT")
@click.option("--max-line-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_LINE_BYTES, show_default=True,
              envvar="TENURE_MAX_LINE_BYTES", help="The pipeline's line size limit.")
@click.option("--queue-dir", type=click.Path(path_type=Path), default=None, envvar="TENURE_QUEUE_DIR",
              help="The shared queue (landing/, archive/) the group reads, if not the data root.")
@click.option("--allow-empty", is_flag=True, help="Pass when the queue holds no valid id (by default that fails: "
              "nothing was audited).")
@click.option("--ignore-field", "ignore_fields", multiple=True, type=click.Choice(["ts", "payload"]),
              help="Do not compare this field of written rows with the queue (repeatable): for a row function "
                   "or transform that rewrites it.")
@click.option("--group", default=None, envvar="TENURE_GROUP",
              help="The consumer group whose consumption marks tell a queue file read from one not read yet "
                   "[default: the only group with marks in the queue, else default].")
@click.option("--allow-waiting", is_flag=True, help="Pass while records wait in queue files the group has not "
              "read yet: for an audit of a live system (lost records still fail).")
@click.option("--zk", default=None, help="ZooKeeper connect string: also fail on output above the group's "
              "committed batch (needs --group; not read from TENURE_ZK, so the check is asked for explicitly).")
@click.option("--zk-auth", default=None, envvar="TENURE_ZK_AUTH", help="user:password, if reads need it.")
@click.option("--max-retry-age-s", type=click.FloatRange(min=0), default=None,
              help="Fail when a record has been held for retry longer than this since its first failure.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def verify(data_root: Path, max_line_bytes: int, queue_dir: Path | None, allow_empty: bool,
           ignore_fields: tuple[str, ...], group: str | None, allow_waiting: bool, zk: str | None,
           zk_auth: str | None, max_retry_age_s: float | None, as_json: bool) -> None:
    """Audit exactly-once, content and per-key order: exit 1 on any violation or an empty queue, 2 on a bad path
    or flag."""
    fields = [f for f in ops.CONTENT_FIELDS if f not in ignore_fields]
    audit = functools.partial(ops.verify, data_root, max_line_bytes=max_line_bytes, queue_dir=queue_dir,
                              allow_empty=allow_empty, content_fields=fields, group=group,
                              allow_waiting=allow_waiting, max_retry_age_s=max_retry_age_s)
    try:
        ops.check_data_root(data_root, queue_dir)
        if zk is None:
            report = audit()
        elif group is None:
            raise TenureError("--zk needs --group: name the group whose committed batch verify should check")
        else:
            with ops.connected(zk, auth_data=[("digest", zk_auth)] if zk_auth else None, read_only=True) as client:
                ops.read_committed_batch(client, group)  # a wrong group fails now, not after the audit
                # Read again once the output is read: a batch published during the audit is then covered.
                report = audit(committed_batch=lambda: ops.read_committed_batch(client, group))
    except TenureError as exc:
        _fail(exc)
    click.echo(report.to_json() if as_json else report.render())
    sys.exit(0 if report.ok else 1)


@main.command()
@click.option("--zk", required=True, envvar="TENURE_ZK", help="ZooKeeper connect string.")
@click.option("--group", default="default", envvar="TENURE_GROUP", show_default=True)
@click.option("--zk-auth", default=None, envvar="TENURE_ZK_AUTH", help="user:password, if reads need it.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(zk: str, group: str, zk_auth: str | None, as_json: bool) -> None:
    """Show the group's leader, epoch, contenders in line, last commit, and the groups on its queue with their lag."""
    from service.ops import show_status

    try:
        show_status(zk, group, as_json=as_json, auth_data=[("digest", zk_auth)] if zk_auth else None)
    except TenureError as exc:
        _fail(exc)


@main.command()
@click.option("--zk", required=True, envvar="TENURE_ZK", help="ZooKeeper connect string.")
@click.option("--group", default="default", envvar="TENURE_GROUP", show_default=True)
@click.option("--zk-auth", default=None, envvar="TENURE_ZK_AUTH", help="user:password, if reads need it.")
@click.option("--last", type=click.IntRange(min=1), default=None, help="Only the last N terms.")
@click.option("--json", "as_json", is_flag=True, help="Print the terms as JSON.")
def history(zk: str, group: str, zk_auth: str | None, last: int | None, as_json: bool) -> None:
    """The group's last terms (up to 100): epoch, leader, when, how long, how it ended, first commit, gap, counts."""
    try:
        ops.show_history(zk, group, as_json=as_json, last=last, auth_data=[("digest", zk_auth)] if zk_auth else None)
    except TenureError as exc:
        _fail(exc)


def _credential_acl(zk_auth: str | None) -> tuple[list[tuple[str, str]] | None, list[Any] | None]:
    """auth_data and the ACL a write creates nodes with, from ``--zk-auth user:password``."""
    if not zk_auth:
        return None, None
    user, _, password = zk_auth.partition(":")
    credential = DigestCredential(user, password)
    return credential.auth_data(), credential.acls()


@main.command()
@click.option("--zk", required=True, envvar="TENURE_ZK", help="ZooKeeper connect string.")
@click.option("--group", default="default", envvar="TENURE_GROUP", show_default=True)
@click.option("--zk-auth", default=None, envvar="TENURE_ZK_AUTH", help="user:password (the service's).")
@click.option("--to", "target", default=None, help="The replica to lead next: in the election and ready "
              "(default: whoever is next in line).")
@click.option("--wait", "wait", is_flag=True, help="Return once the new leader has committed; print the gap.")
@click.option("--timeout-s", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="The request expires after this long (and --wait gives up).")
def handover(zk: str, group: str, zk_auth: str | None, target: str | None, wait: bool, timeout_s: float) -> None:
    """Ask the leader to hand over cleanly, to --to REPLICA or the next in line; it rejoins at the back."""
    try:
        auth_data, acl = _credential_acl(zk_auth)
        with ops.connected(zk, auth_data=auth_data) as client:
            request = ops.request_handover(client, group, to=target, timeout_s=timeout_s, acl=acl)
            click.echo(f"handover of epoch {request.epoch} to {target or 'the next in line'} requested")
            done = ops.wait_handover(client, group, request, timeout_s=timeout_s) if wait else None
    except TenureError as exc:
        _fail(exc)
    if not wait:
        return
    if done is None:
        click.echo(f"no new leader committed within {timeout_s:g} s: see `tenure status` and the leader's log",
                   err=True)
        sys.exit(1)
    gap = "unknown" if done.gap_s is None else f"{done.gap_s:.2f} s"
    was = f" after {done.old.replica_id}'s last" if done.old else ""
    click.echo(f"{done.new.replica_id} leads (epoch {done.new.epoch}); its first commit came {gap}{was}")


@main.command(name="drain")
@click.argument("replica")
@click.option("--zk", required=True, envvar="TENURE_ZK", help="ZooKeeper connect string.")
@click.option("--group", default="default", envvar="TENURE_GROUP", show_default=True)
@click.option("--zk-auth", default=None, envvar="TENURE_ZK_AUTH", help="user:password (the service's).")
@click.option("--reason", default="", help="Why, for `tenure status` and the replica's /readyz.")
@click.option("--force", is_flag=True, help="Drain even the last replica in the election (no leader after).")
@click.option("--wait-s", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="How long to wait for the replica to leave the election (0: do not wait).")
def drain_command(replica: str, zk: str, group: str, zk_auth: str | None, reason: str, force: bool,
                  wait_s: float) -> None:
    """Take REPLICA out of the election for maintenance: it hands over first if it leads, stays warm, keeps
    serving /metrics and /livez, and reports not ready on /readyz until `tenure undrain`."""
    try:
        auth_data, acl = _credential_acl(zk_auth)
        with ops.connected(zk, auth_data=auth_data) as client:
            ops.drain(client, group, replica, reason=reason, force=force, acl=acl)
            left = wait_s == 0 or ops.wait_in_election(client, group, replica, in_election=False, timeout_s=wait_s)
    except TenureError as exc:
        _fail(exc)
    if not left:
        click.echo(f"{replica} is drained but still in the election after {wait_s:g} s: is it running?", err=True)
        sys.exit(1)
    why = f" ({reason})" if reason else ""
    click.echo(f"{replica} drained{why}" + ("" if wait_s == 0 else ": out of the election"))


@main.command(name="undrain")
@click.argument("replica")
@click.option("--zk", required=True, envvar="TENURE_ZK", help="ZooKeeper connect string.")
@click.option("--group", default="default", envvar="TENURE_GROUP", show_default=True)
@click.option("--zk-auth", default=None, envvar="TENURE_ZK_AUTH", help="user:password (the service's).")
@click.option("--wait-s", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="How long to wait for the replica to join the election again (0: do not wait).")
def undrain_command(replica: str, zk: str, group: str, zk_auth: str | None, wait_s: float) -> None:
    """Let a drained REPLICA join the election again, at the back of the line."""
    try:
        auth_data, _acl = _credential_acl(zk_auth)
        with ops.connected(zk, auth_data=auth_data) as client:
            ops.undrain(client, group, replica)
            joined = wait_s == 0 or ops.wait_in_election(client, group, replica, in_election=True, timeout_s=wait_s)
    except TenureError as exc:
        _fail(exc)
    if not joined:
        click.echo(f"{replica} is undrained but not in the election after {wait_s:g} s: is it running?", err=True)
        sys.exit(1)
    click.echo(f"{replica} undrained" + ("" if wait_s == 0 else ": back in the election"))


@main.group()
def groups() -> None:
    """Consumer groups sharing one queue: list them with their lag, or remove one."""


def _queue_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options every `tenure groups` command takes: where ZooKeeper is, which queue, the credential."""
    for option in reversed([
        click.option("--zk", required=True, envvar="TENURE_ZK", help="ZooKeeper connect string."),
        click.option("--queue-dir", type=click.Path(path_type=Path), required=True, envvar="TENURE_QUEUE_DIR",
                     help="The shared queue folder, as the replicas see it (a single group's: its data root)."),
        click.option("--zk-auth", default=None, envvar="TENURE_ZK_AUTH", help="user:password (the service's)."),
    ]):
        command = option(command)
    return command


@groups.command("list")
@_queue_options
@click.option("--json", "as_json", is_flag=True, help="Print the groups as JSON.")
def groups_list(zk: str, queue_dir: Path, zk_auth: str | None, as_json: bool) -> None:
    """List the groups on the queue with their data roots and lag (landing files not yet consumed)."""
    from service.ops import connected, format_groups, queue_report

    try:
        with connected(zk, auth_data=[("digest", zk_auth)] if zk_auth else None) as client:
            report = queue_report(client, queue_dir)
    except TenureError as exc:
        _fail(exc)
    click.echo(json.dumps(report, indent=2, sort_keys=True) if as_json else format_groups(report), nl=as_json)


@groups.command("remove")
@click.argument("group")
@_queue_options
@click.option("--force", is_flag=True, help="Remove it even though replicas of the group still run.")
def groups_remove(group: str, zk: str, queue_dir: Path, zk_auth: str | None, force: bool) -> None:
    """Unregister GROUP from the queue and delete its consumption marks, releasing what it held back."""
    from service.ops import connected, remove_group

    try:
        with connected(zk, auth_data=[("digest", zk_auth)] if zk_auth else None) as client:
            entry, marks = remove_group(client, queue_dir, group, force=force)
    except TenureError as exc:
        _fail(exc)
    click.echo(f"removed group {group} from queue {queue_dir} (data root {entry.data_root}; {marks} marks "
               "deleted): the other groups' leaders archive what it held back")


@main.command()
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path(".tenure/demo"),
              show_default=True, help="Wiped and re-created: ZooKeeper data, data root, logs.")
@click.option("--records", type=click.IntRange(min=100), default=20000, show_default=True)
@click.option("--rate", type=click.FloatRange(min=1), default=2000.0, show_default=True)
@click.option("--career", default="spark", show_default=True)
@_spark_cluster_option
def demo(directory: Path, records: int, rate: float, career: str, spark_workers: int) -> None:
    """The README's main job: 3 replicas and a producer, the leader SIGKILLed midway, then `verify`."""
    log_to_file(directory / "logs" / "demo.log")  # opened at its first event, once the demo has wiped the folder
    try:
        sys.exit(run_demo(directory, records=records, rate=rate, career=career, spark_workers=spark_workers))
    except TenureError as exc:
        _fail(exc)


@main.command()
@click.argument("scenarios", nargs=-1, required=True)
@click.option("--json", "json_out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write every result (figures, criteria, timeline) as JSON to this file.")
@click.option("--plot", "plot_out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also draw a PNG timeline: leadership per replica, commits, fault and heal markers.")
@click.option("--records", type=click.IntRange(min=100), default=None,
              help="Records the producer writes per scenario (Spark career). [default: 20000; 6000 with --short]")
@click.option("--career", type=click.Choice(["spark", "counter"]), default="spark", envvar="TENURE_DRILL_CAREER",
              show_default=True, help="The replicas' career; the audit is `verify` (spark) or the counter check.")
@click.option("--short", is_flag=True, help="The shortened timeline of the tests: session timeout 4 s, "
              "fewer records; the stuck-leader drills with probe timeout 3 s, stall timeout 20 s, row timeout 2 s "
              "(else the replica's defaults).")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path(".tenure/drill"),
              show_default=True, help="One folder per scenario, wiped first: ZooKeeper data, data root, logs.")
@click.option("--faults", type=click.IntRange(1, 100), default=None,
              help="chaos: how many faults, spread over the production. [default: 5]")
@click.option("--seed", type=int, default=None,
              help="chaos: draws the faults, their times and the producer's data; printed in the report. "
              "[default: drawn]")
@click.option("--spark-cluster", "spark_workers", type=click.IntRange(0, 8), default=0,
              envvar="TENURE_DRILL_SPARK_CLUSTER", show_default=True,
              help="Run the leader on an embedded Spark standalone cluster of this many workers (0: local Spark in "
              "each replica); needed by worker-loss and master-loss, which `all` then includes.")
def drill(scenarios: tuple[str, ...], json_out: Path | None, plot_out: Path | None, records: int | None,
          career: str, short: bool, directory: Path, faults: int | None, seed: int | None,
          spark_workers: int) -> None:
    """Failover drills: SCENARIO … or `all`; prints figures and PASS/FAIL per criterion, exits 1 on any FAIL.

    Scenarios: handover, targeted-handover, crash, zombie, partition, short-partition, zk-follower-loss, zk-leader-loss,
    quorum-loss, flaky-link, spark-death, cold-start, rolling-restart; with --spark-cluster W also worker-loss
    (SIGKILL a worker, W >= 2) and master-loss (SIGKILL the Spark master, restart it). Network drills need root and
    `ip netns`, and skip on a cluster.

    `stuck-leader` runs the four drills of a replica whose work hangs while its process and ZooKeeper session live
    (Spark career, the progress watchdog's default limits): frozen-jvm (the leader's JVM frozen: it gives the lock
    up and exits 4), hung-row-function (the leader's row function hangs on a socket: it stalls and exits 4),
    frozen-next-in-line (the next in line's JVM frozen: it leaves the line, then the leader is SIGTERMed and the
    healthy third takes over) and poison-batch (a batch failing on every leader is set aside after
    --max-batch-attempts terms). Each is also a scenario of its own, and part of `all`.

    `tenure drill chaos --records N --faults K [--seed S]` (alone): K seeded random faults (leader SIGKILL,
    SIGTERM, whole-tree pause, network partition, ZooKeeper server restart, injected fault points) over a steady
    production, a recovery wait after each, then a full `tenure verify` audit; exits 1 on any failed recovery
    or audit.
    """
    from service.drill import run_drills

    try:
        if plot_out is not None and importlib.util.find_spec("matplotlib") is None:
            raise TenureError("--plot needs matplotlib, which a replica's install leaves out: "
                              "pip install 'tenure[drill]' (or drop --plot)")
        if "chaos" in scenarios:
            if len(scenarios) > 1:
                raise TenureError("chaos runs alone: `tenure drill chaos --faults K …`, other scenarios separately")
            if spark_workers:
                raise TenureError("chaos runs without --spark-cluster: its partitions put replicas in network "
                                  "namespaces, out of reach of the cluster on loopback")
        elif faults is not None or seed is not None:
            raise TenureError("--faults and --seed are options of `tenure drill chaos` only")
        events = log_to_file(directory / "drill.log")
        click.echo(f"drill: events in {events}; each run's processes log under its folder's logs/")
        if "chaos" in scenarios:
            from service.drill import run_chaos

            code = run_chaos(directory=directory, records=records, faults=faults or 5, seed=seed, career=career,
                             short=short, json_out=json_out, plot_out=plot_out, echo=click.echo)
        else:
            code = run_drills(list(scenarios), directory=directory, records=records, json_out=json_out,
                              plot_out=plot_out, short=short, career=career, spark_workers=spark_workers,
                              echo=click.echo)
    except TenureError as exc:
        _fail(exc)
    sys.exit(code)
