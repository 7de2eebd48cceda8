"""What ``tenure verify`` checks beyond ids: each output row holds what its queue line held."""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CONTENT_FIELDS", "EXAMPLES", "ContentCheck", "QueueContent", "compact_json"]

CONTENT_FIELDS: tuple[str, ...] = ("key", "seq", "ts", "payload")
"""The fields a written row must share with its queue line, in the order a mismatch is named."""

EXAMPLES = 5
"""How many examples of each kind of violation a report keeps."""

Content = tuple[str | None, int | None, int | None, str | bytes | None]
"""One queue line's ``key``, ``seq``, ``ts`` and payload as kept: see :meth:`QueueContent.add`."""

_INLINE_CHARS = 256  # a longer payload is kept as a 16-byte digest: memory per id stays bounded
_SHOWN_CHARS = 200  # an example's payload longer than this is cut
_UNPARSED: Any = object()
# The consumer's encoding (compact, key order kept): a correct row's payload text equals the queue's re-encoded.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# The comparison's: two payloads are the same JSON value iff their canonical texts are equal (so key order and
# whitespace do not matter, ``true`` is not ``1``; numbers compare as Python reads them: ``1`` is not ``1.0``).
_CANONICAL = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def compact_json(value: Any) -> str:
    """A JSON value as the consumer writes a payload: compact, key order kept."""
    return _COMPACT.encode(value)


