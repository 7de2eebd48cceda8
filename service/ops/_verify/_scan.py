"""What each input of ``tenure verify`` holds: the queues, ``table/``, ``quarantine/`` and the retry store.

Each scan reads one input once and keeps only what the audit compares (ids, bad lines, per-key order, content,
and the ``(_queue, _batch, _epoch)`` triples the commit records are checked with). A topic of several queues is
scanned queue by queue into one scan of each kind, its files named with their queue (``_files.qualified``).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import KeysView
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tenure.career.output import has_version, part_of
from tenure.career.queue import (
    ENTRY_LINE,
    ENTRY_REASONS,
    QUEUE_COLUMN,
    WRONG_QUEUE,
    FileIdentity,
    QueueLayout,
    classify_line,
    printable_name,
    queue_of,
)
from tenure.career.set_aside import published, read_set_aside
from tenure.service.ops._verify._content import EXAMPLES, ContentCheck, QueueContent
from tenure.service.ops._verify._files import (
    Consumption,
    base_name,
    iter_lines,
    iter_queue_files,
    output_files,
    parquet_files,
    qualified,
    read_columns,
)
from tenure.service.ops._verify._late import LATE_REASON, LateRow

__all__ = [
    "QuarantineScan",
    "QueueScan",
    "RefusedScan",
    "RetryScan",
    "SetAsideScan",
    "TableScan",
    "batch_epochs",
    "scan_quarantine",
    "scan_queue",
    "scan_refused",
    "scan_retry_store",
    "scan_set_aside",
    "scan_table",
]


@dataclass
class QueueScan:
    """The queues' files and lines: each valid id's content (in ``content``), each bad line's reason, and what
    lies only in files the group has not read yet."""

    content: QueueContent
    files: int = 0
    lines: int = 0
    valid_lines: int = 0
    bad: dict[tuple[str, int], str] = field(default_factory=dict)
    """Bad lines by (file, line number), the file named with its queue in a topic of several
    (:func:`~tenure.service.ops._verify._files.qualified`)."""
    unread_files: list[str] = field(default_factory=list)
    """Files with lines that the group has not read yet, in queue order."""
    unread_ids: set[str] = field(default_factory=set)
    """Ids every copy of which is in a file not read yet."""
    unread_bad: set[tuple[str, int]] = field(default_factory=set)
    """Bad lines, by (file, line), of files not read yet."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Queue files ``verify`` could not read: name → the error (the audit fails unless the consumer refused them
    too)."""
    by_queue: dict[int, dict[str, int]] = field(default_factory=dict)
    """Each queue's figures: its files, lines, ids first seen in it, bad lines (``wrong_queue`` ones apart) and
    files not read yet."""

    @property
    def ids(self) -> KeysView[str]:
        return self.content.first.keys()


def scan_queue(queue: QueueLayout, max_line_bytes: int, consumption: Consumption, scan: QueueScan) -> None:
    """Classify every line of the queue's files (``landing/``, then ``archive/``), each file once, as found in that
    queue (a record of another queue's key is ``wrong_queue``), into ``scan``, and set apart what only files
    ``consumption`` (the group's of this queue) has not read hold."""
    content = scan.content
    bad, unread_ids, unread_bad = scan.bad, scan.unread_ids, scan.unread_bad
    add = content.add
    first = content.first
    archive = queue.archive
    k, n = queue.queue, queue.queues
    files, lines_in, ids_before, bad_before, misrouted, unread_before = 0, 0, len(first), len(bad), 0, \
        len(scan.unread_files)
    seen: set[tuple[int, int]] = set()
    for path in iter_queue_files(queue):
        # A running leader moves consumed files from landing/ to archive/ while we read: a file read in
        # landing/ shows up again in archive/ (the same inode: skip it), and one gone before we opened it is found
        # there later, because archive/ is walked after landing/. A name used again is another file.
        try:
            stat = path.stat()
            if (stat.st_dev, stat.st_ino) in seen or not S_ISREG(stat.st_mode):  # a FIFO would block the open
                continue
            lines = list(enumerate(iter_lines(path), start=1))
        except FileNotFoundError:  # moved to archive/ meanwhile (found there), or a dangling link (no file)
            continue
        except OSError as exc:  # one this user may not read: the audit says so, unless the consumer refused it
            scan.unreadable[qualified(path.name, k, n)] = f"{type(exc).__name__}: {exc.strerror or exc}"
            continue
        seen.add((stat.st_dev, stat.st_ino))
        files += 1
        name = qualified(path.name, k, n)
        read = consumption.has_read(path.name, FileIdentity.of(stat), archived=path.is_relative_to(archive))
        if lines and not read:
            scan.unread_files.append(name)
        for number, raw in lines:
            record, reason = classify_line(raw, max_line_bytes, queue=k, queues=n)
            if record is None:
                bad[(name, number)] = reason or "?"
                misrouted += reason == WRONG_QUEUE
                if not read:
                    unread_bad.add((name, number))
            else:
                scan.valid_lines += 1
                rid = record["id"]
                if read:
                    unread_ids.discard(rid)
                elif rid not in first:  # a first copy in a file not read yet: waiting until a read copy shows
                    unread_ids.add(rid)
                add(record)
        lines_in += len(lines)
    scan.files += files
    scan.lines += lines_in
    scan.by_queue[k] = {"files": files, "lines": lines_in, "ids_in": len(first) - ids_before,
                        "bad_lines_in": len(bad) - bad_before, "wrong_queue": misrouted,
                        "waiting_files": len(scan.unread_files) - unread_before}


BatchEpochs = set[tuple[int, int, int]]
"""Distinct ``(_queue, _batch, _epoch)`` triples of an output's rows: which term published each batch of each queue
(queue 0 for the rows of a topic of one queue, which have no ``_queue``)."""


def batch_epochs(table: pa.Table) -> BatchEpochs:
    """The distinct ``(_queue, _batch, _epoch)`` triples of ``table``'s rows (a missing value reads as -1, a missing
    ``_queue`` column as queue 0)."""
    queue = (pc.fill_null(table.column(QUEUE_COLUMN), -1) if QUEUE_COLUMN in table.column_names
             else pa.array([0] * table.num_rows, pa.int64()))
    triples = pa.table({"q": queue, **{c: pc.fill_null(table.column(c), -1) for c in ("_batch", "_epoch")}})
    distinct = triples.group_by(["q", "_batch", "_epoch"]).aggregate([])
    return set(zip(distinct.column("q").to_pylist(), distinct.column("_batch").to_pylist(),
                   distinct.column("_epoch").to_pylist(), strict=True))


@dataclass
class TableScan:
    """``table/``'s rows: ids written (and written twice), order inversions, content compared, late checks' seqs,
    rows in another queue than their key's, and each queue's rows."""

    content: ContentCheck
    late_seqs: list[tuple[str, int, int]]
    """``(key, _batch, seq)`` of the rows whose key is in ``late_keys``."""
    rows: int = 0
    ids_written: int = 0
    written: set[str | None] = field(default_factory=set)
    duplicated_ids: int = 0
    duplicated_examples: list[Any] = field(default_factory=list)
    inversions: int = 0
    inversion_examples: list[Any] = field(default_factory=list)
    batch_epochs: BatchEpochs = field(default_factory=set)
    misrouted: int = 0
    """Rows whose ``_queue`` is not their key's queue (:func:`tenure.career.queue.queue_of`)."""
    misrouted_examples: list[Any] = field(default_factory=list)
    by_queue: Counter[int] = field(default_factory=Counter)
    """Rows per queue."""


def scan_table(folder: Path, content: QueueContent, late_keys: set[str],
               replayed: set[str] | None = None, queues: int = 1) -> TableScan:
    """Read every file a reader sees (:func:`output_files`), in (batch, file, row) order: ids, order, content, and
    per key the seqs published by each batch for the keys in ``late_keys`` (to check late claims against). The rows
    of ``replayed`` ids (set-aside records an operator replayed, written past their keys' order on purpose) are
    left out of the order check: the other rows' order is checked without them. In a topic of ``queues`` > 1, each
    row's ``_queue`` must be its key's queue, and a key's order is checked within its queue's batches.

    A file tenure did not write (table maintenance rewrote batches into it: ``OPTIMIZE``) keeps no order within a
    batch that a reader could rely on — a Delta reader reads a version's files in any order, and a Z-order
    rewrite reorders rows — so its rows are taken by ``seq`` within their batch: across batches, their order is
    checked as any other's."""
    files = output_files(folder)
    delta = has_version(folder)
    fields = content.fields
    check = ContentCheck()
    late_rows: list[tuple[str, int, int]] = []  # (key, batch, seq) of the keys in late_keys
    ids: list[pa.Array] = []
    keys: list[pa.Array] = []
    seqs: list[np.ndarray[Any, Any]] = []
    batches: list[np.ndarray[Any, Any]] = []
    queue_of_row: list[np.ndarray[Any, Any]] = []
    file_idx: list[np.ndarray[Any, Any]] = []  # the order within a batch: a file's own, -1 for rewritten ones
    row_idx: list[np.ndarray[Any, Any]] = []
    origin: list[np.ndarray[Any, Any]] = []  # the file each row is in, for examples
    rows = 0
    epochs: BatchEpochs = set()
    for index, path in enumerate(files):
        table = read_columns(path, ["id", "key", "seq", "_batch", "_epoch",
                                    *(f for f in ("ts", "payload") if f in fields)], (QUEUE_COLUMN,))
        n = table.num_rows
        if n == 0:
            continue
        epochs |= batch_epochs(table)
        ids.append(table.column("id").combine_chunks().cast(pa.large_string()))
        keys.append(table.column("key").combine_chunks().cast(pa.large_string()))
        seqs.append(pc.fill_null(table.column("seq"), 0).to_numpy().astype(np.int64, copy=False))
        batches.append(pc.fill_null(table.column("_batch"), 0).to_numpy().astype(np.int64, copy=False))
        queue_of_row.append(pc.fill_null(table.column(QUEUE_COLUMN), -1).to_numpy().astype(np.int64, copy=False)
                            if QUEUE_COLUMN in table.column_names else np.zeros(n, dtype=np.int64))
        rewritten = delta and part_of(path.name) is None
        file_idx.append(np.full(n, -1 if rewritten else index, dtype=np.int64))
        row_idx.append(seqs[-1] if rewritten else np.arange(n, dtype=np.int64))
        origin.append(np.full(n, index, dtype=np.int64))
        rows += n
        # 1. Content: each row against its queue line (a field not compared is read as None).
        absent = [None] * n
        rid, key, seq, ts, payload = (table.column(name).to_pylist() if name in table.column_names else absent
                                      for name in ("id", "key", "seq", "ts", "payload"))
        content.check_rows(rid, key, seq, ts, payload, check)
        if late_keys:
            late_rows.extend(r for r in zip(key, table.column("_batch").to_pylist(), seq, strict=True)
                             if r[0] in late_keys)
    scan = TableScan(check, late_rows, rows=rows, batch_epochs=epochs)
    if rows:
        _check_ids_and_order(scan, files, pa.concat_arrays(ids), pa.concat_arrays(keys), np.concatenate(seqs),
                             np.concatenate(batches), np.concatenate(file_idx), np.concatenate(row_idx),
                             np.concatenate(origin), replayed or set(), np.concatenate(queue_of_row), queues)
    return scan


def _check_ids_and_order(scan: TableScan, files: list[Path], all_ids: pa.Array, all_keys: pa.Array,
                         seq: np.ndarray[Any, Any], batch: np.ndarray[Any, Any], fidx: np.ndarray[Any, Any],
                         ridx: np.ndarray[Any, Any], origin: np.ndarray[Any, Any], replayed: set[str],
                         queue: np.ndarray[Any, Any], queues: int) -> None:
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
                                                     key=lambda p: str(p[0]))[:EXAMPLES]
        ]
    scan.written = set(values.to_pylist())
    # 3. Routing: each row in its key's queue (the queue of each distinct key, computed once).
    key_codes = pc.dictionary_encode(all_keys)
    codes = key_codes.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    values_by_queue, counts_by_queue = np.unique(queue, return_counts=True)
    scan.by_queue.update(dict(zip(values_by_queue.tolist(), counts_by_queue.tolist(), strict=True)))
    if queues > 1:
        routed = np.array([queue_of(str(k), queues) for k in key_codes.dictionary.to_pylist()], dtype=np.int64)
        wrong = np.flatnonzero(routed[codes] != queue)
        scan.misrouted = len(wrong)
        scan.misrouted_examples = [{"id": all_ids[int(i)].as_py(), "key": all_keys[int(i)].as_py(),
                                    "queue": int(queue[i]), "key_queue": int(routed[codes[i]]),
                                    "file": files[int(origin[i])].name} for i in wrong[:EXAMPLES]]
    # 4. Order: sort rows by (key, queue, batch, file, row; a rewritten file's rows by seq) and look for a seq that
    #    goes down within a key, the replayed rows left out.
    order = np.lexsort((ridx, fidx, batch, queue, codes))  # the last key is the primary one
    if replayed:
        exempt = pc.is_in(all_ids, value_set=pa.array(sorted(replayed), pa.large_string())).to_numpy(
            zero_copy_only=False)
        order = order[~exempt[order]]
    k = codes[order]
    s = seq[order]
    down = (k[1:] == k[:-1]) & (s[1:] < s[:-1])
    scan.inversions = int(down.sum())
    if scan.inversions:
        dictionary = key_codes.dictionary
        for pos in np.flatnonzero(down)[:EXAMPLES]:
            before, after = order[pos], order[pos + 1]
            scan.inversion_examples.append({
                "key": dictionary[int(k[pos])].as_py(),
                "seq_before": int(seq[before]), "batch_before": int(batch[before]),
                "file_before": files[int(origin[before])].name,
                "seq_after": int(seq[after]), "batch_after": int(batch[after]),
                "file_after": files[int(origin[after])].name,
            })


