"""Operators' commands against a running deployment: ``tenure status``, ``history``, ``verify``, ``produce``,
``handover``, ``drain``/``undrain`` and ``groups``."""

from __future__ import annotations

import functools
import json
import signal
import sys
import threading
from pathlib import Path

import click

from tenure.career.identity import read_topic
from tenure.career.queue import DEFAULT_MAX_LINE_BYTES
from tenure.career.redis_queue import RedisTopic
from tenure.errors import TenureError
from tenure.service import ops
from tenure.service._signals import on_signals
from tenure.service.cli._root import ZkTarget, fail, zk_target

__all__ = ["drain_command", "groups", "handover", "history", "produce", "replay", "status", "undrain_command",
           "verify"]

_queues_option = click.option(
    "--queues", type=click.IntRange(min=1), default=None, envvar="TENURE_QUEUES",
    help="The topic's number of queues, checked against its _topic.json (a new topic is created with it) "
         "[default: the topic's, 1 for a new one].")


_queue_option = click.option(
    "--queue", type=click.IntRange(min=0), default=None,
    help="In a group of several queues, the queue to act on (0 to N-1); optional (queue 0) in a group of one.")


@click.command()
@click.option("--data-root", type=click.Path(path_type=Path), default=None, envvar="TENURE_DATA_ROOT",
              help="The queue folder: files go to its landing/ (or give --queue-url).")
@click.option("--queue-url", "queue_url", default=None, envvar="TENURE_QUEUE_URL", metavar="URL",
              help="A Redis topic to write to instead, redis://host:port[/db]?prefix=<prefix>: each record is an "
                   "entry of its key's stream <prefix>:<k>, added with pipelined XADDs (docs/operating/redis.md).")
@click.option("--records", type=click.IntRange(min=0), default=10000, show_default=True,
              help="Distinct good records to write (duplicates and bad lines come on top).")