def _digest(canonical: str) -> bytes:
    return hashlib.blake2b(canonical.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _canonical(text: str) -> str | None:
    """A payload text's canonical form; ``None`` when it is not JSON. (1e400 was written ``Infinity``: accepted.)"""
    try:
        return _CANONICAL.encode(json.loads(text))
    except (ValueError, RecursionError):
        return None


def _shown(text: str | None) -> Any:
    """A payload text as an example shows it: the JSON value, or the text (cut) when not JSON or long."""
    if text is None or len(text) > _SHOWN_CHARS:
        return None if text is None else text[:_SHOWN_CHARS] + "…"
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


@dataclass
class ContentCheck:
    """Rows compared with their queue lines: how many differ, by first differing field, with a few examples."""

    rows: int = 0
    mismatches: int = 0
    by_field: Counter[str] = field(default_factory=Counter)
    examples: list[dict[str, Any]] = field(default_factory=list)


class QueueContent:
    """Each valid id's content as the queue holds it, for comparing output rows with (``first``/``others``).

    Example:
        >>> content = QueueContent()
        >>> content.add({"id": "a", "key": "k", "seq": 1, "ts": 2, "payload": {"x": 1}})
        >>> check = ContentCheck()
        >>> content.check("a", "k", 1, 2, '{"x": 1}', check)
        >>> content.check("a", "k", 1, 3, '{"x":1}', check)
        >>> check.mismatches, check.examples[0]["field"]
        (1, 'ts')
    """

    def __init__(self, fields: tuple[str, ...] = CONTENT_FIELDS) -> None:
        unknown = set(fields) - set(CONTENT_FIELDS)
        if unknown:
            raise ValueError(f"unknown content field(s) {', '.join(sorted(unknown))}; choose from "
                             f"{', '.join(CONTENT_FIELDS)}")
        self.fields = tuple(f for f in CONTENT_FIELDS if f in fields)
        self._every_field = self.fields == CONTENT_FIELDS
        self.first: dict[str, Content] = {}
        """Each id's first line in queue order: what the consumer keeps."""
        self.others: dict[str, list[Content]] = {}
        """Ids repeated with changed content: the other versions (rare)."""

    def _keep(self, key: str | None, seq: int | None, ts: int | None, payload: str | None,
              value: Any = _UNPARSED) -> Content:
        """A row's fields as kept and compared; an ignored field is None on both sides, so equal tuples mean
        equal rows. A short payload is kept as the consumer writes it (a correct row then matches by plain
        string equality), a long one as the digest of its canonical text (``value``: the payload, if parsed)."""
        fields = self.fields
        kept: str | bytes | None = None
        if "payload" in fields and payload is not None:
            kept = payload
            if len(payload) > _INLINE_CHARS:
                canonical = _canonical(payload) if value is _UNPARSED else _CANONICAL.encode(value)
                kept = payload if canonical is None else _digest(canonical)
        return (key if "key" in fields else None,
                seq if "seq" in fields else None, ts if "ts" in fields else None, kept)

    def add(self, record: dict[str, Any]) -> None:
        """Remember a valid record (as :func:`~tenure.career.queue.classify_line` returns it), in queue order."""
        value = record["payload"]
        payload = _COMPACT.encode(value)
        key = sys.intern(record["key"])  # a few keys shared by many ids are kept once
        if self._every_field and len(payload) <= _INLINE_CHARS:  # the common case, inlined: this runs per line
            kept: Content = (key, record["seq"], record["ts"], payload)
        else:
            kept = self._keep(key, record["seq"], record["ts"], payload, value)
        known = self.first.setdefault(record["id"], kept)
        if known is not kept and known != kept:
            versions = self.others.setdefault(record["id"], [])
            if kept not in versions:
                versions.append(kept)

    def check_rows(self, ids: list[Any], keys: list[Any], seqs: list[Any], tss: list[Any], payloads: list[Any],
                   check: ContentCheck, where: str = "table") -> None:
        """Compare output rows (as columns; a field not compared may be all None) with their queue versions.

        A row passes when it equals any version of its id (the consumer keeps the first; a repeat with changed
        content is not its fault); otherwise it is counted, named by the first field in which it differs from
        the first version, and kept as an example. A row of an id the queue lacks is skipped (unexpected).
        """
        first = self.first
        compared = 0
        for rid, found in zip(ids, zip(keys, seqs, tss, payloads, strict=True), strict=True):
            expected = first.get(rid)
            if expected is None:
                continue
            compared += 1
            if expected != found:  # the fast path: equal fields and the same payload text
                self._compare(rid, expected, found, check, where)
        check.rows += compared

    def check(self, rid: str, key: str, seq: int, ts: int, payload: str, check: ContentCheck,
              where: str = "table") -> None:
        """:meth:`check_rows` for one row."""
        self.check_rows([rid], [key], [seq], [ts], [payload], check, where)

    def _compare(self, rid: str, expected: Content, row: Content, check: ContentCheck, where: str) -> None:
        payload = row[3] if isinstance(row[3], str) else None
        found = self._keep(*row[:3], payload)
        versions = (expected, *self.others.get(rid, ()))
        if found in versions:
            return
        differing = [self._differs(version, found, payload) for version in versions]
        name = differing[0]
        if name is None or None in differing:
            return  # the same JSON payload, spelt differently
        check.mismatches += 1
        check.by_field[name] += 1
        if len(check.examples) < EXAMPLES:
            index = CONTENT_FIELDS.index(name)
            want: Any = expected[index]
            got: Any = row[index]
            if name == "payload":
                want = _shown(want) if isinstance(want, str) else "(a long payload, kept as a digest)"
                got = _shown(payload) if payload is not None or got is None else got
            if not isinstance(got, str | int | float | bool | dict | list | None):
                got = repr(got)[:_SHOWN_CHARS]  # a column of another type (a timestamp, say): shown, not dumped
            example = {"id": rid, "in": where, "field": name, "expected": want, "found": got}
            if len(versions) > 1:
                example["queue_versions"] = len(versions)
            check.examples.append(example)

    def _differs(self, expected: Content, found: Content, payload: str | None) -> str | None:
        """The first field in which a row differs from one queue version, or None when they are equal."""
        for index, name in enumerate(CONTENT_FIELDS[:3]):
            if expected[index] != found[index]:
                return name  # an ignored field is None on both sides
        want = expected[3]
        if want == found[3]:
            return None
        canonical = None if payload is None else _canonical(payload)
        if canonical is None or want is None:
            return "payload"  # a null or non-JSON payload in the row
        same = _digest(canonical) == want if isinstance(want, bytes) else _canonical(want) == canonical
        return None if same else "payload"