@dataclass
class QuarantineScan:
    """``quarantine/``'s rows: bad lines by (file, line) with their reasons; ``late`` records and refused entries
    apart."""

    bad_rows: int = 0
    bad: Counter[tuple[str, int]] = field(default_factory=Counter)
    """Each (file, line) quarantined as a bad line, with its count of rows."""
    reasons: dict[tuple[str, int], str] = field(default_factory=dict)
    late: list[LateRow] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    """Entries the consumer refused as a whole (a row at line 0 with one of ``ENTRY_REASONS``): name → reason."""
    batch_epochs: BatchEpochs = field(default_factory=set)
    by_queue: Counter[int] = field(default_factory=Counter)
    """Rows per queue (late ones and refused entries included)."""


def _entry_rows(table: pa.Table) -> pa.Array:
    """Which rows of a quarantine part are refused entries: at line 0, with one of ``ENTRY_REASONS``."""
    at_entry = pc.fill_null(pc.equal(table.column("line"), ENTRY_LINE), False)
    return pc.and_(at_entry, pc.fill_null(pc.is_in(table.column("reason"), pa.array(ENTRY_REASONS)), False))


def scan_quarantine(folder: Path, queues: int = 1) -> QuarantineScan:
    """Bad-line rows by (file, line); the rows of reason ``late`` (records, not bad lines) and the refused entries
    (whole files, not lines) apart. In a topic of ``queues`` > 1, each row's file is named with its ``_queue``."""
    scan = QuarantineScan()
    for path in output_files(folder):
        table = read_columns(path, ["source_file", "line", "reason", "_batch", "_epoch"], (QUEUE_COLUMN,))
        scan.batch_epochs |= batch_epochs(table)
        queue = (table.column(QUEUE_COLUMN).to_pylist() if QUEUE_COLUMN in table.column_names
                 else [0] * table.num_rows)
        scan.by_queue.update(Counter(-1 if q is None else int(q) for q in queue))
        table = table.append_column("q", pa.array(queue, pa.int64()))

        def name(source: object, q: int | None) -> str:
            return qualified(base_name(str(source)), -1 if q is None else q, queues)

        # The masks are of the whole part: its late rows' values are read again, of the same rows.
        entries = _entry_rows(table)
        is_late = pc.and_(pc.fill_null(pc.equal(table.column("reason"), LATE_REASON), False), pc.invert(entries))
        if pc.any(entries).as_py():
            refused = table.filter(entries)
            for source, reason, q in zip(*(refused.column(c).to_pylist() for c in ("source_file", "reason", "q")),
                                         strict=True):
                scan.refused[name(source, q)] = str(reason)
        if pc.any(is_late).as_py():
            late = read_columns(path, ["source_file", "line", "value", "_batch"]).filter(is_late)
            for source, line, value, batch, q in zip(*(late.column(c).to_pylist() for c in late.column_names),
                                                     table.filter(is_late).column("q").to_pylist(), strict=True):
                raw = str(value or "").encode("utf-8", "replace")
                record, _ = classify_line(raw, max(len(raw), 1))
                scan.late.append(LateRow(name(source, q), -1 if line is None else int(line),
                                         -1 if batch is None else int(batch), record))
        table = table.filter(pc.invert(pc.or_(entries, is_late)))
        scan.bad_rows += table.num_rows
        columns = (table.column(c).to_pylist() for c in ("source_file", "line", "reason", "q"))
        for source, line, reason, q in zip(*columns, strict=True):
            key = (name(source, q), int(line) if line is not None else -1)
            scan.bad[key] += 1
            scan.reasons.setdefault(key, str(reason))
    return scan