@click.option("--keys", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Lines per second (default: as fast as the disk allows).")
@click.option("--duplicates", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Probability, after each record, of repeating an earlier one.")
@click.option("--bad", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Probability, after each record, of a bad line (each class in turn).")
@_queues_option
@click.option("--misroute", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Probability that a record goes to another queue than its key's, to be quarantined there as "
                   "wrong_queue (a topic of several queues; for tests).")
@click.option("--seed", type=int, default=None, help="Makes ids, keys, seqs and payloads reproducible.")
@click.option("--max-line-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_LINE_BYTES, show_default=True,
              envvar="TENURE_MAX_LINE_BYTES", help="Size of the injected oversized lines; match the pipeline.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def produce(data_root: Path | None, queue_url: str | None, records: int, keys: int, rate: float | None,
            duplicates: float, bad: float, queues: int | None, misroute: float, seed: int | None,
            max_line_bytes: int, as_json: bool) -> None:
    """Write records into the landing/ of each one's queue (DATA_ROOT/landing/ for a topic of one queue) as
    atomically renamed, fsynced JSON Lines files, or into a Redis topic's streams (--queue-url)."""
    stop = threading.Event()
    on_signals(lambda _signum: stop.set(), signal.SIGTERM)
    try:
        if (data_root is None) == (queue_url is None):
            raise TenureError("give the queue to write to: --data-root D (a queue folder) or --queue-url redis://… "
                              "(a Redis topic), one of the two")
        target = RedisTopic.parse(queue_url) if queue_url is not None else data_root
        assert target is not None
        summary = ops.produce(target, records=records, keys=keys, rate=rate, duplicates=duplicates,
                             bad=bad, misroute=misroute, queues=queues, seed=seed, stop=stop,
                             max_line_bytes=max_line_bytes)
    except ValueError as exc:  # a flag that cannot work with this topic (--misroute with one queue)
        fail(TenureError(str(exc)))
    except TenureError as exc:
        fail(exc)
    click.echo(summary.to_json() if as_json else summary.render())
    sys.exit(130 if summary.interrupted else 0)


@click.command()
@click.option("--data-root", type=click.Path(path_type=Path), required=True, envvar="TENURE_DATA_ROOT")
@click.option("--max-line-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_LINE_BYTES, show_default=True,
              envvar="TENURE_MAX_LINE_BYTES", help="The pipeline's line size limit.")
@click.option("--queue-dir", type=click.Path(path_type=Path), default=None, envvar="TENURE_QUEUE_DIR",
              help="The shared queue (landing/, archive/) the group reads, if not the data root.")
@click.option("--queue-url", default=None, envvar="TENURE_QUEUE_URL", metavar="URL",
              help="The Redis topic the group reads instead of a queue folder (redis://host:port[/db]?prefix=P); "
                   "with --zk and --group, the trim points and committed positions of its commit records tell "
                   "trimmed entries from lost ones.")
@_queues_option
@click.option("--allow-empty", is_flag=True, help="Pass when the queue holds no valid id (by default that fails: "
              "nothing was audited).")
@click.option("--ignore-field", "ignore_fields", multiple=True, type=click.Choice(["ts", "payload"]),
              help="Do not compare this field of written rows with the queue (repeatable): for a row function "
                   "or transform that rewrites it.")
# verify's --group is the audit's own (it names the group whose marks the audit reads, with or without --zk),
# so it stays here, between the options it is listed among, rather than in zk_target.
@click.option("--group", default=None, envvar="TENURE_GROUP",
              help="The consumer group whose consumption marks tell a queue file read from one not read yet "
                   "[default: the only group with marks in the queue, else default].")
@click.option("--allow-waiting", is_flag=True, help="Pass while records wait in queue files the group has not "
              "read yet: for an audit of a live system (lost records still fail).")
@zk_target(required=False, group=False, zk_envvar=None,
           zk_help="ZooKeeper connect string: also fail on output above the group's committed batch (needs --group; "
                   "not read from TENURE_ZK, so the check is asked for explicitly).")
@click.option("--max-retry-age-s", type=click.FloatRange(min=0), default=None,
              help="Fail when a record has been held for retry longer than this since its first failure.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def verify(data_root: Path, max_line_bytes: int, queue_dir: Path | None, queue_url: str | None, queues: int | None,
           allow_empty: bool, ignore_fields: tuple[str, ...], group: str | None, allow_waiting: bool,
           target: ZkTarget | None, max_retry_age_s: float | None, as_json: bool) -> None:
    """Audit exactly-once, content, per-key order and, in a topic of several queues, routing: exit 1 on any
    violation or an empty queue, 2 on a bad path or flag."""
    fields = [f for f in ops.CONTENT_FIELDS if f not in ignore_fields]
    audit = functools.partial(ops.verify, data_root, max_line_bytes=max_line_bytes, queue_dir=queue_dir,
                              allow_empty=allow_empty, content_fields=fields, group=group,
                              allow_waiting=allow_waiting, max_retry_age_s=max_retry_age_s, queues=queues,
                              queue_url=queue_url)
    try:
        if target is not None and group is None:
            raise TenureError("--zk needs --group: name the group whose committed batch verify should check")
        if queue_url is not None:
            if queue_dir is not None:
                raise TenureError(f"--queue-dir {queue_dir} and --queue-url name two topics: give the one the group "
                                  "reads")
            if target is None or group is None:
                report = audit()
            else:
                with target.connected(read_only=True) as client:
                    report = audit(commit_records=ops.GroupCommits(client, group))
            click.echo(report.to_json() if as_json else report.render())
            sys.exit(0 if report.ok else 1)
        ops.check_data_root(data_root, queue_dir)
        topic = read_topic(queue_dir or data_root, queues)  # another number of queues is refused before the audit
        if target is None or group is None:
            report = audit()
        else:
            with target.connected(read_only=True) as client:
                ops.check_group_data(client, group, data_root, queue_dir)  # the group's data, not another's
                count = topic.queues if topic is not None else queues or 1
                ops.read_committed_batches(client, group, count)  # a wrong group fails now, not after the audit
                # Read again once the output is read: a batch published during the audit is then covered.
                report = audit(committed_batch=lambda: ops.read_committed_batches(client, group, count))
    except TenureError as exc:
        fail(exc)
    click.echo(report.to_json() if as_json else report.render())
    sys.exit(0 if report.ok else 1)


@click.command()
@click.option("--data-root", type=click.Path(path_type=Path, file_okay=False, exists=True), required=True,
              envvar="TENURE_DATA_ROOT")
@click.option("--queue-dir", type=click.Path(path_type=Path, file_okay=False), default=None, envvar="TENURE_QUEUE_DIR",
              help="The shared queue the group reads, if not the data root (the leader's wake-up goes there).")
@click.option("--batch", "batches", type=click.IntRange(min=0), multiple=True, required=True,
              help="A set-aside batch to replay (repeatable): its number in set-aside/batch-<B>-manifest.json.")
@click.option("--queue", type=click.IntRange(min=0), default=None,
              help="In a topic of several queues, the queue whose set-aside batches these are "
                   "(set-aside/queue=<K>/); required there.")
@click.option("--queue-url", default=None, envvar="TENURE_QUEUE_URL", metavar="URL",
              help="The Redis topic the group reads, if it reads one (redis://host:port[/db]?prefix=P): its number "
                   "of queues is read from it.")
def replay(data_root: Path, queue_dir: Path | None, batches: tuple[int, ...], queue: int | None,
           queue_url: str | None) -> None:
    """Write set-aside records into the output: the leader's next batch adds them, past their keys' order marks,
    once (fix what made them fail first)."""
    try:
        requested = ops.request_replay(data_root, list(batches), queue_dir=queue_dir, queue=queue,
                                       queue_url=queue_url)
    except TenureError as exc:
        fail(exc)
    click.echo(requested.render())


@click.command()
@zk_target()
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(target: ZkTarget, as_json: bool) -> None:
    """Show the group's leader, epoch, contenders in line, last commit, and the groups on its queue with their lag."""
    try:
        ops.show_status(target.hosts, target.group_name, as_json=as_json, credential=target.credential)
    except TenureError as exc:
        fail(exc)


@click.command()
@zk_target(zk_help="ZooKeeper connect string.")
@_queue_option
@click.option("--last", type=click.IntRange(min=1), default=None, help="Only the last N terms (of each queue).")
@click.option("--data-root", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Also show the Delta versions of the data root's table/ that each term's batches became.")
@click.option("--json", "as_json", is_flag=True, help="Print the terms as JSON.")
def history(target: ZkTarget, queue: int | None, last: int | None, data_root: Path | None, as_json: bool) -> None:
    """The group's last terms (up to 100 per queue): epoch, leader, when, how long, how it ended, first commit, gap,
    counts; in a group of several queues, those of --queue K, or of every queue, each term labelled with its queue."""
    try:
        ops.show_history(target.hosts, target.group_name, as_json=as_json, last=last, credential=target.credential,
                         data_root=data_root, queue=queue)
    except TenureError as exc:
        fail(exc)


@click.command()
@zk_target(writes=True)
@_queue_option
@click.option("--to", "to", default=None, help="The replica to lead next: in the election and ready "
              "(default: whoever is next in line).")
@click.option("--wait", "wait", is_flag=True, help="Return once the new leader has committed; print the gap.")
@click.option("--timeout-s", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="The request expires after this long (and --wait gives up).")
def handover(target: ZkTarget, queue: int | None, to: str | None, wait: bool, timeout_s: float) -> None:
    """Ask the leader (of --queue K, in a group of several queues) to hand over cleanly, to --to REPLICA or the next
    in line; it rejoins at the back."""
    group = target.group_name
    try:
        with target.connected() as client:
            queues = ops.group_queue_count(client, group)
            where = {"queue": ops.choose_queue(group, queue, queues), "queues": queues}
            request = ops.request_handover(client, group, to=to, timeout_s=timeout_s, credential=target.credential,
                                           **where)
            of_queue = "" if queues == 1 else f"queue {where['queue']}, "
            click.echo(f"handover of {of_queue}epoch {request.epoch} to {to or 'the next in line'} requested")
            done = ops.wait_handover(client, group, request, timeout_s=timeout_s, **where) if wait else None
    except TenureError as exc:
        fail(exc)
    if not wait:
        return
    if done is None:
        click.echo(f"no new leader committed within {timeout_s:g} s: see `tenure status` and the leader's log",
                   err=True)
        sys.exit(1)
    gap = "unknown" if done.gap_s is None else f"{done.gap_s:.2f} s"
    was = f" after {done.old.replica_id}'s last" if done.old else ""
    click.echo(f"{done.new.replica_id} leads (epoch {done.new.epoch}); its first commit came {gap}{was}")


@click.command(name="drain")
@click.argument("replica")
@zk_target(writes=True)
@click.option("--reason", default="", help="Why, for `tenure status` and the replica's /readyz.")
@click.option("--force", is_flag=True, help="Drain even the last replica in the election (no leader after).")
@click.option("--wait-s", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="How long to wait for the replica to leave the election (0: do not wait).")
def drain_command(replica: str, target: ZkTarget, reason: str, force: bool, wait_s: float) -> None:
    """Take REPLICA out of the election for maintenance: it hands over first if it leads, stays warm, keeps
    serving /metrics and /livez, and reports not ready on /readyz until `tenure undrain`."""
    group = target.group_name
    try:
        with target.connected() as client:
            ops.drain(client, group, replica, reason=reason, force=force, credential=target.credential)
            left = wait_s == 0 or ops.wait_in_election(client, group, replica, in_election=False, timeout_s=wait_s)
    except TenureError as exc:
        fail(exc)
    if not left:
        click.echo(f"{replica} is drained but still in the election after {wait_s:g} s: is it running?", err=True)
        sys.exit(1)
    why = f" ({reason})" if reason else ""
    click.echo(f"{replica} drained{why}" + ("" if wait_s == 0 else ": out of the election"))


@click.command(name="undrain")
@click.argument("replica")
@zk_target(writes=True)
@click.option("--wait-s", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="How long to wait for the replica to join the election again (0: do not wait).")
def undrain_command(replica: str, target: ZkTarget, wait_s: float) -> None:
    """Let a drained REPLICA join the election again, at the back of the line."""
    group = target.group_name
    try:
        with target.connected() as client:
            ops.undrain(client, group, replica)
            joined = wait_s == 0 or ops.wait_in_election(client, group, replica, in_election=True, timeout_s=wait_s)
    except TenureError as exc:
        fail(exc)
    if not joined:
        click.echo(f"{replica} is undrained but not in the election after {wait_s:g} s: is it running?", err=True)
        sys.exit(1)
    click.echo(f"{replica} undrained" + ("" if wait_s == 0 else ": back in the election"))


@click.group()
def groups() -> None:
    """Consumer groups sharing one queue: list them with their lag, or remove one."""


_queue_dir_option = click.option(
    "--queue-dir", type=click.Path(path_type=Path), required=True, envvar="TENURE_QUEUE_DIR",
    help="The shared queue folder, as the replicas see it (a single group's: its data root).")


@groups.command("list")
@zk_target(group=False, writes=True, after_zk=(_queue_dir_option,))
@click.option("--json", "as_json", is_flag=True, help="Print the groups as JSON.")
def groups_list(target: ZkTarget, queue_dir: Path, as_json: bool) -> None:
    """List the groups on the queue with their data roots and lag (landing files not yet consumed)."""
    try:
        with target.connected() as client:
            report = ops.queue_report(client, ops.queue_key(queue_dir))
    except TenureError as exc:
        fail(exc)
    click.echo(json.dumps(report, indent=2, sort_keys=True) if as_json else ops.format_groups(report), nl=as_json)


@groups.command("remove")
@click.argument("group")
@zk_target(group=False, writes=True, after_zk=(_queue_dir_option,))
@click.option("--force", is_flag=True, help="Remove it even though replicas of the group still run.")
def groups_remove(group: str, target: ZkTarget, queue_dir: Path, force: bool) -> None:
    """Unregister GROUP from the queue and delete its consumption marks, releasing what it held back."""
    try:
        with target.connected() as client:
            entry, marks = ops.remove_group(client, queue_dir, group, force=force)
    except TenureError as exc:
        fail(exc)
    click.echo(f"removed group {group} from queue {queue_dir} (data root {entry.data_root}; {marks} marks "
               "deleted): the other groups' leaders archive what it held back")
