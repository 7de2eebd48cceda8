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

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import redis

from tenure.career.redis_queue import (
    EntryId,
    Position,
    RedisTopic,
    StreamAccount,
    StreamState,
    TrimPoint,
    account_stream,
    entry_line,
)
from tenure.career.redis_streams import entries, stream_state

__all__ = ["StreamLine", "account_topic", "stream_lines"]


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