_SNAPSHOT = re.compile(r"batch-(\d+)-part-.+\.parquet")


@dataclass
class RetryScan:
    """The retry store: ids dead-lettered, ids waiting in the newest snapshot, how long the oldest waits, and
    the ids held longer than allowed."""

    dead: Counter[str] = field(default_factory=Counter)
    """Dead-lettered ids, with their row counts."""
    waiting: set[str] = field(default_factory=set)
    """Ids held in the current snapshot."""
    dead_seqs: list[tuple[str, int, int]] = field(default_factory=list)
    """``(key, _batch, seq)`` of the dead-lettered records whose key is in ``late_keys``."""
    batches: dict[int, int] = field(default_factory=dict)
    """Each queue's batch of its current snapshot (a queue without one: absent)."""
    held: Counter[int] = field(default_factory=Counter)
    """Records held per queue."""
    oldest_age_s: float | None = None
    examples: list[dict[str, Any]] = field(default_factory=list)
    too_old: set[str] = field(default_factory=set)
    """Held ids whose first failure is more than ``max_age_s`` ago."""
    too_old_examples: list[dict[str, Any]] = field(default_factory=list)
    batch_epochs: BatchEpochs = field(default_factory=set)
    """Of ``dead-letter/``'s rows."""


def scan_retry_store(dead_letter: Path, retry: list[Path], now: float, late_keys: set[str],
                     max_age_s: float | None = None) -> RetryScan:
    """Ids dead-lettered in ``dead_letter`` (and, for the keys in ``late_keys``, where: a dead-lettered seq moves its
    key past it, as a written one does), and ids held in each queue's current retry snapshot (``retry``, the
    queues' own folders, by number): every part of its newest batch's; with ``max_age_s``, those held longer."""
    scan = RetryScan()
    for path in output_files(dead_letter):
        dead = read_columns(path, ["id", "key", "seq", "_batch", "_epoch"], (QUEUE_COLUMN,))
        scan.batch_epochs |= batch_epochs(dead)
        scan.dead.update(str(i) for i in dead.column("id").to_pylist())
        if late_keys:
            scan.dead_seqs.extend(r for r in zip(dead.column("key").to_pylist(), dead.column("_batch").to_pylist(),
                                                 dead.column("seq").to_pylist(), strict=True) if r[0] in late_keys)
    held: list[dict[str, Any]] = []
    for queue, folder in enumerate(retry):
        snapshots: dict[int, list[Path]] = defaultdict(list)
        for path in parquet_files(folder):
            match = _SNAPSHOT.fullmatch(path.name)
            if match and path.parent == folder:
                snapshots[int(match.group(1))].append(path)
        if not snapshots:
            continue
        # Older snapshots are superseded (deleted once the newer one is published).
        newest = scan.batches[queue] = max(snapshots)
        for path in snapshots[newest]:
            rows = read_columns(path, ["id"], ("key", "attempts", "first_failed_at")).to_pylist()
            scan.held[queue] += len(rows)
            held.extend(rows)
    if not held:
        return scan
    scan.waiting = {str(row["id"]) for row in held}
    # A record's age is since its first failure; one waiting behind its key's failed record has none.
    for row in held:
        first = row.get("first_failed_at")
        row["age_s"] = None if first is None else round(now - float(first), 3)
    ages = [row["age_s"] for row in held if row["age_s"] is not None]
    scan.oldest_age_s = max(ages) if ages else None
    held.sort(key=lambda r: (r["age_s"] is None, -(r["age_s"] or 0.0), str(r["id"])))
    scan.examples = [_shown(row) for row in held[:EXAMPLES]]
    if max_age_s is not None:
        too_old = [row for row in held if row["age_s"] is not None and row["age_s"] > max_age_s]
        scan.too_old = {str(row["id"]) for row in too_old}
        scan.too_old_examples = [_shown(row) for row in too_old[:EXAMPLES]]
    return scan


