"""Late records for ``tenure verify``: quarantined as ``late`` instead of written, each claim checked."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tenure.service.ops._verify._content import EXAMPLES, ContentCheck, QueueContent, compact_json

__all__ = ["LATE_REASON", "LateCheck", "LateRow", "PublishedSeqs", "check_late"]

LATE_REASON = "late"
"""The quarantine ``reason`` of a valid record whose ``seq`` its key had already passed in an earlier batch."""


@dataclass(frozen=True)
class LateRow:
    """One quarantine row of reason ``late``: where its line was, its batch, and the record its ``value`` holds."""

    file: str
    """The queue file's base name."""
    line: int
    batch: int
    record: dict[str, Any] | None
    """The record ``value`` holds; None when it holds no valid record."""


class PublishedSeqs:
    """Per key, the highest ``seq`` in ``table/`` or ``dead-letter/`` up to each batch: what a late claim is
    checked against (a dead-lettered record moves its key past it, as a written one does).

    Example:
        >>> seqs = PublishedSeqs([("k", 1, 5), ("k", 3, 7), ("k", 3, 6)])
        >>> seqs.highest_before("k", 3), seqs.highest_before("k", 4), seqs.highest_before("j", 9)
        (5, 7, None)
    """

    def __init__(self, rows: list[tuple[str, int, int]]) -> None:
        """``rows``: ``(key, _batch, seq)`` of the rows in ``table/`` and ``dead-letter/`` (of the keys that
        matter), in any order."""
        highest: dict[str, dict[int, int]] = defaultdict(dict)
        for key, batch, seq in rows:
            per_batch = highest[key]
            per_batch[batch] = max(seq, per_batch.get(batch, seq))
        self._batches: dict[str, list[int]] = {}
        self._running: dict[str, list[int]] = {}  # the highest seq in this batch or any earlier one
        for key, per_batch in highest.items():
            ordered = sorted(per_batch)
            running: list[int] = []
            for batch in ordered:
                running.append(max(per_batch[batch], running[-1]) if running else per_batch[batch])
            self._batches[key], self._running[key] = ordered, running

    def highest_before(self, key: str, batch: int) -> int | None:
        """The highest ``seq`` of ``key`` published by a batch before ``batch``; None if there is none."""
        batches = self._batches.get(key)
        if batches is None:
            return None
        index = bisect.bisect_left(batches, batch)
        return self._running[key][index - 1] if index else None


@dataclass
class LateCheck:
    """Late rows counted, matched with the queue, and their claims checked."""

    ids: set[str] = field(default_factory=set)
    rows: int = 0
    duplicated_lines: int = 0
    """Queue lines (file, line) quarantined as late more than once."""
    wrongly_late: int = 0
    """Late rows whose key had published or dead-lettered no equal or higher seq in an earlier batch (or holding
    no record)."""
    examples: dict[str, list[Any]] = field(default_factory=dict)


def check_late(rows: list[LateRow], published: PublishedSeqs, content: QueueContent,
               content_check: ContentCheck) -> LateCheck:
    """Check each late row: a valid record, equal to its queue line, and truly late.

    Truly late: its key has a row in ``table/`` or ``dead-letter/`` from an earlier ``_batch`` with a ``seq`` at
    least the record's.
    A late row's content is compared with the queue into ``content_check`` (``"in": "quarantine"``).
    """
    result = LateCheck(rows=len(rows))
    lines = Counter((row.file, row.line) for row in rows)
    twice = sorted(key for key, n in lines.items() if n > 1)
    result.duplicated_lines = len(twice)
    late: list[dict[str, Any]] = []
    wrong: list[dict[str, Any]] = []
    for row in sorted(rows, key=lambda r: (r.batch, r.file, r.line)):
        where = {"file": row.file, "line": row.line, "batch": row.batch}
        record = row.record
        if record is None:
            result.wrongly_late += 1
            wrong.append({**where, "why": "its value holds no valid record"})
            continue
        rid, key, seq = record["id"], record["key"], record["seq"]
        result.ids.add(rid)
        content.check(rid, key, seq, record["ts"], compact_json(record["payload"]), content_check,
                      where="quarantine")
        highest = published.highest_before(key, row.batch)
        if highest is None or highest < seq:
            result.wrongly_late += 1
            wrong.append({"id": rid, "key": key, "seq": seq, **where, "published_before": highest})
        else:
            late.append({"id": rid, "key": key, "seq": seq, "batch": row.batch, "published_before": highest})
    result.examples = {
        "late": late[:EXAMPLES],
        "wrongly_late": wrong[:EXAMPLES],
        "duplicated_late_lines": [{"file": f, "line": n, "rows": lines[(f, n)]} for f, n in twice[:EXAMPLES]],
    }
    return result
