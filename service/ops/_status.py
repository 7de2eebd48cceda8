"""``tenure status``: a group's leader, epoch, contenders, last commit and queue groups, as a table or JSON; in a
group of several queues, each queue's leader, epoch, last commit, handover request and backlog, and the queues each
replica leads."""

from __future__ import annotations

import io
import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from tenure.election import (
    DigestCredential,
    GroupStatus,
    HandoverRequest,
    OperatorRequests,
    ZooKeeperClient,
    connected,
    group_queues,
    group_status,
)
from tenure.service.ops._groups import format_groups, queue_backlogs, queue_report
from tenure.service.ops._history import format_history
from tenure.service.ops._queues import group_queue_count

__all__ = ["QueueStatus", "TopicStatus", "fetch_status", "format_status_json", "format_status_table", "show_status"]

#: What a queue's entry in ``--json`` leaves out of a ``GroupStatus``: the group's own, shown once at the top.
_GROUP_FIELDS = ("group", "queues", "drained")


@dataclass(frozen=True)
class QueueStatus:
    """One queue of a group of several: its line, commit and handover records and last terms (``status``, read as
    ``group_status`` reads a queue), the live handover request an operator made to it, and its backlog (files in
    its ``landing/`` the group has not consumed; None where the topic is not readable here)."""

    queue: int
    status: GroupStatus
    request: HandoverRequest | None = None
    backlog: int | None = None

    @property
    def leader_id(self) -> str | None:
        leader = self.status.leader
        return None if leader is None else leader.identity.replica_id if leader.identity else "?"

    def to_json(self) -> dict[str, Any]:
        shown = {k: v for k, v in self.status.to_json().items() if k not in _GROUP_FIELDS}
        return {"queue": self.queue, **shown, "handover_request": None if self.request is None else
                self.request.to_json(), "backlog": self.backlog}


@dataclass(frozen=True)
class TopicStatus(GroupStatus):
    """A group's status as ``tenure status`` reads it: the group's number of queues (``queue_count``, from what it
    is bound to) and, in a group of several, each queue's (``per_queue``). In a group of one queue the fields it has
    as a ``GroupStatus`` are that queue's, as before queues; in a group of several they keep the group's own (its
    name, drained replicas, the groups on its topic) and each queue's are in ``per_queue``.

    Whether the group is balanced (the balance's plan, issue 51) is the group's own: it joins ``to_json`` and the
    table's headline beside ``queue_count``.
    """

    queue_count: int = 1
    per_queue: list[QueueStatus] = field(default_factory=list)

    def leads(self) -> dict[str, list[int]]:
        """Each replica in any queue's line, with the queues it leads (first in line), by replica id."""
        led: dict[str, list[int]] = {}
        for each in self.per_queue:
            for position, contender in enumerate(each.status.contenders):
                name = contender.identity.replica_id if contender.identity else "?"
                led.setdefault(name, []).extend([each.queue] if position == 0 else [])
        return dict(sorted(led.items()))

    def to_json(self) -> dict[str, Any]:
        if self.queue_count == 1:
            return {**super().to_json(), "queue_count": 1}
        return {"group": self.group, "queue_count": self.queue_count, "queues": self.queues,
                "drained": [d.to_json() for d in self.drained], "per_queue": [q.to_json() for q in self.per_queue],
                "replicas": {name: {"leads": queues} for name, queues in self.leads().items()}}


def fetch_status(zk_hosts: str, group: str, *, timeout_s: float = 10.0,
                 credential: DigestCredential | None = None) -> TopicStatus:
    """Connect, read the group's status (each queue's in a group of several) and the groups sharing its topic (with
    their lag), disconnect.

    Raises:
        ElectionError: ZooKeeper cannot be reached within ``timeout_s`` (the message names the hosts).
    """
    with connected(zk_hosts, timeout_s=timeout_s, credential=credential, read_only=True) as client:
        count = group_queue_count(client, group, timeout_s=timeout_s)
        topics = group_queues(client, group, timeout_s=timeout_s)
        reports = [queue_report(client, topic) for topic in topics]
        if count == 1:
            status = group_status(client, group, timeout_s=timeout_s)
            return TopicStatus(**{**vars(status), "queues": reports})
        requests = OperatorRequests(client, group, queues=count, timeout_s=timeout_s)
        return TopicStatus(leader=None, contenders=[], commit=None, handover=None, group=group, queues=reports,
                           drained=requests.drains(), queue_count=count,
                           per_queue=_per_queue(client, requests, group, count, [t.queue_dir for t in topics],
                                                timeout_s))