def _shown(held: dict[str, Any]) -> dict[str, Any]:
    """A held record as an example shows it."""
    return {k: held.get(k) for k in ("id", "key", "attempts", "age_s")}


@dataclass
class SetAsideScan:
    """``set-aside/``: records set aside (a split poison batch's failing ones, or a whole batch's queue files) beside
    each batch's manifest, and the batches replayed since (each queue's folder in a topic of several)."""

    batches: list[tuple[int, int]] = field(default_factory=list)
    """The set-aside batches, as (queue, batch)."""
    ids: set[str] = field(default_factory=set)
    """Ids set aside and not replayed: neither lost nor written."""
    replayed: set[str] = field(default_factory=set)
    """Ids of replayed batches: the output's now (written, or set aside again), each in ``table/`` once, out of their
    keys' order by design."""
    seqs: list[tuple[str, int, int]] = field(default_factory=list)
    """``(key, batch, seq)`` of every record set aside: its key moved past it then, as for a dead-lettered one."""
    bad: set[tuple[str, int]] = field(default_factory=set)
    """Bad lines of set-aside files, by (file, line): accounted for, as the records are (a replay leaves them)."""
    not_kept: set[str] = field(default_factory=set)
    """Entries of set-aside batches that could not be kept (a folder, a file the consumer may not read): what the
    queue holds under their names is set aside too."""
    examples: list[dict[str, Any]] = field(default_factory=list)


