"""The queue's contract: what producers write, the consumer reads, ``tenure verify`` audits and groups share.

- A queue is a folder (:class:`QueueLayout`): ``landing/`` holds files waiting to be consumed, ``archive/``
  files every registered group has consumed (kept for a retention period), ``consumed/<group>/<name>`` one empty
  mark per file a group no longer needs.
- A queue file is named ``*.jsonl`` (:data:`QUEUE_SUFFIX`) and appears atomically: it is written under a
  hidden name (one starting with ``.`` or ``_``, which every reader skips: :func:`is_hidden`), then renamed. A
  ``*.tick`` file (:data:`TICK_SUFFIX`) is the consumer's wake-up, not data.
- A file is UTF-8 JSON Lines split on ``\\n``; each line is one record with :data:`FIELDS` — ``id`` (string;
  the queue may hold repeats), ``key`` (string), ``seq`` (int64, increasing per key), ``ts`` (int64, epoch
  milliseconds), ``payload`` (any JSON). Any other line is bad, for one of :data:`REASONS`
  (:func:`classify_line`, the one definition); it is quarantined, and the queue goes on.

Pure Python (no Spark, no kazoo, no pyarrow), so operator tools can import it cheaply. See ARCHITECTURE.md,
"One record's path" and "Data root layout".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "FIELDS",
    "QUEUE_SUFFIX",
    "REASONS",
    "TICK_SUFFIX",
    "QueueLayout",
    "classify_line",
    "is_hidden",
    "is_queue_file",
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

REASONS: tuple[str, ...] = (
    "oversized",
    "empty_line",
    "not_utf8",
    "bad_json",
    "not_object",
    *(f"missing_field:{name}" for name in FIELDS),
    *(f"bad_type:{name}" for name in _TYPED_FIELDS),
)
"""Every reason :func:`classify_line` returns: the quarantine ``reason`` vocabulary for bad lines."""

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class QueueLayout:
    """The folders of one queue, which several consumer groups may share.

    Example:
        >>> queue = QueueLayout(Path("/srv/queue"))
        >>> queue.landing.as_posix(), queue.marks("orders").as_posix()
        ('/srv/queue/landing', '/srv/queue/consumed/orders')
    """

    root: Path

    @property
    def landing(self) -> Path:
        """Queue files waiting to be consumed: where producers rename their files into."""
        return self.root / "landing"

    @property
    def archive(self) -> Path:
        """Queue files every registered group has consumed, same names; ``verify`` reads them too."""
        return self.root / "archive"

    @property
    def consumed(self) -> Path:
        """One folder of marks per group: ``consumed/<group>/``."""
        return self.root / "consumed"

    def marks(self, group: str) -> Path:
        """``consumed/<group>/``: one empty file per queue file ``group`` no longer needs, named as it is."""
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


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN/Infinity; RFC 8259 does not, and neither does a Parquet int column.
    raise ValueError(f"non-standard JSON constant {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # stateless, so one shared instance is safe
_JSON_WS = " \t\r\n"  # RFC 8259 whitespace; str.strip() would also strip Unicode spaces JSON rejects


def classify_line(
    raw: bytes, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[dict[str, Any] | None, str | None]:
    """Validate one queue line: the one definition of a good record, for the consumer, verify and tests.

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
    ==========================  =======================================================================

    ``payload`` may be any JSON value, ``null`` included; extra fields are allowed and ignored.

    Args:
        raw: the line's bytes without its terminating ``\\n``.
        max_line_bytes: the longest acceptable line, in bytes.

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
    return value, None
