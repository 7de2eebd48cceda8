"""Where a leader change's time goes: from the fault to the successor's first commit, split into segments by the
replicas' own log events and the commit records, for graceful handovers and crashes alike.

Every segment runs from the previous boundary to its own, in seconds:

=============  ==============================================================================================
segment        ends at (each a log event of the replica named, or a time from the first commit)
=============  ==============================================================================================
stop_query     old leader: the career's ``handed_over`` of the old epoch; from its last ``committed_at``: that
               batch's fenced write and publish, Spark's checkpoint, the query's stop (and, when no batch
               was in flight at the signal, the wait for the signal)
release        old leader: ``released`` (its election node deleted; in between, a per-term Spark app stops
               and the handover record is written)
election       successor: ``elected`` of the new epoch
detection      (crash) successor: ``elected`` of the new epoch; starts at the SIGKILL (session expiry +
               election)
session        successor: ``spark_session_ready`` between ``elected`` and ``inaugurated`` (cold standby, or
               an application per term on a cluster); None when Spark was already up (warm standby)
inauguration   successor: the career's ``inaugurated`` of the new epoch (has ``rolled_forward``)
query_start    successor: ``query_started`` of the new epoch
stream_init    the first batch's trigger starts: ``trigger_started`` of its ``batch_progress`` (the query's
               stream thread starts: its plan and source, the source's runner)
planning       the batch function is called: the time of its ``batch_committed`` − ``batch_s`` (Spark's
               trigger: the checkpoint's logs read, the source's listing, the offset log, planning)
prepare        the batch's scan starts: ``committed_at − stage_s − read_s − dedup_s`` (in ``foreachBatch``:
               the checkpoint's fsync, the commit record's read, the previous batch's files marked consumed)
scan           ``committed_at − stage_s − read_s``: the batch's first action (scan, classify, cache) and the
               dedup store's judgement
read           ``committed_at − stage_s``: the batch's counts
stage          ``committed_at``: ordered output staged and synced (where the gap ends)
commit         ``committed_at + commit_s``: the fenced write of the commit record
publish        ``batch_committed``'s own time: logged right after ``finish_publish`` (renames), so this
               is publish plus a few microseconds of bookkeeping
naive_start    (naive recipe) the first commit's ``committed_at``, from ``elected``: SparkSession, query
               and the whole first batch, which the naive replica does not log apart
=============  ==============================================================================================

A graceful split starts at the old leader's last ``committed_at`` (so ``stop_query`` … ``stage`` add up to the
gap); a crash split starts at the signal (so ``detection`` … ``stage`` add up to signal → first commit).
``commit`` and ``publish`` come after the gap's end: the commit record's ``committed_at`` is taken just before
the fenced write. A boundary whose event is missing gives None, and its time goes to the next segment that has
one. A boundary logged before the previous one (two processes' lines racing by milliseconds) gives 0.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenure.career.lifecycle import HANDED_OVER, INAUGURATED
from tenure.career.spark import BATCH_COMMITTED, BATCH_PROGRESS, QUERY_STARTED, SPARK_SESSION_READY
from tenure.election import ELECTED, RELEASED

if TYPE_CHECKING:
    from bench._cluster import Commit

__all__ = ["PROGRESS_FIGURES", "SEGMENTS", "Event", "SplitError", "batch_progress", "median_segments", "read_log",
           "seconds_to", "split_change", "steady_interval_s", "steady_progress"]

# Every segment in time order, with the label tables and plots show. A split carries the keys of its kind only.
SEGMENTS: dict[str, str] = {
    "stop_query": "old leader: finish batch, stop query",
    "release": "old leader: record handover, release node",
    "election": "released → successor elected",
    "detection": "crash → successor elected (session expiry)",
    "session": "successor: start Spark",
    "inauguration": "inaugurate",
    "query_start": "start query",
    "stream_init": "query's stream starts",
    "planning": "first trigger: list, offset log, plan",
    "prepare": "first batch: sync, commit record",
    "scan": "first batch: scan, dedup",
    "read": "first batch: read",
    "stage": "first batch: stage",
    "naive_start": "naive: start Spark, query, first batch",
    "commit": "first batch: fenced commit",
    "publish": "first batch: publish",
}


class SplitError(ValueError):
    """The commits cannot place the change (no first commit of the successor, no commit of an older epoch)."""


@dataclass(frozen=True)
class Event:
    """One JSON log line: its event name, its time (epoch seconds) and every field."""

    event: str
    at: float
    fields: dict[str, Any] = field(default_factory=dict)


def read_log(paths: Iterable[Path]) -> list[Event]:
    """The JSON events of log files, in time order: tenure's (ISO ``timestamp``) and the naive recipe's (``at``,
    epoch seconds). Other lines (Spark's own logging, tracebacks) are skipped; a missing file reads as empty."""
    events: list[Event] = []
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            start = line.find('{"')  # stderr shares the file and may leave a partial line before an event
            if start < 0:
                continue
            with contextlib.suppress(ValueError, TypeError, KeyError):
                record = json.loads(line[start:])
                at = _timestamp(str(record["timestamp"])) if "timestamp" in record else float(record["at"])
                events.append(Event(str(record.get("event")), at, record))
    events.sort(key=lambda e: e.at)
    return events


def _find(events: Sequence[Event], name: str, *, after: float | None = None, before: float | None = None,
          match: Callable[[Event], bool] = lambda _e: True) -> Event | None:
    """The first event ``name`` within [``after``, ``before``] that ``match`` accepts, or None."""
    return next((e for e in events if e.event == name and (after is None or e.at >= after)
                 and (before is None or e.at <= before) and match(e)), None)


def _epoch(epoch: int) -> Callable[[Event], bool]:
    return lambda e: e.fields.get("epoch") == epoch


def _at(event: Event | None) -> float | None:
    return None if event is None else event.at


def split_change(commits: Sequence[Commit], row: Mapping[str, Any], old: Sequence[Event], new: Sequence[Event], *,
                 crash: bool, naive: bool = False) -> dict[str, Any]:
    """One change's split, as fields for its row: ``segments_s`` (key → seconds or None), ``split_origin``,
    ``old_epoch``, ``new_epoch`` and ``elected_at`` (the successor's election, epoch seconds, or None).

    Args:
        commits: every commit record seen, in order (``CommitTimeline.snapshot()``).
        row: the change's row: ``first_batch_id`` and ``to`` (the successor) place its first commit; a crash
            also needs ``signalled_at`` (epoch seconds).
        old: the old leader's events (``read_log``); unused for a crash.
        new: the successor's events.
        crash: a SIGKILL (split from the signal) rather than a graceful handover (from the last old commit).
        naive: the naive recipe's replicas (``bench._naive``): their own few events.

    Raises:
        SplitError: the first commit or the old epoch's commits are not in ``commits``; a crash without
            ``signalled_at``.
    """
    first = next((c for c in commits if c.batch_id == row["first_batch_id"] and c.replica_id == row["to"]), None)
    if first is None:
        raise SplitError(f"no commit of batch {row['first_batch_id']} by {row['to']} in the timeline")
    earlier = commits[:commits.index(first)]
    old_epoch = next((c.epoch for c in reversed(earlier) if c.epoch != first.epoch), None)
    if old_epoch is None:
        raise SplitError(f"no commit of an epoch before {first.epoch} precedes batch {first.batch_id}")
    last_old = max((c for c in earlier if c.epoch == old_epoch), key=lambda c: c.committed_at)
    end = first.committed_at
    if crash:
        if row.get("signalled_at") is None:
            raise SplitError("a crash's row needs signalled_at")
        origin, origin_name = float(row["signalled_at"]), "signal"
    else:
        origin, origin_name = last_old.committed_at, "old leader's last commit"
    if naive:
        # The naive replica's epoch is its election time in ms (bench._naive), so its "elected" names its term.
        elected = _find(new, ELECTED, before=end, match=lambda e: int(e.at * 1000) == first.epoch)
        boundaries = [("detection", _at(elected))] if crash else [
            ("stop_query", _at(_find(old, "stepped_down", after=last_old.committed_at, before=end))),
            ("election", _at(elected))]
        boundaries.append(("naive_start", end))
    else:
        elected = _find(new, ELECTED, match=_epoch(first.epoch))
        boundaries = [] if crash else _release(old, old_epoch, last_old.committed_at, end)
        boundaries += [("detection" if crash else "election", _at(elected))]
        boundaries += _successor(new, first, elected)
    return {"split_origin": origin_name, "old_epoch": old_epoch, "new_epoch": first.epoch,
            "elected_at": _at(elected), "segments_s": _segments(origin, boundaries)}


def _release(old: Sequence[Event], old_epoch: int, last_commit: float, end: float) -> list[tuple[str, float | None]]:
    """The old leader's boundaries: its career's ``handed_over`` (it has ``outcome``; the runner's has not) and the
    ``released`` of its node after it."""
    stopped = _find(old, HANDED_OVER, after=last_commit, before=end,
                    match=lambda e: e.fields.get("epoch") == old_epoch and "outcome" in e.fields)
    released = _find(old, RELEASED, after=stopped.at if stopped else last_commit, before=end)
    return [("stop_query", _at(stopped)), ("release", _at(released))]


def _successor(new: Sequence[Event], first: Commit, elected: Event | None) -> list[tuple[str, float | None]]:
    """The successor's boundaries from its election to the first batch's publish."""
    epoch = _epoch(first.epoch)
    inaugurated = _find(new, INAUGURATED, match=lambda e: epoch(e) and "rolled_forward" in e.fields)
    session = _find(new, SPARK_SESSION_READY, after=_at(elected), before=_at(inaugurated) or first.committed_at) \
        if elected is not None else None
    batch = _find(new, BATCH_COMMITTED, match=lambda e: epoch(e) and e.fields.get("batch") == first.batch_id
                  and "read_s" in e.fields)  # a warm-up's batches are epoch 0's
    progress = _find(new, BATCH_PROGRESS, match=lambda e: epoch(e) and e.fields.get("batch") == first.batch_id)
    at: dict[str, float | None] = dict.fromkeys(("planning", "prepare", "scan", "read", "commit", "publish"))
    if batch is not None:
        fields = batch.fields
        read_at = first.committed_at - float(fields["stage_s"])
        scan_at = read_at - float(fields["read_s"])
        at = {"planning": batch.at - float(fields["batch_s"]) if "batch_s" in fields else None,
              "prepare": scan_at - float(fields["dedup_s"]) if "dedup_s" in fields else None,
              "scan": scan_at, "read": read_at,
              "commit": first.committed_at + float(fields.get("commit_s", 0.0)), "publish": batch.at}
    trigger = progress.fields.get("trigger_started") if progress is not None else None
    return [("session", _at(session)), ("inauguration", _at(inaugurated)),
            ("query_start", _at(_find(new, QUERY_STARTED, match=epoch))),
            ("stream_init", _timestamp(trigger) if trigger else None), ("planning", at["planning"]),
            ("prepare", at["prepare"]), ("scan", at["scan"]), ("read", at["read"]), ("stage", first.committed_at),
            ("commit", at["commit"]), ("publish", at["publish"])]


def _timestamp(iso: str) -> float:
    """Epoch seconds of an ISO time (tenure's log lines and Spark's progress; UTC when ``Z``)."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _segments(origin: float, boundaries: Sequence[tuple[str, float | None]]) -> dict[str, float | None]:
    """Seconds from each boundary to the previous known one (None for a missing boundary; 0 if it precedes it)."""
    segments: dict[str, float | None] = {}
    previous = origin
    for key, moment in boundaries:
        if moment is None:
            segments[key] = None
            continue
        segments[key] = round(max(moment - previous, 0.0), 3)
        previous = max(previous, moment)
    return segments


def seconds_to(segments: Mapping[str, float | None], key: str) -> float:
    """Seconds from the split's origin to the end of segment ``key`` (the known segments up to it, summed)."""
    total = 0.0
    for name, value in segments.items():
        total += value or 0.0
        if name == key:
            break
    return total


def median_segments(rows: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """The median of each segment over ``rows`` that carry ``segments_s`` (keys in ``SEGMENTS`` order, labelled;
    None where no row had it). Medians of segments do not add up to the median total."""
    splits = [r["segments_s"] for r in rows if r.get("segments_s")]
    out: dict[str, float | None] = {}
    for key, label in SEGMENTS.items():
        if any(key in s for s in splits):
            values = [s[key] for s in splits if s.get(key) is not None]
            out[label] = round(statistics.median(values), 3) if values else None
    return out


def steady_interval_s(events: Sequence[Event], epoch: int) -> float | None:
    """The median time between a term's consecutive ``batch_committed`` events: with data always waiting, one
    whole steady micro-batch (trigger, planning, read, stage, commit, publish). None below two batches."""
    times = [e.at for e in events if e.event == BATCH_COMMITTED and e.fields.get("epoch") == epoch
             and "read_s" in e.fields]
    intervals = [b - a for a, b in itertools.pairwise(times)]
    return round(statistics.median(intervals), 3) if intervals else None


#: The figures of a batch the handover tables show, in ms: Spark's time split (its ``batch_progress``), then
#: from the trigger's start to the batch function's call (``to_call``), and the function's own steps (its
#: ``batch_committed``: the checkpoint's fsync, the scan and dedup, the counts, the staging, all of it).
PROGRESS_FIGURES: tuple[str, ...] = (
    "latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution",
    "to_call", "durable", "dedup", "read", "stage", "function",
)
_BATCH_STEPS = {"durable": "durable_s", "dedup": "dedup_s", "read": "read_s", "stage": "stage_s",
                "function": "batch_s"}  # figure → batch_committed's field


def _progress_row(progress: Event, committed: Event | None) -> dict[str, float | None]:
    """One batch's ``batch_progress`` and ``batch_committed`` as :data:`PROGRESS_FIGURES` (None where the events
    lack one)."""
    durations = progress.fields.get("duration_ms") or {}
    row: dict[str, float | None] = {key: durations.get(key) for key in PROGRESS_FIGURES[:6]}
    steps = committed.fields if committed is not None else {}
    trigger = progress.fields.get("trigger_started")
    row["to_call"] = round((committed.at - float(steps["batch_s"]) - _timestamp(trigger)) * 1000) \
        if committed is not None and "batch_s" in steps and trigger else None
    row |= {key: round(float(steps[name]) * 1000) if name in steps else None for key, name in _BATCH_STEPS.items()}
    return row


def _batches(events: Sequence[Event], epoch: int) -> list[tuple[Event, Event | None]]:
    """Term ``epoch``'s ``batch_progress`` events in order, each with its batch's ``batch_committed`` (or None)."""
    committed = {e.fields.get("batch"): e for e in events if e.event == BATCH_COMMITTED and _epoch(epoch)(e)
                 and "read_s" in e.fields}
    return [(e, committed.get(e.fields.get("batch"))) for e in events
            if e.event == BATCH_PROGRESS and _epoch(epoch)(e)]


def batch_progress(events: Sequence[Event], epoch: int, batch_id: int) -> dict[str, float | None] | None:
    """The figures of batch ``batch_id`` of term ``epoch`` (its ``batch_progress`` event), or None."""
    return next((_progress_row(p, c) for p, c in _batches(events, epoch) if p.fields.get("batch") == batch_id), None)


def steady_progress(events: Sequence[Event], epoch: int, skip: int = 3) -> dict[str, float | None] | None:
    """The median of each figure over term ``epoch``'s batches after its first ``skip``, or None."""
    rows = [_progress_row(p, c) for p, c in _batches(events, epoch)][skip:]
    if not rows:
        return None
    medians: dict[str, float | None] = {}
    for key in PROGRESS_FIGURES:
        values = [value for r in rows if (value := r[key]) is not None]
        medians[key] = round(statistics.median(values), 1) if values else None
    return medians