def scan_set_aside(folder: Path, max_line_bytes: int, scan: SetAsideScan, queue: int = 0, queues: int = 1) -> None:
    """The ids and bad lines of every set-aside batch (``tenure.career.set_aside``) in ``folder``, queue ``queue``'s of
    a topic of ``queues``, the replayed batches' ids apart, into ``scan``."""
    for batch, found in read_set_aside(folder).items():
        data = found.manifest
        scan.batches.append((queue, batch))
        scan.examples.append({"batch": batch, "files": len(data.get("files", [])), "records": data.get("records"),
                              "split": bool(data.get("split")), "attempts": data.get("attempts"),
                              "replayed_in": found.replayed_in, "error": str(data.get("error", ""))[:200],
                              **({"queue": queue} if queues > 1 else {})})
        scan.not_kept.update(qualified(name, queue, queues) for name in data.get("not_kept", {}))
        for path in found.files(folder):
            name = qualified(path.name.removeprefix(published(batch, "")), queue, queues)
            for number, raw in enumerate(iter_lines(path), start=1):
                record, _reason = classify_line(raw, max_line_bytes, queue=queue, queues=queues)
                if record is None:
                    scan.bad.add((name, number))
                    continue
                (scan.ids if found.replayed_in is None else scan.replayed).add(str(record["id"]))
                scan.seqs.append((str(record["key"]), batch, int(record["seq"])))


