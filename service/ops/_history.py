"""``tenure history``: the group's last terms — who led, how long, how it ended, what it committed — as a table or
JSON, of one queue or of each queue of a group of several; ``tenure status`` shows the last few with the same
table."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.table import Table

from tenure.career.output import TABLE, batch_versions, is_delta_table
from tenure.election import DigestCredential, TermRecord, connected, read_history
from tenure.service.ops._queues import choose_queue, group_queue_count

__all__ = ["delta_versions_by_epoch", "format_history", "show_history"]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _lasted(term: TermRecord, now: float) -> str:
    seconds = int((term.ended_at if term.ended_at is not None else now) - term.elected_at)
    hours, rest = divmod(max(0, seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def delta_versions_by_epoch(data_root: Path) -> dict[int, list[int]]:
    """The versions of ``table/``'s Delta table by the epoch whose batch each holds (an empty map before the
    table exists; versions whose log entries the clean-up removed are not in it)."""
    table = data_root / TABLE
    found: dict[int, list[int]] = {}
    if is_delta_table(table):
        for version in batch_versions(table):
            if version.epoch is not None and version.batch is not None:
                found.setdefault(version.epoch, []).append(version.version)
    return found


def _versions(numbers: list[int]) -> str:
    if not numbers:
        return "-"
    first, last = min(numbers), max(numbers)
    return str(first) if first == last else f"{first}–{last} ({len(numbers)})"


def format_history(terms: list[TermRecord], *, now: float | None = None, width: int = 120,
                   versions: Mapping[int, list[int]] | None = None, queue: int | None = None) -> str:
    """One row per term, oldest first. ``first commit`` is from the term's election to its first commit;
    ``gap`` from the previous term's last commit to this one's first, the pause the group's output saw. With
    ``versions`` (:func:`delta_versions_by_epoch`), a column names the Delta versions of ``table/`` each term's
    batches became. With ``queue``, the terms are that queue's, of a group of several, and a first column says so."""
    now = time.time() if now is None else now
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None, highlight=False)
    if not terms:
        console.print("no terms recorded yet" if queue is None else f"queue {queue}: no terms recorded yet")
        return buffer.getvalue()
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    columns = ["epoch", "replica", "elected", "lasted", "ended", "first commit", "gap", "batches", "records"]
    for column in [*(["queue"] if queue is not None else []), *columns,
                   *(["delta versions"] if versions is not None else [])]:
        table.add_column(column, no_wrap=True, justify="left" if column in ("queue", "replica", "ended") else "right")
    previous: TermRecord | None = None
    for term in terms:
        gap = (None if previous is None or previous.last_commit_at is None or term.first_commit_at is None
               else term.first_commit_at - previous.last_commit_at)
        ended = term.ended or "running"
        if term.reason == "canary":
            ended += " (canary)"
        if term.closed_by is not None:
            ended += f" (found by {term.closed_by})"
        cells = [*([str(queue)] if queue is not None else []), str(term.epoch), term.replica_id,
                 time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(term.elected_at)), _lasted(term, now), ended,
                 _seconds(term.first_commit_s), _seconds(gap), str(term.batches), str(term.records)]
        if versions is not None:
            cells.append(_versions(versions.get(term.epoch, [])))
        table.add_row(*cells)
        previous = term
    console.print(table)
    for term in terms:  # why a term gave up or failed: one line each, under the table
        if term.ended in ("stalled", "failed") and term.reason:
            console.print(f"epoch {term.epoch} {term.ended}: {term.reason}", overflow="fold")
    return buffer.getvalue()


def show_history(zk_hosts: str, group: str, *, as_json: bool = False, last: int | None = None,
                 credential: DigestCredential | None = None, out: TextIO | None = None,
                 data_root: Path | None = None, queue: int | None = None) -> dict[int, list[TermRecord]]:
    """Print the group's recorded terms (the last ``last`` of each queue, default all) to ``out`` (stdout); return
    them by queue. In a group of several queues, those of ``queue``, or of every queue, each table (and each JSON
    term) labelled with its queue; in a group of one, ``queue`` is 0 or None. With ``data_root``, each term also
    shows the Delta versions of ``table/`` its batches became.

    Raises:
        ElectionError: ZooKeeper cannot be reached (print it as one line and exit non-zero).
        ConfigError: ``queue`` is not a queue of the group (one line naming the range).
    """
    with connected(zk_hosts, credential=credential, read_only=True) as client:
        queues = group_queue_count(client, group)
        chosen = [choose_queue(group, queue, queues)] if queue is not None or queues == 1 else list(range(queues))
        terms = {k: read_history(client, group, queue=k, queues=queues) for k in chosen}
    if last is not None:
        terms = {k: found[-last:] for k, found in terms.items()}
    versions = delta_versions_by_epoch(data_root) if data_root is not None else None
    stream = sys.stdout if out is None else out
    labelled = queues > 1
    if as_json:
        rows = [{**t.to_json(), **({"queue": k} if labelled else {}),
                 **({"delta_versions": versions.get(t.epoch, [])} if versions is not None else {})}
                for k, found in terms.items() for t in found]
        stream.write(json.dumps({"group": group, **({"queues": queues} if labelled else {}), "terms": rows},
                                indent=2, sort_keys=True) + "\n")
    else:
        stream.write("".join(format_history(found, versions=versions, queue=k if labelled else None)
                             for k, found in terms.items()))
    stream.flush()
    return terms
