"""The Redis queue's contract: a topic of N queues as N Redis streams, what an entry holds, and how far a group has
read a stream — what producers write, the consumer reads, trimming follows and ``tenure verify`` audits.

- **The URL** (:class:`RedisTopic`): ``redis://[[user]:password@]host[:port][/db]?prefix=<prefix>`` names a
  topic: the server as redis-py's ``Redis.from_url`` takes it (``rediss://`` for TLS, ``unix://`` for a socket, its
  other query arguments passed on), and the streams' prefix (default :data:`DEFAULT_PREFIX`). The prefix is a
  query argument, not the path, because the path of every Redis URL is the database number.
- **Streams.** Queue k of the topic is the stream ``<prefix>:<k>``, ``<prefix>:0`` for a topic of one queue; the
  topic's identity (its id and number of queues) is the string ``<prefix>:topic`` beside them.
- **Entries.** An entry holds one field, ``record`` (:data:`RECORD_FIELD`), whose value is one queue line: the
  file queue's record, classified by :func:`tenure.career.queue.classify_line`. An entry without it, or with other
  fields, is refused as a whole, for one of :data:`ENTRY_REASONS` (:func:`entry_line`): quarantined with its stream
  and id, and the stream goes on.
- **Positions** (:class:`Position`): a group's place in a stream is the id of the last entry it read and ``n``, that
  entry's number: how many entries had ever been added to the stream when it was (Redis's ``entries-added``
  counter, which ``XINFO STREAM`` shows and no trim lowers). Two positions name the entries between them exactly,
  and their count.
- **Loss told from lag** (:meth:`StreamState.check`): a stream whose ``last-generated-id`` or ``entries-added``
  is below a group's position lost its tail (Redis restarted without its append-only file, a lagging replica
  promoted); one whose entries above the position were removed before the group read them lost those. Either
  raises :class:`StreamLost`, naming the stream and both positions, and nothing past the hole is read.
- **Trimming** (:func:`trim_point`): a stream is trimmed only below what every registered group has committed and
  checkpointed (``XTRIM <stream> MINID <id>``), and the point is kept beside the commit, so that ``tenure verify``
  counts the entries below it as consumed and any other missing entry as lost (:func:`account_stream`).

Pure Python (no redis-py: the calls are :mod:`tenure.career.redis_streams`'), so every tool imports it cheaply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit

from tenure.errors import ConfigError, TenureError

__all__ = [
    "DEFAULT_PREFIX",
    "ENTRY_REASONS",
    "NO_RECORD_FIELD",
    "OTHER_FIELDS",
    "RECORD_FIELD",
    "START",
    "CommittedPositions",
    "EntryId",
    "Position",
    "RedisTopic",
    "StreamAccount",
    "StreamLost",
    "StreamState",
    "TrimPoint",
    "account_stream",
    "committed_positions",
    "entry_line",
    "entry_text",
    "is_redis_url",
    "trim_point",
]

DEFAULT_PREFIX = "tenure"
"""The streams' prefix of a URL that names none: queue k is the stream ``tenure:<k>``."""

RECORD_FIELD = b"record"
"""The one field of a stream entry: its value is one queue line (a JSON record)."""

NO_RECORD_FIELD = "no_record_field"
OTHER_FIELDS = "other_fields"

ENTRY_REASONS: tuple[str, ...] = (NO_RECORD_FIELD, OTHER_FIELDS)
"""Why an entry of a stream is refused as a whole (the quarantine row's ``reason``; its ``value`` is the entry's
fields as a JSON object, :func:`entry_text`):

=================== ==========================================================================
``no_record_field`` the entry has no ``record`` field
``other_fields``    the entry has fields besides ``record`` (a producer that writes something else)
=================== ==========================================================================
"""

_SCHEMES = ("redis", "rediss", "unix")
_PREFIX_PATTERN = re.compile(r"[!-~]+")  # printable ASCII without space: a stream name stays one word in messages
_UINT64 = (1 << 64) - 1


