"""The bad input ``tenure produce`` injects: one line of each class, with the reason the queue's rules give it."""

from __future__ import annotations

import json
from typing import Any

from tenure.career.queue import DEFAULT_MAX_LINE_BYTES, FIELDS

__all__ = ["BAD_CLASSES", "bad_line"]

BAD_CLASSES: tuple[str, ...] = (
    "bad_json",
    "not_object",
    "missing_field",
    "bad_type_seq",
    "bad_type_ts",
    "oversized",
    "not_utf8",
    "empty_line",
    "empty_file",
)
"""The bad-input classes ``tenure produce`` injects, in turn (``empty_file`` is a zero-byte file, no line)."""

_BAD_TS = 1_700_000_000_000  # bad lines carry a fixed ts so that they are byte-identical for a seed


def bad_line(kind: str, n: int, run: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> tuple[bytes, str]:
    """The ``n``-th injected bad line of class ``kind`` (any of :data:`BAD_CLASSES` but ``empty_file``).

    Returns:
        ``(line, reason)``: the bytes, and the reason :func:`tenure.career.queue.classify_line` must give them.
    """
    bad_id = f"{run}-bad-{n:09d}"
    base: dict[str, Any] = {"id": bad_id, "key": "k-bad", "seq": n, "ts": _BAD_TS, "payload": {"bad": kind}}

    def dump(obj: object) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    if kind == "bad_json":
        return dump(base)[:-7], "bad_json"  # cut mid-object
    if kind == "not_object":
        return dump([bad_id, n, None]), "not_object"
    if kind == "missing_field":
        name = FIELDS[n % len(FIELDS)]
        return dump({k: v for k, v in base.items() if k != name}), f"missing_field:{name}"
    if kind == "bad_type_seq":
        return dump({**base, "seq": str(n) if n % 2 == 0 else True}), "bad_type:seq"
    if kind == "bad_type_ts":
        return dump({**base, "ts": f"{_BAD_TS}.5" if n % 2 == 0 else _BAD_TS + 0.5}), "bad_type:ts"
    if kind == "oversized":
        line = dump({**base, "payload": ""})
        pad = max_line_bytes + 1 - len(line)
        return dump({**base, "payload": "x" * max(pad, 0)}), "oversized"
    if kind == "not_utf8":
        return dump(base).replace(b'"k-bad"', b'"k-\xff\xfe"'), "not_utf8"
    if kind == "empty_line":
        return b"", "empty_line"
    raise ValueError(f"unknown bad-line class {kind!r}; expected one of {', '.join(BAD_CLASSES[:-1])}")
