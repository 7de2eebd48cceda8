"""The queue's contract: what producers write, the consumer reads, ``tenure verify`` audits and groups share.

- A topic is N queues, N fixed when the topic is created (``_topic.json``, :mod:`tenure.career.identity`); each
  key lives in exactly one queue, :func:`queue_of` (SHA-256 of the key's UTF-8 bytes, its first 8 bytes as an
  unsigned big-endian integer, modulo N). A record found in another queue than its key's is bad: ``wrong_queue``.
- A queue is a folder (:class:`QueueLayout`): ``landing/`` holds files waiting to be consumed, ``archive/``
  files every registered group has consumed (kept for a retention period), ``consumed/<group>/<name>`` one
  mark per file a group no longer needs. The one queue of a topic of one is the topic's folder itself (as before
  topics had several queues); queue k of N > 1 is ``queues/<k>/`` in it.
- A queue file is named ``*.jsonl`` (:data:`QUEUE_SUFFIX`) and appears atomically: it is written under a
  hidden name (one starting with ``.`` or ``_``, which every reader skips: :func:`is_hidden`), then renamed. A
  ``*.tick`` file (:data:`TICK_SUFFIX`) is the consumer's wake-up, not data.
- A file is UTF-8 JSON Lines split on ``\\n``; each line is one record with :data:`FIELDS` — ``id`` (string;
  the queue may hold repeats), ``key`` (string), ``seq`` (int64, increasing per key), ``ts`` (int64, epoch
  milliseconds), ``payload`` (any JSON). Any other line is bad, for one of :data:`REASONS`
  (:func:`classify_line`, the one definition); it is quarantined, and the queue goes on.
- An entry of ``landing/`` under a queue file's name that cannot be read as one — a folder, a dangling symbolic
  link, a name that is not UTF-8, a file the consumer may not open, one gone before its batch read it — is
  refused as a whole, for one of :data:`ENTRY_REASONS`: one quarantine row at line 0 names it, and the queue goes
  on.
- A file is known by its :class:`FileIdentity` (inode, size, modification time): a group's mark
  (``consumed/<group>/<name>``) holds the identity of the file it consumed under that name, so a file that
  differs from it in any of the three is a new file (:func:`read_mark`, :func:`mark_covers`).

Pure Python (no Spark, no kazoo, no pyarrow), so operator tools and producers can import it cheaply. See
ARCHITECTURE.md, "One record's path" and "Data root layout".
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenure.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "ENTRY_LINE",
    "ENTRY_REASONS",
    "FIELDS",
    "QUEUES_FOLDER",
    "QUEUE_COLUMN",
    "QUEUE_SUFFIX",
    "REASONS",
    "TICK_SUFFIX",
    "WRONG_QUEUE",
    "FileIdentity",
    "QueueLayout",
    "check_queue",
    "classify_line",
    "is_hidden",
    "is_queue_file",
    "mark_bytes",
    "mark_covers",
    "printable_name",
    "queue_of",
    "read_mark",
]

QUEUE_SUFFIX = ".jsonl"
"""Every queue file's name ends with this."""

TICK_SUFFIX = ".tick"
"""A queue file with this suffix is a wake-up, not data: the consumer reads no line of it.

The consumer drops one into ``landing/`` when held records fall due and no data is arriving, because a
file-source streaming query runs a batch only when a new file appears.
"""

DEFAULT_MAX_LINE_BYTES = 1 << 20
"""A line of more bytes than this (its ``\\n`` not counted) is ``oversized``: 1 MiB, the pipeline default."""

FIELDS: tuple[str, ...] = ("id", "key", "seq", "ts", "payload")
"""The fields every record must carry, in the order they are checked."""

_TYPED_FIELDS: tuple[str, ...] = ("id", "key", "seq", "ts")  # payload is any JSON, null included

QUEUES_FOLDER = "queues"
"""The folder of a topic of several queues that holds one folder per queue, named by its number
(:class:`QueueLayout`)."""

QUEUE_COLUMN = "_queue"
"""The column every output row of a topic of several queues carries: the queue its batch read (a topic of one queue's
rows have none, so an upgraded table keeps its schema)."""