@dataclass
class RefusedScan:
    """What the queue holds under the names of entries set apart as a whole: refused by the consumer (quarantined
    at line 0) or not kept with a set-aside batch."""

    ids: set[str] = field(default_factory=set)
    bad: set[tuple[str, int]] = field(default_factory=set)
    examples: list[dict[str, Any]] = field(default_factory=list)


def scan_refused(queues: list[QueueLayout], refused: dict[str, str], max_line_bytes: int) -> RefusedScan:
    """The ids and bad lines of the queue files under the names in ``refused`` (name, with its queue in a topic of
    several → reason) that this user can read (a file the consumer's user could not open may open for another):
    read again after the queues, as those entries are few, so that a refusal published meanwhile is seen."""
    scan = RefusedScan(examples=[{"file": printable_name(name), "reason": reason}
                                 for name, reason in sorted(refused.items())[:EXAMPLES]])
    for queue in queues:
        for path in iter_queue_files(queue):
            name = qualified(path.name, queue.queue, queue.queues)
            if name not in refused or not path.is_file():  # a FIFO would block the open
                continue
            try:
                for number, raw in enumerate(iter_lines(path), start=1):
                    record, _reason = classify_line(raw, max_line_bytes, queue=queue.queue, queues=queue.queues)
                    if record is None:
                        scan.bad.add((name, number))
                    else:
                        scan.ids.add(str(record["id"]))
            except OSError:
                continue  # gone, or unreadable here too: nothing of it to account for
    return scan
