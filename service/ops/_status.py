"""``tenure status``: a group's leader, epoch, contenders, last commit and queue groups, as a table or JSON."""

from __future__ import annotations

import io
import json
import shutil
import sys
import time
from dataclasses import replace
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from tenure.election import DigestCredential, GroupStatus, connected, group_queues, group_status
from tenure.service.ops._groups import format_groups, queue_report
from tenure.service.ops._history import format_history

__all__ = ["fetch_status", "format_status_json", "format_status_table", "show_status"]


def fetch_status(zk_hosts: str, group: str, *, timeout_s: float = 10.0,
                 credential: DigestCredential | None = None) -> GroupStatus:
    """Connect, read the group's status and the groups sharing its queue (with their lag), disconnect.

    Raises:
        ElectionError: ZooKeeper cannot be reached within ``timeout_s`` (the message names the hosts).
    """
    with connected(zk_hosts, timeout_s=timeout_s, credential=credential, read_only=True) as client:
        status = group_status(client, group)
        return replace(status, queues=[queue_report(client, queue) for queue in group_queues(client, group)])


def format_status_json(status: GroupStatus) -> str:
    """Indented JSON: group, leader, epoch, contenders (line order), commit, commit_version, handover, queues."""
    return json.dumps(status.to_json(), indent=2, sort_keys=True)


def _ago(started_at: float, now: float) -> str:
    if started_at <= 0:
        return "-"
    seconds = max(0, int(now - started_at))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _record_line(record: dict[str, Any] | None) -> str:
    if record is None:
        return "none"
    return "  ".join(f"{key}={record[key]}" for key in sorted(record))


def format_status_table(status: GroupStatus, *, width: int = 120, now: float | None = None) -> str:
    """The human view: a headline naming the leader and epoch, a table of contenders, commit and handover."""
    now = time.time() if now is None else now
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None, highlight=False)
    leader = status.leader
    if leader is None:
        console.print(f"group {status.group}: no leader (no contenders)")
    else:
        name = leader.identity.replica_id if leader.identity else "?"
        console.print(f"group {status.group}: leader {name}, epoch {leader.epoch}, {len(status.contenders)} "
                      f"contender{'s' if len(status.contenders) != 1 else ''}")
    if status.contenders:
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for column in ("#", "replica", "role", "epoch", "seq", "session", "host", "pid", "up", "metrics"):
            table.add_column(column, no_wrap=True, overflow="fold")
        for position, c in enumerate(status.contenders):
            ident = c.identity
            table.add_row(str(position), ident.replica_id if ident else "?", "leader" if position == 0 else "follower",
                          str(c.epoch), str(c.sequence), f"0x{c.session_id:x}", ident.host if ident else "",
                          str(ident.pid) if ident else "", _ago(ident.started_at, now) if ident else "",
                          ident.metrics_url if ident else "")
        console.print(table)
    console.print(f"last commit (version {status.commit_version}): {_record_line(status.commit)}")
    console.print(f"handover: {_record_line(None if status.handover is None else status.handover.to_json())}")
    for d in status.drained:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.since))
        console.print(f"drained: {d.replica_id} since {since} ({_ago(d.since, now)}): {d.reason or 'no reason given'}")
    text = buffer.getvalue()
    if status.history:
        text += f"last {len(status.history)} terms (tenure history for more):\n" + format_history(status.history,
                                                                                                   now=now, width=width)
    if not status.queues:
        return text + "queue: not registered (a Spark replica registers its group at start-up)\n"
    return text + "".join(format_groups(report) for report in status.queues)


def show_status(zk_hosts: str, group: str, *, as_json: bool = False, timeout_s: float = 10.0,
                credential: DigestCredential | None = None, out: TextIO | None = None) -> GroupStatus:
    """Print the status of ``group`` to ``out`` (stdout): a table, or JSON with ``as_json``; return it.

    Raises:
        ElectionError: ZooKeeper cannot be reached (print it as one line and exit non-zero).
    """
    status = fetch_status(zk_hosts, group, timeout_s=timeout_s, credential=credential)
    stream = sys.stdout if out is None else out
    width = max(120, shutil.get_terminal_size((120, 24)).columns)
    stream.write(format_status_json(status) + "\n" if as_json else format_status_table(status, width=width))
    stream.flush()
    return status
