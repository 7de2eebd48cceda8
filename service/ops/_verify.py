"""The auditor behind ``tenure verify``: exactly-once (I2) and per-key order (I3), from the files alone."""

from __future__ import annotations

import json
import os
import posixpath
import re
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterator, KeysView
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
from service.ops._verify_content import CONTENT_FIELDS, ContentCheck, QueueContent
from service.ops._verify_late import LATE_REASON, LateRow, PublishedSeqs, check_late
from service.ops._verify_report import VerifyReport

__all__ = [
    "CONTENT_FIELDS",
    "DEFAULT_MAX_LINE_BYTES",
    "FIELDS",
    "LATE_REASON",
    "REASONS",
    "VerifyError",
    "VerifyReport",
    "check_data_root",
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
    """The output cannot be audited: not a data root, or a Parquet file unreadable or lacking a required column."""


def check_data_root(data_root: str | os.PathLike[str], queue_dir: str | os.PathLike[str] | None = None) -> None:
    """Refuse a path that is not a data root (or a queue) before an audit reads it as merely empty.

    A data root is a directory holding at least one of ``landing/``, ``archive/`` and ``table/``; with
    ``queue_dir``, the data root need only be a directory and the queue must hold ``landing/`` or ``archive/``.
    (:func:`verify` itself reads an absent folder as empty: a consumer that is starting has none yet.)

    Raises:
        VerifyError: naming the path, what is wrong with it and the flag to fix.
    """
    root = Path(data_root)
    queue = None if queue_dir is None else Path(queue_dir)
    for path, what, flag in ((root, "data root", "--data-root"), (queue, "queue dir", "--queue-dir")):
        if path is not None and not path.is_dir():
            problem = "is not a directory" if path.exists() else "does not exist"
            raise VerifyError(f"{what} {path} {problem}: check {flag}")
    if queue is not None:
        if not any((queue / name).is_dir() for name in ("landing", "archive")):
            raise VerifyError(f"queue dir {queue} is not a queue (no landing/ or archive/ in it): check --queue-dir")
    elif not any((root / name).is_dir() for name in ("landing", "archive", "table")):
        raise VerifyError(f"{root} is not a data root (no landing/, archive/ or table/ in it): check --data-root")


def _read_columns(path: Path, columns: list[str], optional: tuple[str, ...] = ()) -> pa.Table:
    """``columns`` of a Parquet file, plus those of ``optional`` it has; a missing one of ``columns`` raises."""
    try:
        names = set(pq.read_schema(path).names)
        missing = [c for c in columns if c not in names]
        if missing:
            skippable = [c for c in missing if c in ("ts", "payload")]  # a transform may drop them
            hint = f": pass --ignore-field {skippable[0]} if the pipeline drops it" if skippable else ""
            raise VerifyError(f"{path} lacks column(s) {', '.join(missing)}; has {', '.join(sorted(names))}{hint}")
        return pq.read_table(path, columns=[*columns, *(c for c in optional if c in names)])
    except (OSError, pa.ArrowException) as exc:
        raise VerifyError(f"cannot read {path}: {exc}") from exc


@dataclass
class _QueueScan:
    content: QueueContent
    files: int = 0
    lines: int = 0
    valid_lines: int = 0
    bad: dict[tuple[str, int], str] = field(default_factory=dict)

    @property
    def ids(self) -> KeysView[str]:
        return self.content.first.keys()


def _scan_queue(data_root: Path, max_line_bytes: int, content: QueueContent) -> _QueueScan:
    scan = _QueueScan(content)
    bad = scan.bad
    add = content.add
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
                add(record)
        scan.lines += len(lines)
    return scan


@dataclass
class _TableScan:
    content: ContentCheck
    published: PublishedSeqs
    rows: int = 0
    ids_written: int = 0
    written: set[str | None] = field(default_factory=set)
    duplicated_ids: int = 0
    duplicated_examples: list[Any] = field(default_factory=list)
    inversions: int = 0
    inversion_examples: list[Any] = field(default_factory=list)


def _scan_table(folder: Path, content: QueueContent, late_keys: set[str]) -> _TableScan:
    """Read every published part file, in (batch, file, row) order: ids, order, content, and per key the seqs
    published by each batch for the keys in ``late_keys`` (to check late claims against)."""
    files = _parquet_files(folder)
    fields = content.fields
    check = ContentCheck()
    late_rows: list[tuple[str, int, int]] = []  # (key, batch, seq) of the keys in late_keys
    ids: list[pa.Array] = []
    keys: list[pa.Array] = []
    seqs: list[np.ndarray[Any, Any]] = []
    batches: list[np.ndarray[Any, Any]] = []
    file_idx: list[np.ndarray[Any, Any]] = []
    row_idx: list[np.ndarray[Any, Any]] = []
    rows = 0
    for index, path in enumerate(files):
        table = _read_columns(path, ["id", "key", "seq", "_batch", *(f for f in ("ts", "payload") if f in fields)])
        n = table.num_rows
        if n == 0:
            continue
        ids.append(table.column("id").combine_chunks().cast(pa.large_string()))
        keys.append(table.column("key").combine_chunks().cast(pa.large_string()))
        seqs.append(pc.fill_null(table.column("seq"), 0).to_numpy().astype(np.int64, copy=False))
        batches.append(pc.fill_null(table.column("_batch"), 0).to_numpy().astype(np.int64, copy=False))
        file_idx.append(np.full(n, index, dtype=np.int64))
        row_idx.append(np.arange(n, dtype=np.int64))
        rows += n
        # 1. Content: each row against its queue line (a field not compared is read as None).
        absent = [None] * n
        rid, key, seq, ts, payload = (table.column(name).to_pylist() if name in table.column_names else absent
                                      for name in ("id", "key", "seq", "ts", "payload"))
        content.check_rows(rid, key, seq, ts, payload, check)
        if late_keys:
            late_rows.extend(r for r in zip(key, table.column("_batch").to_pylist(), seq, strict=True)
                             if r[0] in late_keys)
    scan = _TableScan(check, PublishedSeqs(late_rows), rows=rows)
    if rows:
        _check_ids_and_order(scan, files, pa.concat_arrays(ids), pa.concat_arrays(keys), np.concatenate(seqs),
                             np.concatenate(batches), np.concatenate(file_idx), np.concatenate(row_idx))
    return scan


def _check_ids_and_order(scan: _TableScan, files: list[Path], all_ids: pa.Array, all_keys: pa.Array,
                         seq: np.ndarray[Any, Any], batch: np.ndarray[Any, Any], fidx: np.ndarray[Any, Any],
                         ridx: np.ndarray[Any, Any]) -> None:
    # 2. Duplicates: ids whose count is above one.
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
    # 3. Order: sort rows by (key, batch, file, row) and look for a seq that goes down within a key.
    key_codes = pc.dictionary_encode(all_keys)
    codes = key_codes.indices.to_numpy(zero_copy_only=False).astype(np.int64)
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


@dataclass
class _QuarantineScan:
    bad_rows: int = 0
    bad: Counter[tuple[str, int]] = field(default_factory=Counter)
    """Each (file, line) quarantined as a bad line, with its count of rows."""
    reasons: dict[tuple[str, int], str] = field(default_factory=dict)
    late: list[LateRow] = field(default_factory=list)


def _scan_quarantine(folder: Path) -> _QuarantineScan:
    """Bad-line rows by (file, line), and the rows of reason ``late`` (records, not bad lines) apart."""
    scan = _QuarantineScan()
    for path in _parquet_files(folder):
        table = _read_columns(path, ["source_file", "line", "reason"])
        is_late = pc.fill_null(pc.equal(table.column("reason"), LATE_REASON), False)
        if pc.any(is_late).as_py():
            late = _read_columns(path, ["source_file", "line", "value", "_batch"]).filter(is_late)
            for source, line, value, batch in zip(*(late.column(c).to_pylist() for c in late.column_names),
                                                  strict=True):
                raw = str(value or "").encode("utf-8", "replace")
                record, _ = classify_line(raw, max(len(raw), 1))
                scan.late.append(LateRow(_base_name(str(source)), -1 if line is None else int(line),
                                         -1 if batch is None else int(batch), record))
            table = table.filter(pc.invert(is_late))
        scan.bad_rows += table.num_rows
        columns = (table.column(name).to_pylist() for name in ("source_file", "line", "reason"))
        for source, line, reason in zip(*columns, strict=True):
            key = (_base_name(str(source)), int(line) if line is not None else -1)
            scan.bad[key] += 1
            scan.reasons.setdefault(key, str(reason))
    return scan


_SNAPSHOT = re.compile(r"batch-(\d+)-part-.+\.parquet")


@dataclass
class _RetryScan:
    dead: Counter[str] = field(default_factory=Counter)
    """Dead-lettered ids, with their row counts."""
    waiting: set[str] = field(default_factory=set)
    """Ids held in the current snapshot."""
    batch: int | None = None
    oldest_age_s: float | None = None
    examples: list[dict[str, Any]] = field(default_factory=list)


def _scan_retry_store(root: Path, now: float) -> _RetryScan:
    """Ids dead-lettered, and ids held in the current retry snapshot: every part of the newest batch's."""
    scan = _RetryScan()
    for path in _parquet_files(root / "dead-letter"):
        scan.dead.update(str(i) for i in _read_columns(path, ["id"]).column("id").to_pylist())
    snapshots: dict[int, list[Path]] = defaultdict(list)
    for path in _parquet_files(root / "retry"):
        match = _SNAPSHOT.fullmatch(path.name)
        if match:
            snapshots[int(match.group(1))].append(path)
    if not snapshots:
        return scan
    scan.batch = max(snapshots)  # older snapshots are superseded (deleted once the newer one is published)
    held: list[dict[str, Any]] = []
    for path in snapshots[scan.batch]:
        held.extend(_read_columns(path, ["id"], ("key", "attempts", "first_failed_at")).to_pylist())
    scan.waiting = {str(row["id"]) for row in held}
    # A record's age is since its first failure; one waiting behind its key's failed record has none.
    for row in held:
        first = row.get("first_failed_at")
        row["age_s"] = None if first is None else round(now - float(first), 3)
    ages = [row["age_s"] for row in held if row["age_s"] is not None]
    scan.oldest_age_s = max(ages) if ages else None
    held.sort(key=lambda r: (r["age_s"] is None, -(r["age_s"] or 0.0), str(r["id"])))
    scan.examples = [{k: row.get(k) for k in ("id", "key", "attempts", "age_s")} for row in held[:_EXAMPLES]]
    return scan


def verify(
    data_root: str | os.PathLike[str], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    queue_dir: str | os.PathLike[str] | None = None, allow_empty: bool = False,
    content_fields: Collection[str] = CONTENT_FIELDS, now: float | None = None,
) -> VerifyReport:
    """Audit a data root: each valid queue id written exactly once, as it was, in order; each bad line
    quarantined once.

    Every valid id is accounted for in exactly one of: written (``table/``), dead-lettered (``dead-letter/``),
    waiting for a retry (the newest snapshot in ``retry/``) — never none (lost), never two (duplicated) — or
    late (quarantined with reason ``late``: its key had published a seq at least its own in an earlier batch,
    which is checked; a late id may also be written, when a repeat came after the dedup window). Each row of
    ``table/``, and each late record, must hold its queue line's ``content_fields`` (the payload compared as a
    JSON value); when the queue holds an id several times with different content, any of them will do.

    Reads ``landing/`` and ``archive/`` (recursively) with :func:`classify_line`, independently of the
    pipeline, and ``table/``, ``quarantine/``, ``dead-letter/`` and ``retry/`` with pyarrow (``_``- and
    ``.``-prefixed folders and files are skipped; an absent folder is empty: see :func:`check_data_root`).
    Per-key order follows the output: by ``_batch``, then part file (sorted by path), then row. Run it once the
    consumer has caught up: ids still waiting in ``landing/`` count as lost, and ids whose queue files the
    archive's retention already deleted count as unexpected.

    Args:
        data_root: the data root (``landing/``, ``archive/``, ``table/``, ``quarantine/``).
        max_line_bytes: the pipeline's line size limit; must match it or oversized lines disagree.
        queue_dir: the folder holding ``landing/`` and ``archive/`` when the group reads a queue shared with
            other groups (``--queue-dir``); default: the data root.
        allow_empty: a queue without a valid id passes (by default it fails: nothing was audited).
        content_fields: the fields of :data:`CONTENT_FIELDS` a row must share with its queue line; leave out
            ``payload`` (or ``ts``) when a row function or transform rewrites it.
        now: the clock (Unix seconds) retry ages are measured against; default: now.

    Returns:
        The report; ``report.ok`` is False on any loss, duplicate, unexpected row, unquarantined bad line,
        order inversion, content mismatch or wrongly late record, or when the queue held no valid id.
    """
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes={max_line_bytes} must be at least 1")
    started = time.monotonic()
    root = Path(data_root)
    content = QueueContent(tuple(content_fields))
    queue = _scan_queue(root if queue_dir is None else Path(queue_dir), max_line_bytes, content)
    quarantine = _scan_quarantine(root / "quarantine")
    table = _scan_table(root / "table", content, {r.record["key"] for r in quarantine.late if r.record})
    late = check_late(quarantine.late, table.published, content, table.content)
    retry = _scan_retry_store(root, time.time() if now is None else now)

    def few(items: set[Any] | list[Any]) -> list[Any]:
        return sorted(items, key=str)[:_EXAMPLES]

    dead, waiting = retry.dead, retry.waiting
    accounted = table.written | dead.keys() | waiting | late.ids
    lost_ids = queue.ids - accounted
    unexpected = accounted - queue.ids
    # An id in two places (written and dead-lettered, say), or dead-lettered twice, is duplicated too. A late
    # id may also be written: a repeat later than the dedup window, checked as late like any other.
    twice = ((table.written & dead.keys()) | (table.written & waiting) | (dead.keys() & waiting)
             | {i for i, n in dead.items() if n > 1})
    duplicated_examples = table.duplicated_examples + [{"id": i, "places": "more than one of table, "
                                                        "dead-letter, retry"} for i in few(twice)]
    bad_keys = queue.bad.keys()
    quarantined = quarantine.bad
    unquarantined = bad_keys - quarantined.keys()
    unexpected_q = quarantined.keys() - bad_keys
    dup_bad = sorted(k for k, n in quarantined.items() if n > 1)
    q_reasons = quarantine.reasons
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
        "content_mismatches": table.content.examples,
        "waiting": retry.examples,
        **late.examples,
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
        quarantine_rows=quarantine.bad_rows,
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
        retry_batch=retry.batch,
        retry_oldest_age_s=retry.oldest_age_s,
        ids_late=len(late.ids),
        late_rows=late.rows,
        late_repeats=len(late.ids & table.written),
        wrongly_late=late.wrongly_late,
        duplicated_late_lines=late.duplicated_lines,
        changed_repeats=len(content.others),
        content_fields=content.fields,
        rows_compared=table.content.rows,
        content_mismatches=table.content.mismatches,
        content_mismatches_by_field=dict(table.content.by_field),
        allow_empty=allow_empty,
        bad_by_reason=dict(Counter(queue.bad.values())),
        examples={k: v for k, v in examples.items() if v},
    )
    _log.info("verified", ok=report.ok, ids_in=report.ids_in, written=report.ids_written, lost=report.lost,
              duplicated=report.duplicated, inversions=report.inversions, unexpected=report.unexpected,
              unquarantined=report.unquarantined, content_mismatches=report.content_mismatches,
              late=report.ids_late, wrongly_late=report.wrongly_late, seconds=report.seconds)
    return report