def _per_queue(client: ZooKeeperClient, requests: OperatorRequests, group: str, count: int, queue_dirs: list[str],
               timeout_s: float) -> list[QueueStatus]:
    """Each queue's status, its live handover request and its backlog in the first topic folder readable here."""
    backlogs: dict[int, int | None] = {}
    for queue_dir in queue_dirs:
        backlogs = queue_backlogs(queue_dir, group)
        if len(backlogs) == count and None not in backlogs.values():
            break
    now = time.time()
    found: list[QueueStatus] = []
    for queue in range(count):
        request = requests.handover(queue)
        found.append(QueueStatus(queue, group_status(client, group, queue=queue, queues=count, timeout_s=timeout_s),
                                 request if request is not None and request.live(now) else None,
                                 backlogs.get(queue) if len(backlogs) == count else None))
    return found


def format_status_json(status: GroupStatus) -> str:
    """Indented JSON: group, leader, epoch, contenders (line order), commit, commit_version, handover, queues,
    queue_count; in a group of several queues, ``per_queue`` (each with those of its queue, its handover request
    and backlog) and ``replicas`` (the queues each leads) instead of the queue's fields."""
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


def _drained(console: Console, status: GroupStatus, now: float) -> None:
    for d in status.drained:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.since))
        console.print(f"drained: {d.replica_id} since {since} ({_ago(d.since, now)}): {d.reason or 'no reason given'}")


def _topic_groups(status: GroupStatus) -> str:
    if not status.queues:
        return "queue: not registered (a Spark replica registers its group at start-up)\n"
    return "".join(format_groups(report) for report in status.queues)


def format_status_table(status: GroupStatus, *, width: int = 120, now: float | None = None) -> str:
    """The human view: a headline naming the leader and epoch, a table of contenders, commit and handover; in a group
    of several queues, a headline naming the number of queues, a table of them and one of the replicas."""
    now = time.time() if now is None else now
    if isinstance(status, TopicStatus) and status.queue_count > 1:
        return _format_queues(status, width, now)
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
    _drained(console, status, now)
    text = buffer.getvalue()
    if status.history:
        text += f"last {len(status.history)} terms (tenure history for more):\n" + format_history(status.history,
                                                                                                   now=now, width=width)
    return text + _topic_groups(status)


def _request_cell(request: HandoverRequest | None) -> str:
    if request is None:
        return "-"
    return f"to {request.to or 'next in line'} until {time.strftime('%H:%M:%S', time.localtime(request.expires_at))}"


def _format_queues(status: TopicStatus, width: int, now: float) -> str:
    """A group of several queues: a headline, a row per queue, a row per replica with the queues it leads."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None, highlight=False)
    leaderless = [each.queue for each in status.per_queue if each.status.leader is None]
    led = "every queue led" if not leaderless else f"no leader for queue{'s' if len(leaderless) > 1 else ''} " + \
        ", ".join(map(str, leaderless))
    leads = status.leads()
    console.print(f"group {status.group}: {status.queue_count} queues, {led}; {len(leads)} "
                  f"replica{'s' if len(leads) != 1 else ''} in line")
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in ("queue", "leader", "epoch", "in line", "last batch", "version", "committed", "handover request",
                   "backlog"):
        table.add_column(column, no_wrap=True, overflow="fold")
    for each in status.per_queue:
        queue = each.status
        commit = queue.commit or {}
        batch = commit.get("batch_id")
        committed_at = commit.get("committed_at")
        table.add_row(str(each.queue), each.leader_id or "-", "-" if queue.leader is None else str(queue.leader.epoch),
                      str(len(queue.contenders)), "-" if batch is None else str(batch),
                      "-" if queue.commit_version is None else str(queue.commit_version),
                      f"{_ago(float(committed_at), now)} ago" if isinstance(committed_at, int | float) else "-",
                      _request_cell(each.request), "unknown" if each.backlog is None else str(each.backlog))
    console.print(table)
    replicas = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in ("replica", "leads"):
        replicas.add_column(column, no_wrap=True, overflow="fold")
    for name, queues in leads.items():
        replicas.add_row(name, ", ".join(map(str, queues)) or "none")
    if leads:
        console.print(replicas)
    _drained(console, status, now)
    console.print("each queue's records and terms: tenure history --queue K")
    return buffer.getvalue() + _topic_groups(status)


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
