"""One leadership term's shared state, and the consumption marks it writes once a batch is safe in its checkpoint.

Spark's batch thread (``_batch``) and the runner's control thread (``_career``, ``_housekeeping``) both work for
the term; what they share lives in :class:`Term`, under its lock where both write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tenure.career._protocol import CareerContext
from tenure.career.spark._checkpoints import CheckpointSync, newer_term_started
from tenure.career.spark._dedup import DedupStore
from tenure.career.spark._intake import admitted_entries
from tenure.career.spark._layout import Layout
from tenure.career.spark._marks import ConsumptionMarks
from tenure.career.spark._order import HighWaterMarks

__all__ = ["Term", "TermClock", "committed_batch", "mark_consumed", "no_fault"]


def no_fault(_point: str) -> None:
    """The fault hook when none is given: every point passes."""


class TermClock:
    """The group's clock, in seconds: it never runs backwards across terms and no replica's wall clock moves it.

    A term starts at the ``clock`` the last commit record carries and advances by its own monotonic time; every
    commit record carries the clock on. Only the group's very first term (or the first after an upgrade) reads
    the wall clock, to seed it. So retry due times, retry ticks and the archive's retention mean the same on
    every replica: a successor whose wall clock is behind does not hold retries back, and a wall clock that
    jumps forward deletes no archived file early. The clock stands still while no term runs, so time without a
    leader is not counted (a retry then falls due that much later).
    """

    def __init__(self, record: dict[str, Any] | None, *, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        carried = (record or {}).get("clock")
        self._base = float(carried) if carried is not None else wall()
        self._monotonic = monotonic
        self._started = monotonic()

    def now(self) -> float:
        return self._base + (self._monotonic() - self._started)

    def reading(self) -> tuple[float, float]:
        """The group's time and this host's ``time.monotonic()`` at one instant: another process on this host
        (Spark's Python planner for the queue source) carries the clock on from them (``_intake.clock_options``)."""
        monotonic = self._monotonic()
        return self._base + (monotonic - self._started), monotonic


@dataclass
class Term:
    """One leadership term's shared state: the control thread and Spark's batch thread both touch it."""

    ctx: CareerContext
    log: Any
    marks: ConsumptionMarks  # this group's consumption marks on the queue, and the archive they gate
    checkpoint: Path  # this term's own Spark checkpoint (storage.adopt_checkpoint)
    clock: TermClock  # the group's clock (retry due times, archive stamps), carried by every commit record
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    query: Any = None
    in_flight: int | None = None
    last_seen: int | None = None  # the last batch id whose foreachBatch returned (committed or skipped)
    completed: int = 0
    reported: int = 0
    last_committed: int | None = None
    last_record: dict[str, Any] | None = None
    error: BaseException | None = None
    failed: int | None = None  # the batch whose failure ``error`` is (``execute`` raises ``BatchFailed`` for it)
    row_stuck_since: float | None = None  # monotonic: since when every row-function call has run past its timeout
    injected: BaseException | None = None  # what the fault hook raised in a batch: execute re-raises it as is
    restarts: int = 0
    worker_restarts: int = 0  # restarts after a Python worker that did not start in time (``worker_did_not_start``)
    order: tuple[str | None, HighWaterMarks] | None = None  # the per-key marks as of a commit record's "order"
    held: tuple[str, pa.Table] | None = None  # the retry store as of a commit record's "retry", preloaded
    dedup: DedupStore | None = None  # the dedup store as of its batch_id (a committed batch), kept or preloaded
    marked: int | None = None  # the last batch whose queue files this term marked consumed
    lost: Exception | None = None  # a Redis topic: the StreamLost that stopped the query (planned again later)
    lost_check_at: float | None = None  # monotonic: when to plan again, or to call the stream restored
    durable: CheckpointSync = field(init=False)  # fsyncs what Spark wrote to the checkpoint

    def __post_init__(self) -> None:
        self.durable = CheckpointSync(self.checkpoint)

    @property
    def epoch(self) -> int:
        return self.ctx.epoch


def committed_batch(record: dict[str, Any] | None) -> int | None:
    """The batch id a commit record names (``None``: no record, or one another career wrote)."""
    if record is None or record.get("batch_id") is None:
        return None
    return int(record["batch_id"])


def mark_consumed(layout: Layout, term: Term, record: dict[str, Any], faults: Callable[[str], None]) -> None:
    """Mark the entries of the committed batch ``record`` consumed, each with the identity the batch admitted (its
    offset in this term's checkpoint, which the caller knows has committed it). Safe for a stale term: marks are
    written only if no later term has begun copying a checkpoint, so every later term's copy is taken after this
    one had the batch, and never re-runs it.

    The checkpoint is made durable first (``CheckpointSync``): a mark says no re-run needs the file, which holds
    only while Spark's commit of the batch survives a power loss; with the queue idle no next batch would sync it."""
    faults("after_checkpoint")
    term.durable.sync()
    if newer_term_started(layout, term.epoch):
        term.log.info("marks_skipped", reason="a newer term has started", batch=record.get("batch_id"))
        return
    batch = committed_batch(record)
    entries = admitted_entries(term.checkpoint, batch) if batch is not None else []
    if not entries:  # an offset Spark no longer keeps: the names the record read, as they are now
        entries = [(name, None) for name in record.get("files") or []]
    archived = term.marks.consumed(entries, now=term.clock.now())
    term.marked = committed_batch(record)
    if archived:
        term.log.debug("archived", batch=term.marked, files=archived)