def _unsplit(parts: SplitResult) -> str:
    """A URL from its parts, ``//`` kept before an empty host (``unix:///run/redis.sock``, which ``urlunsplit`` would
    shorten)."""
    return f"{parts.scheme}://{parts.netloc}{parts.path}" + (f"?{parts.query}" if parts.query else "")


def is_redis_url(text: str) -> bool:
    """Whether ``text`` names a Redis topic (``redis://``, ``rediss://`` or ``unix://``) rather than a folder."""
    return urlsplit(text).scheme in _SCHEMES


@dataclass(frozen=True)
class RedisTopic:
    """A topic on a Redis server: where to connect (a redis-py URL) and the streams' prefix.

    Example:
        >>> topic = RedisTopic.parse("redis://:secret@10.0.0.5:6379/2?prefix=orders")
        >>> topic.stream(3), topic.url, str(topic)
        ('orders:3', 'redis://:secret@10.0.0.5:6379/2', 'redis://:***@10.0.0.5:6379/2?prefix=orders')
    """

    url: str
    """The server's URL as redis-py's ``Redis.from_url`` takes it: credentials, database, TLS and its options."""
    prefix: str = DEFAULT_PREFIX

    @classmethod
    def parse(cls, text: str) -> RedisTopic:
        """``redis://host:port[/db][?prefix=P]`` (module docstring) as a topic.

        Raises:
            ConfigError: not a Redis URL, or a prefix that is empty or holds a space or a character that is not
                printable ASCII.
        """
        parts = urlsplit(text)
        if parts.scheme not in _SCHEMES or not (parts.netloc or parts.path):
            raise ConfigError(f"{text!r} is not a Redis URL: write redis://host:port[/db]?prefix=<prefix> "
                              "(rediss:// for TLS)")
        query = parse_qsl(parts.query, keep_blank_values=True)
        prefixes = [value for name, value in query if name == "prefix"]
        prefix = prefixes[-1] if prefixes else DEFAULT_PREFIX
        if not _PREFIX_PATTERN.fullmatch(prefix):
            raise ConfigError(f"prefix={prefix!r} in {cls._hidden(text)} is not a stream prefix: use printable ASCII "
                              "without spaces, for example prefix=orders")
        rest = urlencode([(name, value) for name, value in query if name != "prefix"])
        return cls(_unsplit(parts._replace(query=rest)), prefix)

    def stream(self, queue: int) -> str:
        """The stream of queue ``queue``: ``<prefix>:<queue>``."""
        return f"{self.prefix}:{queue}"

    def streams(self, queues: int) -> list[str]:
        """Every stream of a topic of ``queues`` queues, by queue."""
        return [self.stream(k) for k in range(queues)]

    @property
    def topic_key(self) -> str:
        """The string holding the topic's identity (``{"topic_id": …, "queues": N}``): ``<prefix>:topic``."""
        return f"{self.prefix}:topic"

    def __str__(self) -> str:
        """The topic's URL with its password hidden: for messages, logs and summaries."""
        parts = urlsplit(self.url)
        query = urlencode([*parse_qsl(parts.query, keep_blank_values=True), ("prefix", self.prefix)])
        return self._hidden(_unsplit(parts._replace(query=query)))

    @staticmethod
    def _hidden(url: str) -> str:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[1]
        return _unsplit(parts._replace(netloc=f"{user}:***@{host}"))


class EntryId(NamedTuple):
    """A stream entry's id, ``<ms>-<seq>``: ordered as Redis orders them.

    Example:
        >>> EntryId.parse("1700000000000-3") < EntryId.parse("1700000000001-0"), str(EntryId(5, 2).next())
        (True, '5-3')
    """

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str | bytes) -> EntryId:
        """``"<ms>-<seq>"`` (bytes as Redis replies) as an id.

        Raises:
            ValueError: not two unsigned 64-bit numbers joined by ``-``.
        """
        value = text.decode() if isinstance(text, bytes) else text
        ms, sep, seq = value.partition("-")
        if not (sep and ms.isdigit() and seq.isdigit() and int(ms) <= _UINT64 and int(seq) <= _UINT64):
            raise ValueError(f"{value!r} is not a stream entry id (<ms>-<seq>)")
        return cls(int(ms), int(seq))

    def next(self) -> EntryId:
        """The smallest id above this one."""
        return EntryId(self.ms, self.seq + 1) if self.seq < _UINT64 else EntryId(self.ms + 1, 0)

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


