"""The auditor behind ``tenure verify``: exactly-once (I2) and per-key order (I3), from the files alone."""

from __future__ import annotations

import json
import os
import posixpath
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import structlog

from election._errors import TenureError

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "FIELDS",
    "REASONS",
    "VerifyError",
    "VerifyReport",
    "classify_line",
    "iter_queue_files",
    "verify",
]

DEFAULT_MAX_LINE_BYTES = 1 << 20
"""A line of more bytes than this (its ``\\n`` not counted) is ``oversized``; 1 MiB, the pipeline default."""

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
"""Every reason :func:`classify_line` returns: the quarantine ``reason`` vocabulary, shared with Spark."""

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_EXAMPLES = 5  # how many examples of each violation a report keeps

_log = structlog.get_logger("tenure.verify")


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN/Infinity; RFC 8259 does not, and neither does a Parquet int column.
    raise ValueError(f"non-standard JSON constant {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # stateless, so one shared instance is safe
_JSON_WS = " \t\r\n"  # RFC 8259 whitespace; str.strip() would also strip Unicode spaces JSON rejects


def classify_line(
    raw: bytes, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[dict[str, Any] | None, str | None]:
    """Validate one queue line: the one definition of a good record, shared by verify, tests and the pipeline.

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


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def iter_queue_files(data_root: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield every queue file under ``landing/`` and ``archive/``, recursively, in a stable order.

    A queue file ends in ``.jsonl``; names (of files and of folders on the way) starting with ``.`` or ``_``
    are skipped, as Spark's file source skips them: they are files still being written, or internal folders.

    Args:
        data_root: the data root holding ``landing/`` and ``archive/`` (either may be absent).
    """
    root = Path(data_root)
    for top in (root / "landing", root / "archive"):
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if not _hidden(d))
            for name in sorted(filenames):
                if name.endswith(".jsonl") and not _hidden(name):
                    yield Path(dirpath) / name


def _iter_lines(path: Path) -> Iterator[bytes]:
    """The lines of a file split on ``\\n`` (the final line needs no terminator); an empty file has none."""
    with path.open("rb") as handle:
        for line in handle:
            yield line[:-1] if line.endswith(b"\n") else line


def _base_name(source_file: str) -> str:
    """A quarantine ``source_file`` (a path, or a ``file:`` URI as from ``input_file_name()``) → base name."""
    if source_file.startswith("file:"):
        source_file = unquote(urlparse(source_file).path)
    return posixpath.basename(source_file.rstrip("/"))


def _parquet_files(folder: Path) -> list[Path]:
    """Published Parquet files under ``folder`` (``_``/``.``-prefixed files and folders skipped), by path."""
    if not folder.is_dir():
        return []
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not _hidden(d)]
        found.extend(Path(dirpath) / n for n in filenames if n.endswith(".parquet") and not _hidden(n))
    return sorted(found)


class VerifyError(TenureError):
    """The output cannot be audited: a Parquet file is unreadable or lacks a column the layout requires."""


