"""The calls tenure makes on a Redis topic's streams (redis-py): read a stream's state and its entries by range, trim
it, show a group's progress in a Redis consumer group, record the topic's identity. What each of them means is
:mod:`tenure.career.redis_queue`'s.

Every call has a deadline (the client's socket timeouts), and redis-py's errors become :class:`RedisUnavailable`
(Redis did not answer) or :class:`RedisRefused` (it answered with an error) at each public call, so no caller
sees redis-py's types.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any, cast

import redis

from tenure.career.identity import Topic
from tenure.career.redis_queue import EntryId, Position, RedisTopic, StreamState
from tenure.errors import ConfigError, TenureError

__all__ = [
    "DEFAULT_PAGE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "GROUP_PREFIX",
    "Entry",
    "RedisRefused",
    "RedisUnavailable",
    "connect",
    "consumer_group",
    "ensure_group",
    "ensure_topic",
    "entries",
    "entry_bytes",
    "read_topic",
    "show_progress",
    "stream_state",
    "trim",
]

DEFAULT_TIMEOUT_S = 10.0
"""The deadline of one call (connecting, and each reply)."""

DEFAULT_PAGE_BYTES = 8 << 20
"""What one ``XRANGE`` page aims to weigh: :func:`entries` asks for fewer entries when theirs are large."""

GROUP_PREFIX = "tenure."
"""A tenure group's Redis consumer group is ``tenure.<group>``: for operators' eyes (``XINFO GROUPS``) only."""


class RedisUnavailable(TenureError):
    """Redis did not answer (refused, reset, timed out): the message names the server and the call."""


class RedisRefused(TenureError):
    """Redis answered a call with an error (a wrong type under a stream's name, no permission): the message names
    the server, the call and Redis's reply."""


@contextlib.contextmanager
def _boundary(client: redis.Redis, what: str) -> Iterator[None]:
    """redis-py's errors as the product's, naming the server and the call."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(f"Redis at {_address(client)} did not answer {what} ({type(exc).__name__}: {exc}): "
                               "start it, or check the queue's URL") from exc
    except redis.RedisError as exc:
        raise RedisRefused(f"Redis at {_address(client)} refused {what}: {exc}") from exc


def _address(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return str(kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}")


def connect(topic: RedisTopic, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> redis.Redis:
    """A client of the topic's server (no connection is made until its first call). Replies are bytes: a record
    need not be UTF-8 to be quarantined with its bytes."""
    return redis.Redis.from_url(topic.url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                decode_responses=False)


def stream_state(client: redis.Redis, stream: str) -> StreamState:
    """``XINFO STREAM``: the stream's ids and counters (:meth:`StreamState.missing` when it does not exist)."""
    with _boundary(client, f"XINFO STREAM {stream}"):
        try:
            info: dict[str, Any] = client.xinfo_stream(stream)
        except redis.ResponseError as exc:
            if "no such key" not in str(exc).lower():
                raise
            return StreamState.missing(stream)
    first = info.get("first-entry")
    return StreamState(stream=stream, last_id=EntryId.parse(info["last-generated-id"]),
                       entries_added=int(info["entries-added"]), length=int(info["length"]),
                       first_id=EntryId.parse(first[0]) if first else None,
                       max_deleted_id=EntryId.parse(info["max-deleted-entry-id"]))


def entry_bytes(fields: dict[bytes, bytes]) -> int:
    """What an entry weighs: its fields' names and values, in bytes (the read limit's measure)."""
    return sum(len(name) + len(value) for name, value in fields.items())


Entry = tuple[EntryId, dict[bytes, bytes]]
"""A stream entry as :func:`entries` gives it: its id and its fields."""


def entries(client: redis.Redis, stream: str, after: EntryId, through: EntryId, *, count: int | None = None,
            page: int = 1000, page_bytes: int = DEFAULT_PAGE_BYTES) -> Iterator[list[Entry]]:
    """The entries of ``(after, through]`` in id order, at most ``count``, one ``XRANGE … COUNT`` page at a time.

    A page holds at most ``page`` entries and is asked smaller once entries weigh more than ``page_bytes`` a page:
    what a reader holds stays near ``page_bytes`` plus one entry (Redis sends an entry whole).
    """
    asked = page
    left = count
    while left is None or left > 0:
        want = asked if left is None else min(asked, left)
        with _boundary(client, f"XRANGE {stream} ({after} {through} COUNT {want}"):
            # Bytes: the client is made with decode_responses=False (connect).
            found = cast(list[tuple[bytes, dict[bytes, bytes]]],
                         client.xrange(stream, f"({after}", str(through), count=want))
        if not found:
            return
        batch = [(EntryId.parse(raw_id), fields) for raw_id, fields in found]
        yield batch
        after = batch[-1][0]
        if left is not None:
            left -= len(batch)
        if len(batch) < want:
            return
        weight = sum(entry_bytes(fields) for _, fields in batch)
        asked = max(1, min(page, asked * page_bytes // max(weight, 1)))


def trim(client: redis.Redis, stream: str, below: EntryId) -> int:
    """``XTRIM <stream> MINID = <below>``: remove the entries of lower ids, exactly (never ``MAXLEN``, never
    approximately); returns how many went. Call it with a :func:`tenure.career.redis_queue.trim_point` only."""
    with _boundary(client, f"XTRIM {stream} MINID {below}"):
        return int(client.xtrim(stream, minid=str(below), approximate=False))


def consumer_group(group: str) -> str:
    """The Redis consumer group that shows tenure group ``group``'s progress: ``tenure.<group>``."""
    return GROUP_PREFIX + group


def ensure_group(client: redis.Redis, stream: str, group: str) -> None:
    """``XGROUP CREATE <stream> tenure.<group> 0 MKSTREAM``, unless it exists: the group's lag for operators."""
    with _boundary(client, f"XGROUP CREATE {stream} {consumer_group(group)}"):
        try:
            client.xgroup_create(stream, consumer_group(group), id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


def show_progress(client: redis.Redis, stream: str, group: str, position: Position) -> None:
    """Move the group's Redis consumer group to ``position`` (``XGROUP SETID … ENTRIESREAD n``), creating it if
    needed, so that ``XINFO GROUPS`` shows its lag. Never read back: the committed offsets are ZooKeeper's."""
    name = consumer_group(group)
    with _boundary(client, f"XGROUP SETID {stream} {name} {position.id} ENTRIESREAD {position.n}"):
        try:
            client.xgroup_setid(stream, name, id=str(position.id), entries_read=position.n)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            client.xgroup_create(stream, name, id=str(position.id), mkstream=True, entries_read=position.n)


def read_topic(client: redis.Redis, topic: RedisTopic) -> Topic | None:
    """The topic's identity (``<prefix>:topic``); None when none is recorded yet.

    Raises:
        ConfigError: the key holds something else than a topic's identity.
    """
    with _boundary(client, f"GET {topic.topic_key}"):
        data = client.get(topic.topic_key)
    if data is None:
        return None
    try:
        found = json.loads(data)
        queues = found["queues"]
        if not isinstance(found["topic_id"], str) or isinstance(queues, bool) or not isinstance(queues, int) \
                or queues < 1:
            raise ValueError(found)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{topic.topic_key} on {topic} holds {data[:200]!r}, not a topic's identity: delete it "
                          "if no group has read this topic") from exc
    return Topic(found["topic_id"], queues)


def ensure_topic(client: redis.Redis, topic: RedisTopic, queues: int | None) -> Topic:
    """The topic's identity, recorded first (``SET NX``: the first producer or replica wins) with ``queues``
    queues (None: 1) when none is.

    Raises:
        ConfigError: ``queues`` is not the recorded number, or the key holds something else.
    """
    wanted = Topic(str(uuid.uuid4()), queues or 1)
    with _boundary(client, f"SET {topic.topic_key} NX"):
        client.set(topic.topic_key, json.dumps(wanted.to_json(), sort_keys=True), nx=True)
    found = read_topic(client, topic)
    assert found is not None, "SET NX wrote it or found it"
    if queues is not None and queues != found.queues:
        raise ConfigError(f"--queues {queues} does not match the topic {topic}, which has {found.queues} "
                          f"queue{'s' if found.queues != 1 else ''} ({topic.topic_key}): pass --queues "
                          f"{found.queues} or use another prefix")
    return found