_ZERO = EntryId(0, 0)


class Position(NamedTuple):
    """A place in a stream: ``id``, the last entry read, and ``n``, its number (the stream's ``entries-added``
    when it was added; 0 before the first). Spark's offsets carry it as ``{"id": "<ms>-<seq>", "n": n}``.

    Example:
        >>> Position.from_offset({"id": "5-2", "n": 7}).to_offset()
        {'id': '5-2', 'n': 7}
    """

    id: EntryId
    n: int

    @classmethod
    def from_offset(cls, offset: Mapping[str, Any]) -> Position:
        return cls(EntryId.parse(str(offset["id"])), int(offset["n"]))

    def to_offset(self) -> dict[str, Any]:
        return {"id": str(self.id), "n": self.n}

    def __str__(self) -> str:
        return f"id {self.id} (entry {self.n})"


START = Position(_ZERO, 0)
"""Before a stream's first entry: where a group that has read nothing of it stands."""


class StreamLost(TenureError):
    """A stream lost entries a group has not read (its tail, or entries removed above the group's position): the
    group reads nothing past the hole. The message is one line naming the stream and both positions.

    The planner of the Redis source runs in a Python process of Spark's, so the career sees this error as text in
    its query's exception: :meth:`found_in` recognises it there.
    """

    def __init__(self, stream: str, message: str) -> None:
        super().__init__(message)
        self.stream = stream

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stream, str(self)))

    @classmethod
    def found_in(cls, text: str) -> StreamLost | None:
        """The error a Spark query's exception text carries (its Python traceback names it), if any."""
        match = _LOST_LINE.search(text)
        return cls(match["stream"], match["message"]) if match else None


_LOST_HEAD = "Redis stream "
_LOST_LINE = re.compile(r"StreamLost: (?P<message>" + _LOST_HEAD + r"(?P<stream>\S+) [^\n]*)")


@dataclass(frozen=True)
class StreamState:
    """What ``XINFO STREAM`` says of a stream, as far as counting its entries goes.

    Attributes:
        stream: its name.
        last_id: ``last-generated-id``: the highest id ever added (``0-0``: none).
        entries_added: ``entries-added``: entries ever added; trimming and ``XDEL`` never lower it.
        length: entries in it now.
        first_id: its first entry's id now (None: it is empty).
        max_deleted_id: ``max-deleted-entry-id``: the highest id ``XDEL`` removed (``0-0``: none; trimming does
            not set it).
    """

    stream: str
    last_id: EntryId
    entries_added: int
    length: int
    first_id: EntryId | None
    max_deleted_id: EntryId

    @classmethod
    def missing(cls, stream: str) -> StreamState:
        """A stream that does not exist: nothing was ever added to it (or Redis lost it whole)."""
        return cls(stream, _ZERO, 0, 0, None, _ZERO)

    @property
    def removed(self) -> int:
        """Entries added and no longer in the stream: trimmed or deleted."""
        return self.entries_added - self.length

    @property
    def contiguous(self) -> bool:
        """Whether every entry removed lies below the first one left (none was deleted with ``XDEL`` from the
        middle): the entries left are then numbered ``removed + 1`` to ``entries_added``, as Redis itself counts."""
        return self.first_id is None or self.max_deleted_id == _ZERO or self.max_deleted_id < self.first_id

    def check(self, position: Position) -> int:
        """The number of the entry before the next one a group at ``position`` reads: ``position.n``, or, for a
        group that has read nothing (:data:`START`), the entries removed before the stream's first one.

        Raises:
            StreamLost: the stream lost its tail below ``position`` (its last id or counter is below it), or entries
                above ``position`` are gone (trimmed or deleted before the group read them), or it holds other
                entries where the group's were (Redis lost them, then took new ones).
        """
        if self.last_id < position.id or self.entries_added < position.n:
            raise self._lost("lost its tail", position)
        if not self.contiguous:
            if self.max_deleted_id > position.id:  # the numbers above the position are no longer known
                raise self._lost(f"had an entry above the group's position deleted (XDEL: max-deleted-entry-id "
                                 f"{self.max_deleted_id})", position)
            return position.n  # every deletion lies at or below the position, so does the first entry: none above
        if position.n < self.removed:
            if position == START:
                return self.removed  # a first read of a stream trimmed before it: from its first entry
            raise self._lost(f"had entries {position.n + 1} to {self.removed} removed (trimmed or deleted) before "
                             "the group read them", position)
        if self.first_id is not None and position.id < self.first_id and position.n > self.removed:
            raise self._lost(f"holds other entries than the group read: its first entry {self.first_id} is above "
                             f"the group's position, yet only {self.removed} entries were removed before it", position)
        return position.n

    def check_end(self, end: Position) -> None:
        """A batch planned to the stream's last entry must number it ``entries_added``.

        Raises:
            StreamLost: it does not: the stream's entries are not the ones the group counted.
        """
        if end.id == self.last_id and end.n != self.entries_added:
            raise self._lost(f"numbers its last entry {self.entries_added} where the group counts {end.n}: Redis "
                             "lost entries and took new ones", end)

    def _lost(self, what: str, position: Position) -> StreamLost:
        return StreamLost(self.stream, f"{_LOST_HEAD}{self.stream} {what}: the group has read to {position}, Redis "
                                       f"has last-generated-id {self.last_id} and entries-added {self.entries_added}; "
                                       "nothing past it is read: restore the stream's entries (Redis's append-only "
                                       "file, a replica that holds them), see docs/operating/redis.md")


