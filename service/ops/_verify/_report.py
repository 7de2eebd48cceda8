"""The report of ``tenure verify``: its counts, its verdict, and how it is shown (text or one JSON object)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tenure.service.ops._verify._content import CONTENT_FIELDS
from tenure.service.ops._verify._files import DEFAULT_GROUP

__all__ = ["VerifyReport"]


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found; ``ok`` is the verdict, :meth:`render` and :meth:`to_json` present it.

    Counts of ids are of distinct ids; counts of bad lines are of distinct ``(file base name, line)`` pairs (the
    file named with its queue in a topic of several queues: ``queues/<k>/<name>``).
    ``lost`` counts ids of files the group has read that are in no output; ids only in files it has not read yet
    are ``waiting`` (lag). A caller waiting for a data root to drain waits for ``unaccounted == 0``.

    Example:
        >>> from tenure.service.ops import verify
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
    retry_batch: int | None = None
    """The batch of the current retry snapshot (None: no snapshot; a topic of several queues: each queue's, in
    ``per_queue``)."""
    retry_oldest_age_s: float | None = None
    """Seconds since the oldest record held for retry first failed (None: none has failed yet)."""
    ids_set_aside: int = 0
    """Ids only in set-aside batches (``set-aside/``: a split poison batch's failing records, or a whole batch that
    could not be split), not in the table until an operator replays them (``tenure replay``)."""
    set_aside_batches: int = 0
    entries_refused: int = 0
    """Queue entries the consumer refused as a whole (a folder, a dangling link, a name not UTF-8, a file it may
    not read, one gone before its batch read it): each named in ``quarantine/`` at line 0 with its reason."""
    ids_refused: int = 0
    """Ids only in refused entries that ``verify`` could read (a file the consumer's user may not open, say): set
    apart, not lost, until an operator replays them."""
    ids_replayed: int = 0
    """Ids of set-aside batches replayed since: audited as the output's (each in the table once, or set aside
    again), out of their keys' order by design; every other row's order is checked without them."""
    ids_late: int = 0
    late_rows: int = 0
    late_repeats: int = 0
    """Late ids also written: a repeat that came after the dedup window (neither lost nor duplicated)."""
    wrongly_late: int = 0
    duplicated_late_lines: int = 0
    changed_repeats: int = 0
    """Ids the queue holds more than once with different content (information: any version may be written)."""
    content_fields: tuple[str, ...] = CONTENT_FIELDS
    rows_compared: int = 0
    content_mismatches: int = 0
    content_mismatches_by_field: dict[str, int] = field(default_factory=dict)
    allow_empty: bool = False
    bad_by_reason: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[Any]] = field(default_factory=dict)
    group: str = DEFAULT_GROUP
    """The group whose consumption (marks, checkpoint) tells a file read from one not read yet."""
    waiting: int = 0
    """Ids in no output whose every copy is in a queue file the group has not read yet: lag, not loss."""
    waiting_files: int = 0
    """Queue files with lines that the group has not read yet."""
    waiting_bad_lines: int = 0
    """Of ``unquarantined``, the bad lines in files the group has not read yet."""
    allow_waiting: bool = False
    """Waiting ids and bad lines pass (an audit of a live system); lost ones still fail."""
    batches_with_two_epochs: int = 0
    """``_batch`` values found with two or more ``_epoch`` values across ``table/``, ``quarantine/`` and
    ``dead-letter/``: a batch published by two terms."""
    committed_batch: int | None = None
    """The group's committed batch the output was checked against (None: not checked, no ``--zk``; a topic of
    several queues: each queue's, in ``per_queue``)."""
    batches_above_commit: int = 0
    """``_batch`` values above ``committed_batch`` in the output: published, but no commit covers them."""
    max_retry_age_s: float | None = None
    """The longest a record may be held for retry (None: not checked)."""
    retry_too_old: int = 0
    """Ids held for retry longer than ``max_retry_age_s`` since their first failure."""
    delta_tables: int = 0
    """Outputs (``table/``, ``quarantine/``, ``dead-letter/``) audited as Delta tables (a folder without a Delta
    log is audited as plain Parquet only)."""
    delta_versions: int = 0
    """Versions that add files, across the Delta outputs (each must be one committed batch)."""
    files_outside_delta_versions: int = 0
    """Published part files that no version of their table names: a Delta reader does not see them."""
    files_missing_from_delta_tables: int = 0
    """Files the newest version of a table names that are not in its folder: a Delta reader fails on them."""
    delta_versions_not_one_batch: int = 0
    """Versions that are not one committed batch: two batches' files, a batch twice, batches out of order, or
    an epoch other than the one the batch's rows carry."""
    queues: int = 1
    """The topic's number of queues (its ``_topic.json``)."""
    rows_in_wrong_queue: int = 0
    """Rows of ``table/`` whose ``_queue`` is not their key's queue (a topic of several queues)."""
    per_queue: list[dict[str, Any]] = field(default_factory=list)
    """A topic of several queues: each queue's figures (``queue``, ``files``, ``lines``, ``ids_in`` — first seen in
    it —, ``bad_lines_in``, ``wrong_queue`` — of those, records of another queue's key —, ``waiting_files``,
    ``lost``, ``rows_written``, ``quarantine_rows``, ``held_for_retry``, ``retry_batch``, ``set_aside_batches``,
    ``delta_versions`` and, with ``--zk``, ``committed_batch``); empty for a topic of one."""

    @property
    def duplicated(self) -> int:
        """Ids written more than once, bad lines quarantined more than once, lines quarantined late twice."""
        return self.duplicated_ids + self.duplicated_bad_lines + self.duplicated_late_lines

    @property
    def unexpected(self) -> int:
        """Written ids absent from the queue plus quarantine rows naming no bad line of the queue."""
        return self.unexpected_ids + self.unexpected_quarantined

    @property
    def delta_problems(self) -> int:
        """Files outside a Delta version, files a version names that are gone, versions not one batch."""
        return (self.files_outside_delta_versions + self.files_missing_from_delta_tables
                + self.delta_versions_not_one_batch)

    @property
    def unaccounted(self) -> int:
        """Ids in no output: lost plus waiting. Zero once the consumer has caught up with the queue."""
        return self.lost + self.waiting

    @property
    def empty(self) -> bool:
        """The queue held no valid id: nothing was audited (a wrong path, or an unfed pipeline)."""
        return self.ids_in == 0

    @property
    def ok(self) -> bool:
        """True iff nothing is lost, waiting (unless ``allow_waiting``), duplicated, unexpected, unquarantined,
        out of order, different from its queue line, wrongly late, published by two terms, above the committed
        batch, held for retry too long or in another queue than its key's, every Delta version is one committed
        batch and no published file is outside one, and there was something to audit (or ``allow_empty``)."""
        excused = self.waiting_bad_lines if self.allow_waiting else 0
        return (self.lost == self.duplicated == self.inversions == self.unexpected == self.content_mismatches
                == self.wrongly_late == self.batches_with_two_epochs == self.batches_above_commit
                == self.retry_too_old == self.delta_problems == self.rows_in_wrong_queue == 0
                and self.unquarantined == excused
                and (self.allow_waiting or self.waiting == 0) and (self.allow_empty or not self.empty))

    def summary_line(self) -> str:
        """The one-line verdict, e.g. ``verify: OK — 100 ids in, 100 written, 0 lost, …``."""
        if self.empty and not self.allow_empty:
            return (f"verify: FAILED — no valid id in the queue ({self.queue_files} files, {self.queue_lines} "
                    f"lines), so nothing was audited: check the data root, or pass --allow-empty if an empty "
                    f"queue is expected")
        verdict = "OK" if self.ok else "FAILED"
        late = f"{self.ids_late} late, " if self.late_rows else ""
        retry = ""
        if self.ids_dead_lettered or self.ids_waiting:
            oldest = "" if self.retry_oldest_age_s is None else f" (oldest {self.retry_oldest_age_s:.0f} s)"
            retry = f"{self.ids_dead_lettered} dead-lettered, {self.ids_waiting} waiting for retry{oldest}, "
        extra = "".join(f", {n} {what}" for n, what in (
            (self.content_mismatches, "content mismatches"), (self.wrongly_late, "wrongly late"),
            (self.batches_with_two_epochs, "batches published by two epochs"),
            (self.batches_above_commit, "batches above the committed one"),
            (self.retry_too_old, "held for retry too long"),
            (self.rows_in_wrong_queue, "rows in another queue than their key's"),
            (self.files_outside_delta_versions, "files outside a Delta version"),
            (self.files_missing_from_delta_tables, "files a Delta version names missing"),
            (self.delta_versions_not_one_batch, "Delta versions not one batch")) if n)
        unread = ""
        if self.waiting_files:
            n = self.waiting_bad_lines
            bad = f" (and {n} bad line{'s' if n != 1 else ''})" if n else ""
            unread = (f"{self.waiting} waiting{bad} in {self.waiting_files} file"
                      f"{'s' if self.waiting_files != 1 else ''} not read yet, ")
        if self.set_aside_batches:
            retry += (f"{self.ids_set_aside} set aside in {self.set_aside_batches} poison batch"
                      f"{'es' if self.set_aside_batches != 1 else ''} (set-aside/: not in the table until replayed), ")
        if self.entries_refused:
            retry += (f"{self.ids_refused} in {self.entries_refused} refused entr"
                      f"{'ies' if self.entries_refused != 1 else 'y'} (quarantine/, line 0), ")
        if self.ids_replayed:
            retry += f"{self.ids_replayed} replayed from set-aside/, "
        return (
            f"verify: {verdict} — {self.ids_in} ids in, {self.ids_written} written, {late}{retry}{self.lost} lost, "
            f"{unread}{self.duplicated} duplicated, {self.inversions} inversions{extra}; "
            f"{self.bad_lines_in} bad lines, {self.quarantined} quarantined"
        )

    def render(self) -> str:
        """A human summary: the verdict line, a short table of counts, then examples of each violation."""
        age = "—" if self.retry_oldest_age_s is None else f"{self.retry_oldest_age_s:.1f} s"
        each = any("committed_batch" in q for q in self.per_queue)
        above = ("not checked: pass --zk and --group" if self.committed_batch is None and not each
                 else f"{self.batches_above_commit} (each queue's committed batch)" if each
                 else f"{self.batches_above_commit} (committed batch {self.committed_batch})")
        too_old = ("not checked: pass --max-retry-age-s" if self.max_retry_age_s is None
                   else f"{self.retry_too_old} (over {self.max_retry_age_s:g} s)")
        rows = [
            ("queue files / lines", f"{self.queue_files} / {self.queue_lines}"),
            ("distinct valid ids in", str(self.ids_in)),
            ("repeated valid lines in", f"{self.repeated_lines_in}" + (
                f" ({self.changed_repeats} ids with changed content)" if self.changed_repeats else "")),
            ("ids written / rows", f"{self.ids_written} / {self.rows_written}"),
            ("ids late / rows / also written", f"{self.ids_late} / {self.late_rows} / {self.late_repeats}"),
            ("ids dead-lettered / held for retry", f"{self.ids_dead_lettered} / {self.ids_waiting}"),
            ("ids set aside / batches / replayed", f"{self.ids_set_aside} / {self.set_aside_batches} / "
                                                   f"{self.ids_replayed}"),
            ("entries refused / their ids", f"{self.entries_refused} / {self.ids_refused}"),
            ("retry snapshot batch / oldest", f"{'—' if self.retry_batch is None else self.retry_batch} / {age}"),
            ("bad lines in", str(self.bad_lines_in)),
            ("quarantined / rows", f"{self.quarantined} / {self.quarantine_rows}"),
            ("lost", str(self.lost)),
            ("not read yet: ids / bad lines / files", f"{self.waiting} / {self.waiting_bad_lines} / "
             f"{self.waiting_files} (group {self.group}{', allowed' if self.allow_waiting else ''})"),
            ("duplicated ids", str(self.duplicated_ids)),
            ("duplicated quarantine", str(self.duplicated_bad_lines + self.duplicated_late_lines)),
            ("unexpected ids", str(self.unexpected_ids)),
            ("unexpected quarantine", str(self.unexpected_quarantined)),
            ("bad lines not quarantined", str(self.unquarantined)),
            ("order inversions", str(self.inversions)),
            ("rows compared / mismatched", f"{self.rows_compared} / {self.content_mismatches}"),
            ("wrongly late", str(self.wrongly_late)),
            ("batches published by two epochs", str(self.batches_with_two_epochs)),
            ("batches above the committed one", above),
            ("ids held for retry too long", too_old),
            ("Delta tables / versions", f"{self.delta_tables} / {self.delta_versions}"
             + ("" if self.delta_tables else " (no Delta log: plain Parquet)")),
            ("Delta: files outside / missing", f"{self.files_outside_delta_versions} / "
             f"{self.files_missing_from_delta_tables}"),
            ("Delta versions not one batch", str(self.delta_versions_not_one_batch)),
            *([("rows in another queue than their key's", str(self.rows_in_wrong_queue))] if self.queues > 1 else []),
            ("reason mismatches (info)", str(self.reason_mismatches)),
            ("seconds", f"{self.seconds:.2f}"),
        ]
        width = max(len(label) for label, _ in rows)
        lines = [self.summary_line(), *(f"  {label:<{width}}  {value}" for label, value in rows)]
        if self.per_queue:
            lines.append(f"  by queue ({self.queues}): files, ids in, bad lines (wrong queue), not read yet, lost, "
                         "rows written, quarantined, held, Delta versions, committed batch")
            lines += [f"    queue {q['queue']}: {q.get('files', 0)}, {q.get('ids_in', 0)}, {q.get('bad_lines_in', 0)} "
                      f"({q.get('wrong_queue', 0)}), {q.get('waiting_files', 0)}, {q['lost']}, {q['rows_written']}, "
                      f"{q['quarantine_rows']}, {q['held_for_retry']}, {q['delta_versions']}, "
                      f"{'—' if q.get('committed_batch') is None else q['committed_batch']}" for q in self.per_queue]
        if self.content_fields != CONTENT_FIELDS:
            lines.append(f"  content compared: {', '.join(self.content_fields) or 'nothing'}")
        for label, counts in (("bad lines by reason", self.bad_by_reason),
                              ("content mismatches by field", self.content_mismatches_by_field)):
            if counts:
                lines.append(f"  {label}: " + ", ".join(f"{k}={n}" for k, n in sorted(counts.items())))
        for kind, items in sorted(self.examples.items()):
            if items:
                lines.append(f"  e.g. {kind}: " + "; ".join(json.dumps(i, sort_keys=True) for i in items))
        return "\n".join(lines)

    def to_json(self) -> str:
        """All counts, the verdict and the examples as one JSON object (a single line)."""
        body: dict[str, Any] = {
            "ok": self.ok,
            "empty": self.empty,
            "duplicated": self.duplicated,
            "unexpected": self.unexpected,
            "unaccounted": self.unaccounted,
        }
        for name in self.__dataclass_fields__:
            body[name] = getattr(self, name)
        return json.dumps(body, sort_keys=True)
