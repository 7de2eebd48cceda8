"""The auditor behind ``tenure verify``: exactly-once (I2) and per-key order (I3), from the files alone.

See ARCHITECTURE.md, "Where each guarantee is enforced": verify recomputes the expected output from the queue,
independently of the consumer (it shares only the queue's contract, :mod:`tenure.career.queue`). It reads the consumer's
own state only to tell lag from loss (which files the group has read) and, when given, checks the output
against the group's commit record.
"""

from __future__ import annotations

import functools
import os
import posixpath
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog

from tenure.career.identity import read_topic
from tenure.career.output import DEAD_LETTER, QUARANTINE, TABLE
from tenure.career.queue import DEFAULT_MAX_LINE_BYTES, printable_name, queue_of
from tenure.career.redis_queue import RedisTopic, StreamAccount, TrimPoint, committed_positions
from tenure.career.spark._layout import Layout
from tenure.election import GroupPaths, ZooKeeperClient, read_commit, read_group_identity
from tenure.errors import ConfigError
from tenure.service.ops._verify._content import CONTENT_FIELDS, EXAMPLES, QueueContent
from tenure.service.ops._verify._delta import audit_delta
from tenure.service.ops._verify._files import DEFAULT_GROUP, VerifyError, find_group, read_consumption
from tenure.service.ops._verify._late import PublishedSeqs, check_late
from tenure.service.ops._verify._report import VerifyReport
from tenure.service.ops._verify._scan import (
    BatchEpochs,
    QueueScan,
    RetryScan,
    SetAsideScan,
    scan_quarantine,
    scan_queue,
    scan_refused,
    scan_retry_store,
    scan_set_aside,
    scan_table,
)

Committed = int | Mapping[int, int]
"""A group's committed batch (a topic of one queue), or each queue's (by number; a queue without one: absent)."""