WRONG_QUEUE = "wrong_queue"
"""The reason of a record found in a queue other than its key's (:func:`queue_of`): a topic of several queues only."""

REASONS: tuple[str, ...] = (
    "oversized",
    "empty_line",
    "not_utf8",
    "bad_json",
    "not_object",
    *(f"missing_field:{name}" for name in FIELDS),
    *(f"bad_type:{name}" for name in _TYPED_FIELDS),
    WRONG_QUEUE,
)
"""Every reason :func:`classify_line` returns: the quarantine ``reason`` vocabulary for bad lines."""

ENTRY_REASONS: tuple[str, ...] = (
    "not_a_file",
    "dangling_symlink",
    "name_not_utf8",
    "unreadable",
    "gone",
)
"""Why the consumer refuses an entry of ``landing/`` as a whole (the quarantine row's ``reason``, at
:data:`ENTRY_LINE`; its ``value`` says more):

==================== ===============================================================================
``not_a_file``       a folder (``df.write.json`` makes one), a FIFO, a socket or a device
``dangling_symlink`` a symbolic link whose target does not exist (``value``: the target)
``name_not_utf8``    a name that is not UTF-8 (``value``: the name with its bytes escaped): names are text in
                     the commit record, the quarantine, the logs and ``tenure verify``'s report
``unreadable``       the consumer's process may not open or read it (``value``: the error, e.g. ``EACCES``)
``gone``             no longer in ``landing/`` when its batch read it (moved or deleted after admission)
==================== ===============================================================================
"""

ENTRY_LINE = 0
"""The ``line`` of a refused entry's quarantine row (lines are numbered from 1)."""

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def queue_of(key: str, queues: int) -> int:
    """The queue of a topic of ``queues`` queues that records of ``key`` go to: SHA-256 of the key's UTF-8 bytes,
    its first 8 bytes read as an unsigned big-endian integer, modulo ``queues``.

    Every language's standard library has the three steps, so a producer in any of them routes as tenure does
    (``docs/concepts/queues.md``); never Python's ``hash()``, which differs between processes. A key holding a
    lone surrogate (JSON's ``"\\ud800"``, not Unicode text) is routed by its surrogates' own three-byte codes.

    Example:
        >>> queue_of("acct-7", 1), queue_of("acct-7", 4)
        (0, 1)
    """
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % queues


def check_queue(queue: int, queues: int) -> int:
    """``queue``, or refused when it is not a queue of a topic of ``queues`` queues (1 or more).

    Raises:
        ConfigError: naming the value and the range.
    """
    if isinstance(queues, bool) or not isinstance(queues, int) or queues < 1:
        raise ConfigError(f"queues={queues!r} is not a number of queues: a topic has 1 or more")
    if isinstance(queue, bool) or not isinstance(queue, int) or not 0 <= queue < queues:
        raise ConfigError(f"queue={queue!r} is not a queue of a topic of {queues} queues: choose 0 to {queues - 1}")
    return queue


def queue_of_line(line: bytes, queues: int) -> int:
    """The queue a producer puts a raw line in: its key's, when it is a JSON object with a string ``key``; queue 0
    otherwise (a bad line has no key to route by, and is quarantined wherever it lands)."""
    if queues == 1:
        return 0
    try:
        key = json.loads(line).get("key")
    except (ValueError, AttributeError, RecursionError):  # not JSON, not UTF-8, or not an object
        return 0
    return queue_of(key, queues) if isinstance(key, str) else 0