def entry_line(fields: Mapping[bytes, bytes]) -> tuple[bytes | None, str | None]:
    """An entry's queue line, or why the entry holds none: ``(line, None)``, or ``(None, reason)`` with a reason
    of :data:`ENTRY_REASONS`. The line itself is then the queue's to classify (``classify_line``).

    Example:
        >>> entry_line({b"record": b"{}"}), entry_line({b"v": b"1"})
        ((b'{}', None), (None, 'no_record_field'))
    """
    if RECORD_FIELD not in fields:
        return None, NO_RECORD_FIELD
    if len(fields) > 1:
        return None, OTHER_FIELDS
    return fields[RECORD_FIELD], None


def entry_text(fields: Mapping[bytes, bytes], max_bytes: int) -> str:
    """A refused entry's fields as one JSON object (bytes that are not UTF-8 escaped), cut to ``max_bytes``: the
    quarantine row's ``value``."""
    shown = {name.decode("utf-8", "backslashreplace"): value.decode("utf-8", "backslashreplace")
             for name, value in fields.items()}
    text = json.dumps(shown, ensure_ascii=False, separators=(",", ":"))
    return text.encode()[:max_bytes].decode("utf-8", "ignore")


@dataclass(frozen=True)
class TrimPoint:
    """Where a stream may be trimmed: ``XTRIM <stream> MINID <below>`` removes the entries numbered up to ``n``,
    which every registered group has committed and checkpointed. Kept beside the commit, it tells ``tenure
    verify`` how many of the entries missing from the stream were consumed (:func:`account_stream`)."""

    below: EntryId
    n: int

    def holds(self, entry: str, number: int) -> bool:
        """Whether the entry ``entry`` (its id as text), numbered ``number``, is one this trim removed: its number
        up to ``n`` and its id below ``below`` — both, so a row naming an id above the trim point is not taken for
        a trimmed entry's by its number alone, nor one numbered above it by its id.

        Example:
            >>> point = TrimPoint(EntryId(5, 0), 10)
            >>> point.holds("4-9", 10), point.holds("5-0", 9), point.holds("4-0", 11), point.holds("x", 1)
            (True, False, False, False)
        """
        try:
            return number <= self.n and EntryId.parse(entry) < self.below
        except ValueError:  # not an entry id: no entry of the stream's
            return False