__all__ = ["VERIFIED", "GroupCommits", "read_committed_batches", "verify"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
VERIFIED: Final = "verified"

_log = structlog.get_logger("tenure.verify")


def read_committed_batches(client: ZooKeeperClient, group: str, queues: int = 1) -> Committed:
    """The batch each commit record of ``group`` names: the last one its leaders committed (``tenure verify --zk``);
    in a topic of several queues, by queue, each queue that committed one (a queue without is checked as having
    committed none).

    Raises:
        VerifyError: no commit record of the group names a batch (a wrong group, or none committed yet), or the group
            records another number of queues than the topic's.
    """
    recorded = read_group_identity(client, group)
    if recorded is not None and recorded.queue_count != queues:
        raise VerifyError(f"group {group!r} has {recorded.queue_count} queue(s) but the topic audited has {queues}: "
                          "check --group and --queue-dir")
    found: dict[int, int] = {}
    for queue in range(queues):
        record, _version = read_commit(client, group, queue=queue, queues=queues)
        if record is not None and record.get("batch_id") is not None:
            found[queue] = int(record["batch_id"])
    if not found:
        path = GroupPaths(group, 0, queues).commit if queues == 1 else f"{GroupPaths(group).root}/queues/*/commit"
        raise VerifyError(f"group {group!r} has no committed batch in ZooKeeper ({path}): check --group, or leave "
                          "out --zk until the group's first commit")
    return found[0] if queues == 1 else found


@dataclass(frozen=True)
class GroupCommits:
    """A group's commit records in ZooKeeper, for the audit of a Redis topic to read once it has read the topic's
    number of queues (``tenure verify --queue-url --zk --group``): so the topic is read once, by the audit.

    Attributes:
        client: a connected ZooKeeper client (read-only will do).
        group: the consumer group whose commit records are read.
    """

    client: ZooKeeperClient
    group: str

    def records(self, queues: int) -> dict[int, Mapping[str, Any] | None]:
        """Each queue's commit record (None for a queue that committed nothing): its positions and trim point."""
        return {k: read_commit(self.client, self.group, queue=k, queues=queues)[0] for k in range(queues)}

    def batches(self, queues: int) -> Committed:
        """The batch each queue's commit record names (:func:`read_committed_batches`)."""
        return read_committed_batches(self.client, self.group, queues)


def verify(
    data_root: str | os.PathLike[str], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    queue_dir: str | os.PathLike[str] | None = None, allow_empty: bool = False,
    content_fields: Collection[str] = CONTENT_FIELDS, now: float | None = None, group: str | None = None,
    allow_waiting: bool = False, committed_batch: Committed | Callable[[], Committed] | None = None,
    max_retry_age_s: float | None = None, queues: int | None = None, queue_url: str | None = None,
    commit_records: Mapping[int, Mapping[str, Any] | None] | GroupCommits | None = None,
) -> VerifyReport:
    """Audit a data root: each valid queue id written exactly once, as it was, in order; each bad line
    quarantined once.

    Every valid id is accounted for in exactly one of: written (``table/``), dead-lettered (``dead-letter/``),
    waiting for a retry (the newest snapshot in ``retry/``) — never none, never two (duplicated) — or
    set aside (a poison batch's records under ``set-aside/``, reported apart; a set-aside id may be written too,
    by a copy of it in another batch; once its batch is replayed, it is the output's again: written once, or set
    aside again, and its row is left out of the order check), or refused (in a queue entry the consumer refused as
    a whole, named by a quarantine row at line 0 with its reason: reported apart, as set-aside ids are), or
    late (quarantined with reason ``late``: its key had published, dead-lettered or set aside a seq at least its
    own in an earlier batch, which is checked; a late id may also be written or dead-lettered, when a repeat came
    after the dedup window). Each row of
    ``table/``, and each late record, must hold its queue line's ``content_fields`` (the payload compared as a
    JSON value); when the queue holds an id several times with different content, any of them will do.

    Reads ``landing/`` and ``archive/`` (recursively) with :func:`tenure.career.queue.classify_line`, independently
    of the pipeline, and ``table/``, ``quarantine/``, ``dead-letter/`` and ``retry/`` with pyarrow (hidden
    folders and files are skipped; an absent folder is empty: see :func:`check_data_root`).
    Per-key order follows the output: by ``_batch``, then part file (sorted by path), then row.

    An id in no output is *lost* when the group has read a file holding it (the file is in ``archive/``, marked
    in ``consumed/<group>/``, or named by a batch the group's newest checkpoint has committed), else *waiting*:
    lag, which fails the audit too unless ``allow_waiting``. Ids whose queue files the archive's retention
    already deleted count as unexpected.

    The commit record: a ``_batch`` published with two ``_epoch`` values (by two terms) fails, and so does, given
    ``committed_batch``, a ``_batch`` above it (output no commit covers).

    A topic of several queues (its ``_topic.json``) is audited queue by queue — each queue's files classified as
    found in it (a record of another queue's key is a bad line, ``wrong_queue``, that must be quarantined), its
    group's marks and checkpoint, its set-aside batches and retry store, its batches by its ``_queue`` and
    application id — and as a whole: each valid id once across the outputs, each row in its key's queue, per-key
    order within the key's queue's batches. ``report.per_queue`` has each queue's figures.

    Args:
        data_root: the data root (``landing/``, ``archive/``, ``table/``, ``quarantine/``).
        max_line_bytes: the pipeline's line size limit; must match it or oversized lines disagree.
        queue_dir: the folder holding ``landing/`` and ``archive/`` when the group reads a queue shared with
            other groups (``--queue-dir``); default: the data root.
        allow_empty: a queue without a valid id passes (by default it fails: nothing was audited).
        content_fields: the fields of :data:`CONTENT_FIELDS` a row must share with its queue line; leave out
            ``payload`` (or ``ts``) when a row function or transform rewrites it.
        now: the clock (Unix seconds) retry ages are measured against; default: now.
        group: the consumer group whose marks count (``--group``); default: the only group with a marks folder
            in the queue's ``consumed/``, else ``default``.
        allow_waiting: ids and bad lines in files the group has not read yet pass (an audit of a live system).
        committed_batch: the group's committed batch (from its commit record), each queue's in a topic of several
            (by number), or a function reading it, called once the output is read (so a batch published meanwhile
            is covered); None: not checked.
        max_retry_age_s: ids held for retry longer than this since their first failure fail; None: no limit.
        queues: the topic's number of queues (``--queues``), checked against its ``_topic.json``; None: the
            file's (1 without one).
        queue_url: a Redis topic the group reads instead of a queue folder (``--queue-url``): each stream's entries
            are audited as a queue's lines (an entry named by its id, at its number), an entry after the group's
            committed position is not read yet, and each stream's missing entries are told apart: consumed then
            trimmed (numbered up to the trim point kept in the commit record; the output's ids and quarantine rows
            they explain are no longer auditable from Redis, and pass) or lost (any other, which fails).
        commit_records: on a Redis topic, each queue's commit record (by number): its committed position and trim
            point; or the group's commit records in ZooKeeper (:class:`GroupCommits`), read once the topic's number
            of queues is read, which also give the committed batches (unless ``committed_batch`` does), read again
            once the output is read; None: each queue's newest checkpoint tells its position, and no trim is known
            (every missing entry is lost).

    Returns:
        The report; ``report.ok`` is False on any loss, waiting id (unless ``allow_waiting``), duplicate,
        unexpected row, unquarantined bad line, order inversion, content mismatch, wrongly late record, batch of
        two epochs or above the committed one, id held for retry too long, row in another queue than its key's,
        or when the queue held no valid id.

    Raises:
        ConfigError: ``queues`` is not the topic's number of queues.
    """
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes={max_line_bytes} must be at least 1")
    started = time.monotonic()
    root = Path(data_root)
    content = QueueContent(tuple(content_fields))
    queue = QueueScan(content)
    accounts: list[StreamAccount] = []
    trims: dict[int, TrimPoint] = {}
    if queue_url is not None:
        n, layouts, records = _scan_redis(queue_url, queues, root, max_line_bytes, commit_records, queue, accounts)
        trims = {k: point for k, record in records.items()
                 if (point := committed_positions(record).trim) is not None}
        if isinstance(commit_records, GroupCommits) and committed_batch is None:
            committed_batch = functools.partial(commit_records.batches, n)  # read once the output is read
        group = group if group is not None else DEFAULT_GROUP
    else:
        queue_root = root if queue_dir is None else Path(queue_dir)
        topic = read_topic(queue_root, queues)
        n = topic.queues if topic is not None else queues or 1
        layouts = [Layout(root, None if queue_dir is None else queue_root, k, n) for k in range(n)]
        group = group if group is not None else find_group([layout.queue for layout in layouts])
        # First what each queue's group has read: a file read later counts as waiting, never as lost.
        consumption = [read_consumption(layout.queue, layout.checkpoint, group) for layout in layouts]
        for layout, read in zip(layouts, consumption, strict=True):
            scan_queue(layout.queue, max_line_bytes, read, queue)
    quarantine = scan_quarantine(root / QUARANTINE, n)
    late_keys = {r.record["key"] for r in quarantine.late if r.record}
    set_aside = SetAsideScan()
    for layout in layouts:
        scan_set_aside(layout.set_aside, max_line_bytes, set_aside, layout.index, n)
    table = scan_table(root / TABLE, content, late_keys, set_aside.replayed, n)
    retry = scan_retry_store(root / DEAD_LETTER, [layout.retry for layout in layouts],
                             time.time() if now is None else now, late_keys, max_retry_age_s)
    found = committed_batch() if callable(committed_batch) else committed_batch
    committed = {0: found} if isinstance(found, int) else found
    row_epochs = {TABLE: table.batch_epochs, QUARANTINE: quarantine.batch_epochs, DEAD_LETTER: retry.batch_epochs}
    two_epochs, above = _check_commits(row_epochs, committed, n)
    delta = audit_delta(root, row_epochs, n)
    late = check_late(quarantine.late, PublishedSeqs(table.late_seqs + retry.dead_seqs + set_aside.seqs), content,
                      table.content)
    # Entries set apart as a whole (after the queue: a refusal is published before its entry is archived).
    apart = {**dict.fromkeys(set_aside.not_kept, "not kept with its set-aside batch"), **quarantine.refused}
    refused = scan_refused([layout.queue for layout in layouts], apart, max_line_bytes)
    unreadable = {name: error for name, error in queue.unreadable.items() if name not in apart}
    if unreadable:
        name, error = sorted(unreadable.items())[0]
        raise VerifyError(f"cannot read queue file {printable_name(name)} ({error}; {len(unreadable)} such file(s)): "
                          "run verify as a user that can read the queue")

    def few(items: set[Any] | list[Any]) -> list[Any]:
        return sorted(items, key=str)[:EXAMPLES]

    dead, waiting = retry.dead, retry.waiting
    accounted = table.written | dead.keys() | waiting | late.ids
    missing = queue.ids - accounted - set_aside.ids - refused.ids
    waiting_ids = missing & queue.unread_ids
    lost_ids = missing - waiting_ids
    unexpected = accounted - queue.ids
    trimmed = sum(account.trimmed for account in accounts)
    if len(unexpected) <= trimmed:  # ids of entries consumed, then trimmed: no longer auditable from Redis
        unexpected = set()
    # An id in two places (written and dead-lettered, say), or dead-lettered twice, is duplicated too. A late
    # id may also be written: a repeat later than the dedup window, checked as late like any other.
    twice = ((table.written & dead.keys()) | (table.written & waiting) | (dead.keys() & waiting)
             | {i for i, n in dead.items() if n > 1})
    duplicated_examples = table.duplicated_examples + [{"id": i, "places": "more than one of table, "
                                                        "dead-letter, retry"} for i in few(twice)]
    bad_keys = queue.bad.keys()
    quarantined = quarantine.bad
    unquarantined = bad_keys - quarantined.keys() - set_aside.bad - refused.bad
    waiting_bad = unquarantined & queue.unread_bad
    unexpected_q = {(name, line) for name, line in quarantined.keys() - bad_keys  # a trimmed bad entry was consumed
                    if (point := trims.get(_queue_named(name, n))) is None
                    or not point.holds(posixpath.basename(name), line)}
    dup_bad = sorted(k for k, n in quarantined.items() if n > 1)
    q_reasons = quarantine.reasons
    mismatched = sorted(k for k in bad_keys & quarantined.keys() if q_reasons[k] != queue.bad[k])

    examples: dict[str, list[Any]] = {
        "lost": few(lost_ids),
        "duplicated_ids": duplicated_examples[:EXAMPLES],
        "duplicated_bad_lines": [
            {"file": f, "line": n, "rows": quarantined[(f, n)]} for f, n in dup_bad[:EXAMPLES]
        ],
        "unexpected_ids": few(unexpected),
        "unexpected_quarantined": [{"file": f, "line": n} for f, n in few(unexpected_q)],
        "unquarantined": [{"file": f, "line": n, "reason": queue.bad[(f, n)]} for f, n in few(unquarantined)],
        "inversions": table.inversion_examples,
        "reason_mismatches": [
            {"file": f, "line": n, "expected": queue.bad[(f, n)], "quarantined": q_reasons[(f, n)]}
            for f, n in mismatched[:EXAMPLES]
        ],
        "content_mismatches": table.content.examples,
        "waiting": retry.examples,
        "set_aside": set_aside.examples,
        "refused_entries": refused.examples,
        "waiting_files": queue.unread_files[:EXAMPLES],
        "batches_with_two_epochs": two_epochs[:EXAMPLES],
        "batches_above_commit": above[:EXAMPLES],
        "retry_too_old": retry.too_old_examples,
        "rows_in_wrong_queue": table.misrouted_examples,
        "files_outside_delta_versions": delta.outside[:EXAMPLES],
        "files_missing_from_delta_tables": delta.missing[:EXAMPLES],
        "delta_versions_not_one_batch": delta.bad_versions[:EXAMPLES],
        "streams": [{"stream": a.stream, "present": a.present, "trimmed": a.trimmed, "lost": a.lost,
                     **({"problems": list(a.problems)} if a.problems else {})} for a in accounts],
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
        lost=len(lost_ids) + sum(1 if a.lost is None else a.lost for a in accounts),  # a stream's lost entries
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
        retry_batch=retry.batches.get(0) if n == 1 else None,
        retry_oldest_age_s=retry.oldest_age_s,
        ids_set_aside=len(set_aside.ids - accounted),
        set_aside_batches=len(set_aside.batches),
        entries_refused=len(apart),
        ids_refused=len(refused.ids - accounted - set_aside.ids),
        ids_replayed=len(set_aside.replayed),
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
        group=group,
        waiting=len(waiting_ids),
        waiting_files=len(queue.unread_files),
        waiting_bad_lines=len(waiting_bad),
        allow_waiting=allow_waiting,
        batches_with_two_epochs=len(two_epochs),
        committed_batch=None if committed is None or n > 1 else committed.get(0),
        batches_above_commit=len(above),
        max_retry_age_s=max_retry_age_s,
        retry_too_old=len(retry.too_old),
        delta_tables=delta.tables,
        delta_versions=delta.versions,
        files_outside_delta_versions=len(delta.outside),
        files_missing_from_delta_tables=len(delta.missing),
        delta_versions_not_one_batch=len(delta.bad_versions),
        queues=n,
        rows_in_wrong_queue=table.misrouted,
        per_queue=_per_queue(n, queue, table.by_queue, quarantine.by_queue, retry, set_aside, delta.by_queue,
                             committed, content, lost_ids) if n > 1 else [],
    )
    _log.info(VERIFIED, ok=report.ok, ids_in=report.ids_in, written=report.ids_written, lost=report.lost,
              waiting=report.waiting, waiting_files=report.waiting_files,
              duplicated=report.duplicated, inversions=report.inversions, unexpected=report.unexpected,
              unquarantined=report.unquarantined, content_mismatches=report.content_mismatches,
              late=report.ids_late, wrongly_late=report.wrongly_late, seconds=report.seconds)
    return report


def _scan_redis(queue_url: str, queues: int | None, root: Path, max_line_bytes: int,
                commit_records: Mapping[int, Mapping[str, Any] | None] | GroupCommits | None, scan: QueueScan,
                accounts: list[StreamAccount]
                ) -> tuple[int, list[Layout], Mapping[int, Mapping[str, Any] | None]]:
    """Scan a Redis topic's streams into ``scan`` and their accounts into ``accounts``; its number of queues, each
    queue's layout in the data root, and each queue's commit record (read from ZooKeeper once the number is known,
    when ``commit_records`` says so).

    Raises:
        ConfigError: ``queues`` is not the topic's number; VerifyError: Redis did not answer, or the group
            records another number of queues than the topic's.
    """
    from tenure.career.redis_streams import RedisRefused, RedisUnavailable, connect, stream_state
    from tenure.career.redis_streams import read_topic as read_redis_topic
    from tenure.service.ops._verify._redis import scan_stream

    topic = RedisTopic.parse(queue_url)
    client = connect(topic)
    try:
        found = read_redis_topic(client, topic)  # none recorded: a topic of one queue, or --queues
        if found is not None and queues is not None and queues != found.queues:
            raise ConfigError(f"--queues {queues} does not match the topic {topic}, which has {found.queues} "
                              f"queues ({topic.topic_key}): pass --queues {found.queues}")
        n = found.queues if found is not None else queues or 1
        if isinstance(commit_records, GroupCommits):
            commit_records.batches(n)  # a wrong group, or one of another number of queues, fails before the audit
            records = commit_records.records(n)
        else:
            records = dict(commit_records or {})
        layouts = [Layout(root, None, k, n) for k in range(n)]
        for layout in layouts:
            state = stream_state(client, topic.stream(layout.index))
            accounts.append(scan_stream(client, state, layout.index, n, max_line_bytes, records.get(layout.index),
                                        layout.checkpoint, scan))
    except (RedisUnavailable, RedisRefused) as exc:
        raise VerifyError(f"{exc}") from exc
    finally:
        client.close()
    return n, layouts, records


def _queue_named(name: str, queues: int) -> int:
    """The queue of an audit name (``queues/<k>/<name>`` in a topic of several, else queue 0)."""
    if queues == 1:
        return 0
    _folder, queue, _rest = name.split("/", 2)
    return int(queue)


def _check_commits(published: dict[str, BatchEpochs], committed: Mapping[int, int] | None, queues: int
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The batches of the output (``published``: each folder's ``(_queue, _batch, _epoch)`` triples) that two epochs
    published, and those above their queue's ``committed`` batch (none when it is None; every batch of a queue
    without one), by queue and batch, each as ``{"batch", "epochs": {epoch: folders}}`` (and ``"queue"`` in a topic
    of several queues)."""
    found: defaultdict[tuple[int, int], defaultdict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for where, triples in published.items():
        for queue, batch, epoch in triples:
            found[(queue, batch)][epoch].add(where)

    def shown(queue: int, batch: int) -> dict[str, Any]:
        return {**({"queue": queue} if queues > 1 else {}), "batch": batch,
                "epochs": {str(e): sorted(w) for e, w in sorted(found[(queue, batch)].items())}}

    batches = sorted(found)
    two_epochs = [shown(q, b) for q, b in batches if len(found[(q, b)]) > 1]
    above = [] if committed is None else [shown(q, b) for q, b in batches if b > committed.get(q, -1)]
    return two_epochs, above


def _per_queue(queues: int, scan: QueueScan, rows: Mapping[int, int], quarantined: Mapping[int, int],
               retry: RetryScan, set_aside: SetAsideScan, versions: Mapping[int, int],
               committed: Mapping[int, int] | None, content: QueueContent, lost: set[str]) -> list[dict[str, Any]]:
    """Each queue's figures: its files, lines, ids first seen in it, bad lines (and of them ``wrong_queue``), files
    not read yet, ids lost (by their key's queue, when keys are compared), rows in ``table/`` and ``quarantine/``,
    records held for retry, set-aside batches, Delta versions, and its committed batch when given."""
    lost_by_queue: Counter[int] = Counter(queue_of(str(key), queues) for rid in lost
                                          if (key := content.first[rid][0]) is not None)
    return [{"queue": k, **scan.by_queue.get(k, {}), "lost": lost_by_queue[k], "rows_written": rows.get(k, 0),
             "quarantine_rows": quarantined.get(k, 0), "held_for_retry": retry.held[k],
             "retry_batch": retry.batches.get(k),
             "set_aside_batches": sum(1 for q, _b in set_aside.batches if q == k),
             "delta_versions": versions.get(k, 0),
             **({} if committed is None else {"committed_batch": committed.get(k)})} for k in range(queues)]
