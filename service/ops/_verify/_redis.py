"""What ``tenure verify`` reads of a Redis topic: every entry still in each stream, as (stream, entry id, raw line),
and each stream's account of the entries no longer there — trimmed after every group consumed them, or lost.

Trimmed entries' ids are no longer auditable from Redis: what tells them from lost ones is the trim point tenure
records beside each commit (:class:`tenure.career.redis_queue.TrimPoint`: the entries numbered up to it were
consumed before they were trimmed) and Redis's own ``entries-added`` counter, which no trim lowers: a stream whose
entries are numbered ``removed + 1`` to ``entries-added`` misses nothing above its first entry, and any entry
removed above the trim point, or a tail lost below the committed position, is counted as lost
(:func:`tenure.career.redis_queue.account_stream`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from tenure.career.queue import WRONG_QUEUE, classify_line
from tenure.career.redis_queue import (
    EntryId,
    Position,
    RedisTopic,
    StreamAccount,
    StreamState,
    TrimPoint,
    account_stream,
    committed_positions,
    entry_line,
)
from tenure.career.redis_streams import entries, stream_state
from tenure.service.ops._verify._files import newest_checkpoint, qualified
from tenure.service.ops._verify._scan import QueueScan

__all__ = ["StreamLine", "account_topic", "checkpoint_position", "scan_stream", "stream_lines"]


@dataclass(frozen=True)
class StreamLine:
    """One entry of a stream as the audit reads it, where a file queue's line would be.

    Attributes:
        stream: the stream's name.
        id: the entry's id.
        n: its number (``entries-added`` when it was added: the quarantine's ``line``), None when the stream had
            entries deleted from its middle (``XDEL``) and the numbers are no longer known.
        raw: its ``record`` field's bytes (the line ``classify_line`` judges), None for a refused entry.
        refused: why the entry holds no record (one of ``tenure.career.redis_queue.ENTRY_REASONS``), or None.
    """

    stream: str
    id: EntryId
    n: int | None
    raw: bytes | None
    refused: str | None

    @property
    def source(self) -> str:
        """``<stream>/<id>``: the quarantine's ``source_file`` for this entry."""
        return f"{self.stream}/{self.id}"


def stream_lines(client: redis.Redis, state: StreamState) -> Iterator[StreamLine]:
    """Every entry ``state``'s stream holds up to its ``last_id`` (entries added since are the next audit's), in id
    order, a page at a time."""
    number = state.removed if state.contiguous else None
    for page in entries(client, state.stream, EntryId(0, 0), state.last_id):
        for entry_id, fields in page:
            if number is not None:
                number += 1
            raw, refused = entry_line(fields)
            yield StreamLine(state.stream, entry_id, number, raw, refused)


def account_topic(client: redis.Redis, topic: RedisTopic, queues: int, *,
                  trims: Mapping[str, TrimPoint | None] | None = None,
                  committed: Mapping[str, Position | None] | None = None) -> list[tuple[StreamState, StreamAccount]]:
    """Each stream of the topic's ``queues`` queues: its state now and its account of the entries it misses.

    Args:
        client: a client of the topic's server.
        topic: the topic.
        queues: its number of queues.
        trims: each stream's trim point recorded beside the group's commit (absent: never trimmed).
        committed: each stream's committed position of the group (absent: nothing committed).
    """
    found = []
    for stream in topic.streams(queues):
        state = stream_state(client, stream)
        found.append((state, account_stream(state, (trims or {}).get(stream), (committed or {}).get(stream))))
    return found


def checkpoint_position(checkpoint: Path) -> Position | None:
    """The position the group's newest Spark checkpoint (of queue k: its terms' folder ``checkpoint``) has
    committed in its stream: the end offset of its newest batch in ``commits/``; None when it committed none."""
    from tenure.career.spark._intake import batch_offset  # imports pyspark: only with a checkpoint

    newest = newest_checkpoint(checkpoint)
    if newest is None:
        return None
    try:
        batches = [int(e.name) for e in os.scandir(newest / "commits") if e.name.isdigit()]
    except FileNotFoundError:
        return None
    offset = batch_offset(newest, max(batches)) if batches else {}
    return Position.from_offset(offset) if "id" in offset else None


def scan_stream(client: redis.Redis, state: StreamState, queue: int, queues: int, max_line_bytes: int,
                record: Mapping[str, Any] | None, checkpoint: Path, scan: QueueScan) -> StreamAccount:
    """Classify every entry of queue ``queue``'s stream into ``scan`` as :func:`scan_queue` does a queue's files
    (each entry named by its id, qualified by its queue, at its number: where the consumer's quarantine rows name
    it); an entry after the group's committed position (``record``'s ``through``, else its newest checkpoint's) is
    not read yet. Returns the stream's account of the entries it misses (trimmed below ``record``'s trim point, or
    lost)."""
    committed = committed_positions(record)
    position = committed.through if committed.through is not None else checkpoint_position(checkpoint)
    content, bad = scan.content, scan.bad
    lines_in, ids_before, bad_before, misrouted, unread = 0, len(content.first), len(bad), 0, 0
    for line in stream_lines(client, state):
        lines_in += 1
        name, number = qualified(str(line.id), queue, queues), line.n or 0
        read = position is not None and line.id <= position.id
        unread += not read
        if line.raw is None:
            record_, reason = None, line.refused
        else:
            record_, reason = classify_line(line.raw, max_line_bytes, queue=queue, queues=queues)
        if record_ is None:
            bad[(name, number)] = reason or "?"
            misrouted += reason == WRONG_QUEUE
            if not read:
                scan.unread_bad.add((name, number))
            continue
        scan.valid_lines += 1
        rid = record_["id"]
        if read:
            scan.unread_ids.discard(rid)
        elif rid not in content.first:
            scan.unread_ids.add(rid)
        content.add(record_)
    if unread:
        scan.unread_files.append(f"{state.stream} ({unread} entries)")
    scan.files += 1
    scan.lines += lines_in
    scan.by_queue[queue] = {"files": 1, "lines": lines_in, "ids_in": len(content.first) - ids_before,
                            "bad_lines_in": len(bad) - bad_before, "wrong_queue": misrouted,
                            "waiting_files": int(bool(unread))}
    return account_stream(state, committed.trim, position)