def trim_point(groups: Mapping[str, Position | None]) -> TrimPoint | None:
    """The trim point of a stream from the position each registered group has committed and checkpointed in it
    (read from ZooKeeper, never from Redis's consumer groups): below the slowest group's. None (trim nothing) when
    no group is registered or one has no position yet.

    Example:
        >>> trim_point({"fast": Position(EntryId(9, 0), 90), "slow": Position(EntryId(3, 1), 30)})
        TrimPoint(below=EntryId(ms=3, seq=2), n=30)
    """
    positions = list(groups.values())
    if not positions or any(p is None for p in positions):
        return None
    slowest = min(p for p in positions if p is not None)
    return TrimPoint(slowest.id.next(), slowest.n)


class CommittedPositions(NamedTuple):
    """What a commit record says of its batch's stream (its ``redis`` field): ``through``, where the batch ended;
    ``checkpointed``, where it began (committed and in the group's Spark checkpoint: what trimming may go up to);
    ``trim``, the trim point kept with it. Each None when the record has none."""

    through: Position | None = None
    checkpointed: Position | None = None
    trim: TrimPoint | None = None


def committed_positions(record: Mapping[str, Any] | None) -> CommittedPositions:
    """A commit record's positions in its stream (:class:`CommittedPositions`; all None for a record of a queue
    folder, or none).

    Example:
        >>> committed_positions({"redis": {"stream": "o:0", "through": {"id": "5-0", "n": 9},
        ...                                "trim": {"below": "3-1", "n": 4}}}).trim
        TrimPoint(below=EntryId(ms=3, seq=1), n=4)
    """
    found = (record or {}).get("redis")
    if not isinstance(found, Mapping):
        return CommittedPositions()
    through, checkpointed, trim = found.get("through"), found.get("checkpointed"), found.get("trim")
    return CommittedPositions(Position.from_offset(through) if through else None,
                              Position.from_offset(checkpointed) if checkpointed else None,
                              TrimPoint(EntryId.parse(str(trim["below"])), int(trim["n"])) if trim else None)


@dataclass(frozen=True)
class StreamAccount:
    """What ``tenure verify`` can say of the entries missing from a stream.

    Attributes:
        stream: its name.
        present: entries in it now (each audited by id).
        trimmed: entries removed at or below the recorded trim point: consumed before they were trimmed, their ids
            no longer auditable from Redis.
        lost: entries gone that no trim explains (removed above the trim point, or a lost tail); None when they
            cannot be counted (an ``XDEL`` inside the stream).
        problems: one line each, naming the stream and the positions.
    """

    stream: str
    present: int
    trimmed: int
    lost: int | None
    problems: tuple[str, ...]


def account_stream(state: StreamState, trimmed_to: TrimPoint | None, committed: Position | None) -> StreamAccount:
    """Tell the entries missing from a stream apart: trimmed after every group consumed them, or lost.

    Args:
        state: the stream now.
        trimmed_to: the trim point recorded beside the group's commit (None: never trimmed).
        committed: the group's committed position (None: nothing committed).
    """
    problems: list[str] = []
    lost: int | None = 0
    if committed is not None and (state.last_id < committed.id or state.entries_added < committed.n):
        lost = max(committed.n - state.entries_added, 0)
        problems.append(f"{_LOST_HEAD}{state.stream} lost its tail: the group committed to {committed}, Redis has "
                        f"last-generated-id {state.last_id} and entries-added {state.entries_added}")
    allowed = trimmed_to.n if trimmed_to is not None else 0
    if not state.contiguous:
        problems.append(f"{_LOST_HEAD}{state.stream} had entries deleted from its middle (XDEL, up to "
                        f"{state.max_deleted_id}): how many of its missing entries were consumed cannot be told")
        return StreamAccount(state.stream, state.length, min(state.removed, allowed), None, tuple(problems))
    if state.removed > allowed:
        assert lost is not None
        lost += state.removed - allowed
        problems.append(f"{_LOST_HEAD}{state.stream} is missing entries {allowed + 1} to {state.removed}, above "
                        f"tenure's trim point (entry {allowed}): removed before every group consumed them")
    return StreamAccount(state.stream, state.length, min(state.removed, allowed), lost, tuple(problems))