@dataclass(frozen=True)
class QueueLayout:
    """The folders of queue ``queue`` of a topic of ``queues`` in the topic's folder ``root``, which several
    consumer groups may share: the topic's folder itself for a topic of one queue (its layout before topics had
    several), ``queues/<k>/`` in it for queue k of more.

    Example:
        >>> queue = QueueLayout(Path("/srv/queue"))
        >>> queue.landing.as_posix(), queue.marks("orders").as_posix()
        ('/srv/queue/landing', '/srv/queue/consumed/orders')
        >>> QueueLayout(Path("/srv/queue"), queue=2, queues=4).landing.as_posix()
        '/srv/queue/queues/2/landing'
    """

    root: Path
    queue: int = 0
    queues: int = 1

    def __post_init__(self) -> None:
        check_queue(self.queue, self.queues)

    @classmethod
    def each(cls, root: Path, queues: int) -> list[QueueLayout]:
        """Every queue of the topic of ``queues`` queues in ``root``, by number."""
        return [cls(root, k, queues) for k in range(queues)]

    @property
    def folder(self) -> Path:
        """The queue's own folder: the topic's for a topic of one queue, ``queues/<k>/`` in it otherwise."""
        return self.root if self.queues == 1 else self.root / QUEUES_FOLDER / str(self.queue)

    @property
    def landing(self) -> Path:
        """Queue files waiting to be consumed: where producers rename their files into."""
        return self.folder / "landing"

    @property
    def archive(self) -> Path:
        """Queue files every registered group has consumed, same names; ``verify`` reads them too."""
        return self.folder / "archive"

    @property
    def consumed(self) -> Path:
        """One folder of marks per group: ``consumed/<group>/``."""
        return self.folder / "consumed"

    def routes(self, key: str) -> bool:
        """Whether records of ``key`` belong in this queue (:func:`queue_of`)."""
        return self.queues == 1 or queue_of(key, self.queues) == self.queue

    def marks(self, group: str) -> Path:
        """``consumed/<group>/``: one mark per queue file ``group`` no longer needs, named as it is
        (:func:`read_mark`)."""
        return self.consumed / group


def is_hidden(name: str) -> bool:
    """Whether readers skip a file or folder of this name (a leading ``.`` or ``_``).

    The rule of Spark's file source and of pyarrow's dataset reader: a queue file still being written, or an
    output's ``_staging/`` folder, is invisible to them, and to ``verify``.
    """
    return name.startswith((".", "_"))


def is_queue_file(name: str) -> bool:
    """Whether a file of this name in ``landing/`` or ``archive/`` holds queue records (``*.jsonl``, visible)."""
    return name.endswith(QUEUE_SUFFIX) and not is_hidden(name)