def _read_columns(path: Path, columns: list[str]) -> pa.Table:
    try:
        names = set(pq.read_schema(path).names)
        missing = [c for c in columns if c not in names]
        if missing:
            raise VerifyError(f"{path} lacks column(s) {', '.join(missing)}; has {', '.join(sorted(names))}")
        return pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowException) as exc:
        raise VerifyError(f"cannot read {path}: {exc}") from exc


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found; ``ok`` is the verdict, :meth:`render` and :meth:`to_json` present it.

    Counts of ids are of distinct ids; counts of bad lines are of distinct ``(file base name, line)`` pairs.

    Example:
        >>> report = verify("/srv/tenure")  # doctest: +SKIP
        >>> print(report.render()); raise SystemExit(0 if report.ok else 1)  # doctest: +SKIP
    """

    data_root: str
    queue_files: int
    queue_lines: int
    ids_in: int
    repeated_lines_in: int
    ids_written: int
    rows_written: int
    bad_lines_in: int
    quarantined: int
    quarantine_rows: int
    lost: int
    duplicated_ids: int
    duplicated_bad_lines: int
    unexpected_ids: int
    unexpected_quarantined: int
    unquarantined: int
    inversions: int
    reason_mismatches: int
    seconds: float
    ids_dead_lettered: int = 0
    ids_waiting: int = 0
    bad_by_reason: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def duplicated(self) -> int:
        """Ids written more than once plus bad lines quarantined more than once."""
        return self.duplicated_ids + self.duplicated_bad_lines

    @property
    def unexpected(self) -> int:
        """Written ids absent from the queue plus quarantine rows naming no bad line of the queue."""
        return self.unexpected_ids + self.unexpected_quarantined

    @property
    def ok(self) -> bool:
        """True iff nothing is lost, duplicated, unexpected, unquarantined or out of order."""
        return self.lost == self.duplicated == self.inversions == self.unquarantined == self.unexpected == 0

    def summary_line(self) -> str:
        """The one-line verdict, e.g. ``verify: OK — 100 ids in, 100 written, 0 lost, …``."""
        verdict = "OK" if self.ok else "FAILED"
        retry = (f"{self.ids_dead_lettered} dead-lettered, {self.ids_waiting} waiting for retry, "
                 if self.ids_dead_lettered or self.ids_waiting else "")
        return (
            f"verify: {verdict} — {self.ids_in} ids in, {self.ids_written} written, {retry}{self.lost} lost, "
            f"{self.duplicated} duplicated, {self.inversions} inversions; "
            f"{self.bad_lines_in} bad lines, {self.quarantined} quarantined"
        )

    def render(self) -> str:
        """A human summary: the verdict line, a short table of counts, then examples of each violation."""
        rows = [
            ("queue files / lines", f"{self.queue_files} / {self.queue_lines}"),
            ("distinct valid ids in", str(self.ids_in)),
            ("repeated valid lines in", str(self.repeated_lines_in)),
            ("ids written / rows", f"{self.ids_written} / {self.rows_written}"),
            ("ids dead-lettered / waiting", f"{self.ids_dead_lettered} / {self.ids_waiting}"),
            ("bad lines in", str(self.bad_lines_in)),
            ("quarantined / rows", f"{self.quarantined} / {self.quarantine_rows}"),
            ("lost", str(self.lost)),
            ("duplicated ids", str(self.duplicated_ids)),
            ("duplicated quarantine", str(self.duplicated_bad_lines)),
            ("unexpected ids", str(self.unexpected_ids)),
            ("unexpected quarantine", str(self.unexpected_quarantined)),
            ("bad lines not quarantined", str(self.unquarantined)),
            ("order inversions", str(self.inversions)),
            ("reason mismatches (info)", str(self.reason_mismatches)),
            ("seconds", f"{self.seconds:.2f}"),
        ]
        width = max(len(label) for label, _ in rows)
        lines = [self.summary_line(), *(f"  {label:<{width}}  {value}" for label, value in rows)]
        if self.bad_by_reason:
            reasons = ", ".join(f"{r}={n}" for r, n in sorted(self.bad_by_reason.items()))
            lines.append(f"  bad lines by reason: {reasons}")
        for kind, items in sorted(self.examples.items()):
            if items:
                lines.append(f"  e.g. {kind}: " + "; ".join(json.dumps(i, sort_keys=True) for i in items))
        return "\n".join(lines)

    def to_json(self) -> str:
        """All counts, the verdict and the examples as one JSON object (a single line)."""
        body: dict[str, Any] = {
            "ok": self.ok,
            "duplicated": self.duplicated,
            "unexpected": self.unexpected,
        }
        for name in self.__dataclass_fields__:
            body[name] = getattr(self, name)
        return json.dumps(body, sort_keys=True)


@dataclass
class _QueueScan:
    files: int = 0
    lines: int = 0
    valid_lines: int = 0
    ids: set[str] = field(default_factory=set)
    bad: dict[tuple[str, int], str] = field(default_factory=dict)


def _scan_queue(data_root: Path, max_line_bytes: int) -> _QueueScan:
    scan = _QueueScan()
    ids = scan.ids
    bad = scan.bad
    seen: set[str] = set()
    for path in iter_queue_files(data_root):
        # A running leader moves consumed files from landing/ to archive/ while we read: a file read in
        # landing/ shows up again in archive/ (skip it), and one gone before we opened it is found there later,
        # because archive/ is walked after landing/.
        if path.name in seen:
            continue
        try:
            lines = list(enumerate(_iter_lines(path), start=1))
        except FileNotFoundError:
            continue
        seen.add(path.name)
        scan.files += 1
        name = path.name
        for number, raw in lines:
            record, reason = classify_line(raw, max_line_bytes)
            if record is None:
                bad[(name, number)] = reason or "?"
            else:
                scan.valid_lines += 1
                ids.add(record["id"])
        scan.lines += len(lines)
    return scan


@dataclass
class _TableScan:
    rows: int = 0
    ids_written: int = 0
    written: set[str | None] = field(default_factory=set)
    duplicated_ids: int = 0
    duplicated_examples: list[Any] = field(default_factory=list)
    inversions: int = 0
    inversion_examples: list[Any] = field(default_factory=list)


def _scan_table(folder: Path) -> _TableScan:
    """Read ids, keys, seqs and batches of every published part file, in (batch, file, row) order."""
    scan = _TableScan()
    files = _parquet_files(folder)
    if not files:
        return scan
    ids: list[pa.Array] = []
    keys: list[pa.Array] = []
    seqs: list[np.ndarray[Any, Any]] = []
    batches: list[np.ndarray[Any, Any]] = []
    file_idx: list[np.ndarray[Any, Any]] = []
    row_idx: list[np.ndarray[Any, Any]] = []
    for index, path in enumerate(files):
        table = _read_columns(path, ["id", "key", "seq", "_batch"])
        n = table.num_rows
        if n == 0:
            continue
        ids.append(table.column("id").combine_chunks().cast(pa.large_string()))
        keys.append(table.column("key").combine_chunks().cast(pa.large_string()))
        seqs.append(pc.fill_null(table.column("seq"), 0).to_numpy().astype(np.int64, copy=False))
        batches.append(pc.fill_null(table.column("_batch"), 0).to_numpy().astype(np.int64, copy=False))
        file_idx.append(np.full(n, index, dtype=np.int64))
        row_idx.append(np.arange(n, dtype=np.int64))
        scan.rows += n
    if scan.rows == 0:
        return scan
    all_ids = pa.concat_arrays(ids)
    # 1. Duplicates: ids whose count is above one.
    counts = pc.value_counts(all_ids)
    values = counts.field("values")
    times = counts.field("counts")
    scan.ids_written = len(counts)
    repeated = pc.greater(times, 1)
    scan.duplicated_ids = int(pc.sum(repeated).as_py() or 0)
    if scan.duplicated_ids:
        dup_values = pc.filter(values, repeated).to_pylist()
        dup_times = pc.filter(times, repeated).to_pylist()
        scan.duplicated_examples = [
            {"id": i, "rows": t} for i, t in sorted(zip(dup_values, dup_times, strict=True),
                                                     key=lambda p: str(p[0]))[:_EXAMPLES]
        ]
    scan.written = set(values.to_pylist())
    # 2. Order: sort rows by (key, batch, file, row) and look for a seq that goes down within a key.
    key_codes = pc.dictionary_encode(pa.concat_arrays(keys))
    codes = key_codes.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    seq = np.concatenate(seqs)
    batch = np.concatenate(batches)
    fidx = np.concatenate(file_idx)
    ridx = np.concatenate(row_idx)
    order = np.lexsort((ridx, fidx, batch, codes))  # the last key is the primary one
    k = codes[order]
    s = seq[order]
    down = (k[1:] == k[:-1]) & (s[1:] < s[:-1])
    scan.inversions = int(down.sum())
    if scan.inversions:
        dictionary = key_codes.dictionary
        for pos in np.flatnonzero(down)[:_EXAMPLES]:
            before, after = order[pos], order[pos + 1]
            scan.inversion_examples.append({
                "key": dictionary[int(k[pos])].as_py(),
                "seq_before": int(seq[before]), "batch_before": int(batch[before]),
                "file_before": files[int(fidx[before])].name,
                "seq_after": int(seq[after]), "batch_after": int(batch[after]),
                "file_after": files[int(fidx[after])].name,
            })
    return scan


def _scan_quarantine(folder: Path) -> tuple[int, Counter[tuple[str, int]], dict[tuple[str, int], str]]:
    rows = 0
    seen: Counter[tuple[str, int]] = Counter()
    reasons: dict[tuple[str, int], str] = {}
    for path in _parquet_files(folder):
        table = _read_columns(path, ["source_file", "line", "reason"])
        rows += table.num_rows
        columns = (table.column(name).to_pylist() for name in ("source_file", "line", "reason"))
        for source, line, reason in zip(*columns, strict=True):
            key = (_base_name(str(source)), int(line) if line is not None else -1)
            seen[key] += 1
            reasons.setdefault(key, str(reason))
    return rows, seen, reasons


def _scan_retry_store(root: Path) -> tuple[Counter[str], set[str]]:
    """Ids dead-lettered (with their row counts) and ids held in the newest published retry snapshot."""
    dead: Counter[str] = Counter()
    for path in _parquet_files(root / "dead-letter"):
        dead.update(str(i) for i in _read_columns(path, ["id"]).column("id").to_pylist())
    snapshots = sorted((root / "retry").glob("batch-*.parquet")) if (root / "retry").is_dir() else []
    waiting = set(str(i) for i in _read_columns(snapshots[-1], ["id"]).column("id").to_pylist()) if snapshots \
        else set()
    return dead, waiting


def verify(
    data_root: str | os.PathLike[str], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    queue_dir: str | os.PathLike[str] | None = None,
) -> VerifyReport:
    """Audit a data root: each valid queue id written exactly once, each bad line quarantined once, in order.

    With a row function, an id may instead be dead-lettered (``dead-letter/``) or still waiting for a retry
    (the newest snapshot in ``retry/``): each id is accounted for in exactly one of written, dead-lettered or
    waiting — never none (lost), never two (duplicated).

    Reads ``landing/`` and ``archive/`` (recursively) with :func:`classify_line`, independently of the
    pipeline, and ``table/`` and ``quarantine/`` with pyarrow (``_``- and ``.``-prefixed folders and files
    are skipped; an absent folder is empty). Per-key order follows the output: by ``_batch``, then part file
    (sorted by path), then row. Run it once the consumer has caught up: ids still waiting in ``landing/``
    count as lost, and ids whose queue files the archive's retention already deleted count as unexpected.

    Args:
        data_root: the data root (``landing/``, ``archive/``, ``table/``, ``quarantine/``).
        max_line_bytes: the pipeline's line size limit; must match it or oversized lines disagree.
        queue_dir: the folder holding ``landing/`` and ``archive/`` when the group reads a queue shared with
            other groups (``--queue-dir``); default: the data root.

    Returns:
        The report; ``report.ok`` is False on any loss, duplicate, unexpected row, unquarantined bad line or
        order inversion.
    """
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes={max_line_bytes} must be at least 1")
    started = time.monotonic()
    root = Path(data_root)
    queue = _scan_queue(root if queue_dir is None else Path(queue_dir), max_line_bytes)
    table = _scan_table(root / "table")
    quarantine_rows, quarantined, q_reasons = _scan_quarantine(root / "quarantine")

    def few(items: set[Any] | list[Any]) -> list[Any]:
        return sorted(items, key=str)[:_EXAMPLES]

    dead, waiting = _scan_retry_store(root)
    accounted = table.written | dead.keys() | waiting
    lost_ids = queue.ids - accounted
    unexpected = accounted - queue.ids
    # An id in two places (written and dead-lettered, say), or dead-lettered twice, is duplicated too.
    twice = ((table.written & dead.keys()) | (table.written & waiting) | (dead.keys() & waiting)
             | {i for i, n in dead.items() if n > 1})
    duplicated_examples = table.duplicated_examples + [{"id": i, "places": "more than one of table, "
                                                        "dead-letter, retry"} for i in few(twice)]
    bad_keys = queue.bad.keys()
    unquarantined = bad_keys - quarantined.keys()
    unexpected_q = quarantined.keys() - bad_keys
    dup_bad = sorted(k for k, n in quarantined.items() if n > 1)
    mismatched = sorted(k for k in bad_keys & quarantined.keys() if q_reasons[k] != queue.bad[k])

    examples: dict[str, list[Any]] = {
        "lost": few(lost_ids),
        "duplicated_ids": duplicated_examples[:_EXAMPLES],
        "duplicated_bad_lines": [
            {"file": f, "line": n, "rows": quarantined[(f, n)]} for f, n in dup_bad[:_EXAMPLES]
        ],
        "unexpected_ids": few(unexpected),
        "unexpected_quarantined": [{"file": f, "line": n} for f, n in few(unexpected_q)],
        "unquarantined": [{"file": f, "line": n, "reason": queue.bad[(f, n)]} for f, n in few(unquarantined)],
        "inversions": table.inversion_examples,
        "reason_mismatches": [
            {"file": f, "line": n, "expected": queue.bad[(f, n)], "quarantined": q_reasons[(f, n)]}
            for f, n in mismatched[:_EXAMPLES]
        ],
    }
    report = VerifyReport(
        data_root=str(root),
        queue_files=queue.files,
        queue_lines=queue.lines,
        ids_in=len(queue.ids),
        repeated_lines_in=queue.valid_lines - len(queue.ids),
        ids_written=table.ids_written,
        rows_written=table.rows,
        bad_lines_in=len(queue.bad),
        quarantined=len(quarantined),
        quarantine_rows=quarantine_rows,
        lost=len(lost_ids),
        duplicated_ids=table.duplicated_ids + len(twice),
        duplicated_bad_lines=len(dup_bad),
        unexpected_ids=len(unexpected),
        unexpected_quarantined=len(unexpected_q),
        unquarantined=len(unquarantined),
        inversions=table.inversions,
        reason_mismatches=len(mismatched),
        seconds=round(time.monotonic() - started, 3),
        ids_dead_lettered=len(dead),
        ids_waiting=len(waiting),
        bad_by_reason=dict(Counter(queue.bad.values())),
        examples={k: v for k, v in examples.items() if v},
    )
    _log.info("verified", ok=report.ok, ids_in=report.ids_in, written=report.ids_written, lost=report.lost,
              duplicated=report.duplicated, inversions=report.inversions, unexpected=report.unexpected,
              unquarantined=report.unquarantined, seconds=report.seconds)
    return report
