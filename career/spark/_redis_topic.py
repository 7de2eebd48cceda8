"""What the Spark career does for a Redis topic beside its batches: each batch's positions in its commit record, the
trim after the fenced commit, the operators' consumer group, the backlog, and a stream that lost entries.

- **Positions in the record** (:func:`record_field`): a batch's commit record carries ``redis``: its stream,
  ``through`` (the batch's end offset, ``{id, n}``, from the checkpoint's offset log, as the queue source's files
  reach ``files``), ``checkpointed`` (its start: the end of the batch before it, which Spark had committed to the
  checkpoint before it began this one, and which a re-run of this batch reads from) and ``trim`` (below).
- **Trim** (:class:`Trimmer`): before the commit, the trim point is computed from every registered group's
  ``checkpointed`` position of the stream as ZooKeeper holds it (this group's: the batch's own start) and kept in
  the record (never lower than the last record's), so that ``tenure verify`` counts the entries below it as
  consumed; after the commit it is applied (``XTRIM MINID``) and the group's Redis consumer group moved to
  ``through``. A group registered without a position holds every entry. Each call is bounded by the client's
  deadline; a failure is logged and the next batch tries again (its trim point is at least as high).
- **Backlog** (:func:`backlog_entries`): the stream's entries after the committed position.
- **Loss**: the source refuses to plan past a hole (:class:`tenure.career.redis_queue.StreamLost`); the career
  keeps the term, and the query down, and plans again every :data:`LOST_RETRY_S` until the stream is restored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import redis

from tenure.career.redis_queue import START, Position, RedisTopic, TrimPoint, committed_positions, trim_point
from tenure.career.redis_streams import connect, show_progress, stream_state, trim
from tenure.errors import TenureError

__all__ = [
    "LOST_RETRY_S",
    "STREAM_LOST",
    "STREAM_TRIMMED",
    "GroupPositions",
    "Trimmer",
    "backlog_entries",
    "batch_positions",
    "record_field",
]

STREAM_LOST: Final = "stream_lost"
STREAM_TRIMMED: Final = "stream_trimmed"

LOST_RETRY_S = 5.0
"""How often a leader whose stream lost entries plans again (a query started, refused at planning)."""

_TIMEOUT_S = 5.0  # each Redis call after a commit: a trim is retried on the next batch

GroupPositions = Callable[[int], Mapping[str, Position | None]]
"""Queue k → each group registered on the topic and its committed-and-checkpointed position in stream k (None:
none yet), read from ZooKeeper."""


def batch_positions(offset: Callable[[int], Mapping[str, Any]], batch_id: int) -> tuple[Position, Position | None]:
    """Where batch ``batch_id`` ends and where it began (the first batch at :data:`START`; None when the offset log
    no longer has the batch before it), from the end offsets of the checkpoint's offset log (``offset``: batch id →
    its end offset, ``{}`` when none)."""
    through = Position.from_offset(offset(batch_id))
    if batch_id == 0:
        return through, START
    before = offset(batch_id - 1)
    return through, Position.from_offset(before) if before else None


def record_field(stream: str, through: Position, after: Position | None, trim_to: TrimPoint | None) -> dict[str, Any]:
    """The commit record's ``redis`` of a batch of ``stream`` from ``after`` (None: unknown) to ``through``, with
    the trim point kept beside it."""
    return {"stream": stream, "through": through.to_offset(),
            **({"checkpointed": after.to_offset()} if after is not None else {}),
            **({"trim": {"below": str(trim_to.below), "n": trim_to.n}} if trim_to is not None else {})}


class Trimmer:
    """The trim of one queue's stream after each fenced commit, and its consumer group for operators' eyes.

    Args:
        topic: the Redis topic.
        queue: the queue whose stream this trims.
        group: the tenure group (its Redis consumer group is ``tenure.<group>``).
        positions: every registered group's checkpointed position (:data:`GroupPositions`); None: this group is the
            only one.
    """

    def __init__(self, topic: RedisTopic, queue: int, group: str, positions: GroupPositions | None) -> None:
        self.stream = topic.stream(queue)
        self._topic = topic
        self._queue = queue
        self._group = group
        self._positions = positions
        self._client: redis.Redis | None = None

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = connect(self._topic, timeout_s=_TIMEOUT_S)
        return self._client

    def plan(self, own: Position | None, record: Mapping[str, Any] | None, log: Any) -> TrimPoint | None:
        """The trim point to keep in the next commit record: below the slowest registered group's checkpointed
        position (this group's ``own``), never lower than the one ``record`` (the last commit) keeps; None: keep
        none (a group without a position, or ZooKeeper did not answer: logged, the next batch tries again)."""
        earlier = committed_positions(record).trim
        try:
            others = dict(self._positions(self._queue)) if self._positions is not None else {}
        except TenureError as exc:
            log.warning("stream_trim_skipped", stream=self.stream, reason=str(exc)[:500])
            return earlier
        point = trim_point({**others, self._group: own})
        if point is None or point.n == 0 or (earlier is not None and point.n <= earlier.n):
            return earlier
        return point

    def apply(self, trim_to: TrimPoint | None, through: Position, log: Any) -> None:
        """After the commit: trim below ``trim_to`` and show ``through`` in the group's Redis consumer group; a
        failure is logged (the next batch trims again)."""
        try:
            if trim_to is not None:
                removed = trim(self._redis(), self.stream, trim_to.below)
                if removed:
                    log.info(STREAM_TRIMMED, stream=self.stream, below=str(trim_to.below), entry=trim_to.n,
                             removed=removed)
            show_progress(self._redis(), self.stream, self._group, through)
        except TenureError as exc:
            log.warning("stream_trim_failed", stream=self.stream, reason=str(exc)[:500],
                        effect="the next batch trims again")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def backlog_entries(topic: RedisTopic, stream: str, record: Mapping[str, Any] | None, timeout_s: float) -> int:
    """The stream's entries after the committed position (``record``'s ``through``; all of them left before any),
    asked within ``timeout_s``.

    Raises:
        RedisUnavailable, RedisRefused: Redis did not answer or refused.
    """
    client = connect(topic, timeout_s=timeout_s)
    try:
        state = stream_state(client, stream)
    finally:
        client.close()
    through = committed_positions(record).through
    return max(state.entries_added - (through.n if through is not None else state.removed), 0)