def printable_name(name: str) -> str:
    """A file name as text: the bytes of a name that is not UTF-8 escaped (``b\\xffad.jsonl``), others as they are."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class FileIdentity:
    """Which file a queue name held: its inode, size and modification time in ns (``None``: not recorded, in
    offsets and marks of an earlier release).

    Two files under one name differ in at least one of the three unless a producer rewrote a file in place to the
    same size and set its old modification time back (``cp -p`` over it): ``st_ctime`` would tell, but a hard
    link or a rename changes it too. The device is left out: ``landing/`` is one folder, and a file system may
    number its devices anew at each mount.

    Example:
        >>> FileIdentity(7, 10, 5).same(FileIdentity(7, 10, 5)), FileIdentity(7, 10, 5).same(FileIdentity(8, 10, 5))
        (True, False)
    """

    ino: int | None
    size: int | None
    mtime_ns: int

    @classmethod
    def of(cls, stat: os.stat_result) -> FileIdentity:
        return cls(stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def same(self, other: FileIdentity) -> bool:
        """Whether ``other`` is this file: equal in every field both record."""
        return (self.mtime_ns == other.mtime_ns
                and (self.ino is None or other.ino is None or self.ino == other.ino)
                and (self.size is None or other.size is None or self.size == other.size))


def mark_bytes(identity: FileIdentity) -> bytes:
    """A consumption mark's content: the identity of the file the group consumed under the mark's name."""
    return json.dumps({"ino": identity.ino, "size": identity.size, "mtime_ns": identity.mtime_ns}).encode()


def read_mark(path: Path) -> FileIdentity:
    """The identity a consumption mark holds. A mark of an earlier release is empty and carries the consumed
    file's modification time as its own (as does a mark whose content a power cut lost): its identity has that
    time alone, and :func:`mark_covers` reads it as that release did.

    Raises:
        FileNotFoundError: no such mark.
    """
    with open(path, "rb") as handle:
        data = handle.read(4096)
        written = os.fstat(handle.fileno()).st_mtime_ns
    try:
        found = json.loads(data)
        return FileIdentity(found.get("ino"), found.get("size"), int(found["mtime_ns"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return FileIdentity(None, None, written)


def mark_covers(mark: FileIdentity, file: FileIdentity) -> bool:
    """Whether a group's ``mark`` under a name says that ``file``, now under that name, is consumed: the same
    file; or, for a mark of an earlier release (a time alone), a file no newer than it."""
    if mark.ino is None and mark.size is None:
        return file.mtime_ns <= mark.mtime_ns
    return mark.same(file)


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN/Infinity; RFC 8259 does not, and neither does a Parquet int column.
    raise ValueError(f"non-standard JSON constant {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # stateless, so one shared instance is safe
_JSON_WS = " \t\r\n"  # RFC 8259 whitespace; str.strip() would also strip Unicode spaces JSON rejects


def classify_line(
    raw: bytes, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, *, queue: int = 0, queues: int = 1
) -> tuple[dict[str, Any] | None, str | None]:
    """Validate one queue line found in queue ``queue`` of a topic of ``queues``: the one definition of a good
    record, for the consumer, verify and tests.

    Lines are split on ``\\n`` only; ``raw`` excludes the ``\\n``. The checks run in this order and the first
    failing one names the reason:

    ==========================  =======================================================================
    reason                      when
    ==========================  =======================================================================
    ``oversized``               ``len(raw) > max_line_bytes`` (checked first: a huge line is never parsed)
    ``empty_line``              nothing but JSON whitespace: space, tab, ``\\r`` (a CRLF line's)
    ``not_utf8``                not strict UTF-8
    ``bad_json``                not one RFC 8259 JSON value (``NaN``/``Infinity`` rejected, BOM rejected)
    ``not_object``              a JSON value other than an object
    ``missing_field:<name>``    ``id``, ``key``, ``seq``, ``ts`` or ``payload`` absent (first missing, in
                                that order, checked before any type)
    ``bad_type:<name>``         ``id``/``key`` not a string, ``seq``/``ts`` not an integer in int64 range
                                (a boolean, a float such as ``5.0`` or a numeric string is not an integer;
                                ``null`` is a bad type, not a missing field)
    ``wrong_queue``             a valid record whose key's queue (:func:`queue_of`) is not ``queue``: a topic
                                of several queues only
    ==========================  =======================================================================

    ``payload`` may be any JSON value, ``null`` included; extra fields are allowed and ignored.

    Args:
        raw: the line's bytes without its terminating ``\\n``.
        max_line_bytes: the longest acceptable line, in bytes.
        queue: the queue the line was found in.
        queues: the topic's number of queues (1: every key routes to queue 0, no line is ``wrong_queue``).

    Returns:
        ``(record, None)`` for a good line, ``(None, reason)`` for a bad one, ``reason`` being one of
        :data:`REASONS`.

    Example:
        >>> classify_line(b'{"id":"a","key":"k","seq":1,"ts":2,"payload":null}')[1] is None
        True
        >>> classify_line(b'{"id":"a","key":"k","seq":true,"ts":2,"payload":null}')
        (None, 'bad_type:seq')
    """
    if len(raw) > max_line_bytes:
        return None, "oversized"
    if not raw.strip(b" \t\r\n"):
        return None, "empty_line"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not_utf8"
    # raw_decode on pre-stripped text is json.loads without its two whitespace regex scans: ~40% faster.
    text = text.strip(_JSON_WS)
    try:
        value, end = _DECODER.raw_decode(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; deep nesting is a RecursionError
        return None, "bad_json"
    if end != len(text):
        return None, "bad_json"  # trailing data after the first value
    if not isinstance(value, dict):
        return None, "not_object"
    for name in FIELDS:
        if name not in value:
            return None, f"missing_field:{name}"
    for name in ("id", "key"):
        if not isinstance(value[name], str):
            return None, f"bad_type:{name}"
    for name in ("seq", "ts"):
        number = value[name]
        # bool is a subclass of int in Python, but JSON true is not an integer.
        if type(number) is not int or not _INT64_MIN <= number <= _INT64_MAX:
            return None, f"bad_type:{name}"
    if queues > 1 and queue_of(value["key"], queues) != queue:
        return None, WRONG_QUEUE
    return value, None
