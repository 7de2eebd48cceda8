"""The leader's chores between batches, on the control thread: consumption marks, archiving, backlog, retry ticks
(a Redis topic: its backlog, and its wake counter for retries).

Rate-limited so that ``execute``, called every few milliseconds, touches the filesystem about once a second. The
archive sweep, which stats every archived file (the retention's worth: millions on a busy queue), runs on a
thread of its own, so that it never holds the control loop past its liveness timeout.

A new term's chores wait until its first batch has finished (or ``_OPENING_GRACE_S`` has passed): the dead
staging of lower epochs, the predecessor's last batch's marks (an fsync of the checkpoint first) and the archive
are nobody's precondition (the source passes over entries its checkpoint admitted, marked or not), yet they cost
a new leader 0.04–0.35 s before its first batch, and compete with it for the disk and the cores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tenure.career._protocol import CareerObserver
from tenure.career.queue import TICK_SUFFIX, FileIdentity
from tenure.career.redis_queue import RedisTopic
from tenure.career.spark._archive import sweep_archive
from tenure.career.spark._checkpoints import spark_committed
from tenure.career.spark._config import SparkCareerConfig
from tenure.career.spark._intake import admitted_entries
from tenure.career.spark._landing import MarkReader, QueueEntry, scan_landing, waiting
from tenure.career.spark._layout import Layout
from tenure.career.spark._publish import remove_dead_staging
from tenure.career.spark._redis_topic import backlog_entries
from tenure.career.spark._term import Term, committed_batch, mark_consumed
from tenure.career.wake import wake
from tenure.errors import TenureError

__all__ = ["Housekeeper"]

_BACKLOG_EVERY_S = 1.0
_SWEEP_EVERY_S = 60.0
_OPENING_GRACE_S = 10.0


class Housekeeper:
    """Archives what is safe to archive, reports the backlog and wakes the source for due retries.

    One per career (its schedule outlives terms); each call is given the term to work for.
    """

    def __init__(self, layout: Layout, config: SparkCareerConfig, observer: CareerObserver,
                 clock: Callable[[], float], faults: Callable[[str], None]) -> None:
        self._layout = layout
        self._config = config
        self._observer = observer
        self._clock = clock
        self._faults = faults
        self._next_backlog = 0.0
        self._next_sweep = 0.0
        self._ticked_for: float | None = None
        self._sweeper: threading.Thread | None = None
        self._closing = threading.Event()
        self._committed: tuple[int | None, dict[str, FileIdentity | None]] = (None, {})
        self._marks = MarkReader()
        self._opening: tuple[int, float] | None = None  # a new term's epoch and when its chores are due at the latest

    def term_began(self, term: Term) -> None:
        """Hold the chores of ``term`` until its first batch has finished, or ``_OPENING_GRACE_S`` at the latest."""
        self._opening = (term.epoch, self._clock() + _OPENING_GRACE_S)

    def archive_committed(self, term: Term) -> int:
        """Mark the last committed batch's files consumed once Spark's checkpoint has committed it, then
        archive every queue file all groups have consumed (other groups' leaders may have caught up)."""
        if not self._config.file_source:
            return 0
        record = term.last_record
        committed = committed_batch(record)
        if (record is not None and committed is not None and committed != term.marked
                and spark_committed(term.checkpoint, committed)):
            mark_consumed(self._layout, term, record, self._faults)
        return term.marks.archive_ready(term.clock.now())

    def run(self, term: Term) -> None:
        """One round, at most every ``_BACKLOG_EVERY_S`` (the archive sweep every ``_SWEEP_EVERY_S``)."""
        now = self._clock()
        if self._opening is not None and self._opening[0] == term.epoch:
            if term.completed == 0 and now < self._opening[1]:
                return
            self._open(term, now)
        if now < self._next_backlog:
            return
        self._next_backlog = now + _BACKLOG_EVERY_S
        due = (term.last_record or {}).get("retry_next_due")
        retry_due = due is not None and due <= term.clock.now()
        if self._config.file_source:
            self.archive_committed(term)
            if now >= self._next_sweep and not self.sweeping:
                self._next_sweep = now + _SWEEP_EVERY_S
                self._start_sweep(term)
                stale = term.marks.sweep()
                if stale:
                    term.log.info("stale_marks_swept", marks=stale)
            self._observer.backlog(len(self.backlog(term)), retry_due=retry_due)
            self._wake_for_retries(term)
        elif (topic := self._config.redis_topic) is not None:
            self._redis_backlog(term, topic, retry_due)
            self._wake_for_retries(term)

    def _open(self, term: Term, now: float) -> None:
        """A new term's first chores: the staging folders of lower epochs (the committed batch was rolled forward
        at inauguration, so none is named by a future commit), then a round at once."""
        self._opening = None
        removed = remove_dead_staging(self._layout, term.epoch)
        self._next_backlog = now
        term.log.info("term_chores", removed_staging=len(removed), after_batches=term.completed,
                      seconds=round(self._clock() - now, 3))

    def _redis_backlog(self, term: Term, topic: RedisTopic, retry_due: bool) -> None:
        """A Redis topic's backlog: the stream's entries after the committed position (none while it lost entries:
        nothing can be read, and the leader is not stalled for it), asked within the probe's deadline; and whether
        held records are due (work, as entries are: the wake counter runs their batch)."""
        if term.lost is not None:
            self._observer.backlog(0)
            return
        try:
            entries = backlog_entries(topic, topic.stream(self._layout.index), term.last_record,
                                      self._config.health.probe_timeout_s)
        except TenureError as exc:
            term.log.debug("backlog_unknown", reason=str(exc)[:500])
            return
        self._observer.backlog(entries, retry_due=retry_due)

    def backlog(self, term: Term) -> list[QueueEntry]:
        """The entries of ``landing/`` this group has yet to consume, by the queue source's own rule
        (:func:`tenure.career.spark._landing.waiting`: so the progress watchdog waits only on what the source will
        admit), less those the last committed batch admitted (consumed, though their marks wait for Spark's
        checkpoint to have the batch)."""
        listed = scan_landing(self._layout.landing)
        left = waiting(listed, self._marks.read(self._layout.queue.marks(term.marks.group), [e.name for e in listed]))
        batch = committed_batch(term.last_record)
        if self._committed[0] != batch:
            self._committed = (batch, dict(admitted_entries(term.checkpoint, batch)) if batch is not None else {})
        read = self._committed[1]
        return [e for e in left if e.name not in read or not _same(read[e.name], e)]

    @property
    def sweeping(self) -> bool:
        """Whether an archive sweep is running."""
        return self._sweeper is not None and self._sweeper.is_alive()

    def close(self) -> None:
        """Stop a running archive sweep (it stops before its next file; what it deleted stays deleted)."""
        self._closing.set()

    def _start_sweep(self, term: Term) -> None:
        """Delete the archived files past retention on the sweep thread, as of the group's clock now."""
        now, log, retention = term.clock.now(), term.log, self._config.archive_retention_s

        def sweep() -> None:
            swept = sweep_archive(self._layout.queue, retention, now, stop=self._closing.is_set)
            if swept:
                log.info("archive_swept", files=swept)

        self._sweeper = threading.Thread(target=sweep, name="tenure-archive-sweep", daemon=True)
        self._sweeper.start()

    def _wake_for_retries(self, term: Term) -> None:
        """Wake the source once held records fall due: a source runs no batch without a new file or entry, and a
        quiet queue must not keep a due retry waiting. A queue folder gets a tick file in ``landing/``; a Redis
        topic's queue, whose stream other groups read, its wake counter (:mod:`tenure.career.wake`)."""
        due = (term.last_record or {}).get("retry_next_due")
        if due is None or due > term.clock.now() or due == self._ticked_for:
            return
        if not self._config.file_source:
            try:
                count = wake(self._layout.wake)
            except TenureError as exc:  # the next round wakes it again
                term.log.warning("retry_wake_failed", due=due, error=str(exc)[:500])
                return
            self._ticked_for = due
            term.log.debug("retry_tick", due=due, wake=count)
            return
        self._ticked_for = due
        name = f"tenure-tick-{term.epoch}-{time.time_ns()}{TICK_SUFFIX}"
        partial = self._layout.landing / f".{name}"
        partial.write_bytes(b"tick\n")
        partial.replace(self._layout.landing / name)
        term.log.debug("retry_tick", due=due, file=name)


def _same(admitted: FileIdentity | None, entry: QueueEntry) -> bool:
    """Whether ``entry`` is the one a batch admitted as ``admitted`` (``None``: the batch recorded no identity)."""
    return admitted is None or admitted.same(entry.identity)
