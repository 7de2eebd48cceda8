"""One leadership term's shared state, and the consumption marks it writes once a batch is safe in its checkpoint.

Spark's batch thread (``_batch``) and the runner's control thread (``_career``, ``_housekeeping``) both work for
the term; what they share lives in :class:`Term`, under its lock where both write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from career._protocol import CareerContext
from career.spark._marks import ConsumptionMarks
from career.spark._order import HighWaterMarks
from career.spark._storage import Layout, newer_term_started

__all__ = ["Term", "committed_batch", "mark_consumed", "no_fault"]


def no_fault(_point: str) -> None:
    """The fault hook when none is given: every point passes."""


@dataclass
class Term:
    """One leadership term's shared state: the control thread and Spark's batch thread both touch it."""

    ctx: CareerContext
    log: Any
    marks: ConsumptionMarks  # this group's consumption marks on the queue, and the archive they gate
    checkpoint: Path  # this term's own Spark checkpoint (storage.adopt_checkpoint)
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
    order: tuple[str | None, HighWaterMarks] | None = None  # the per-key marks as of a commit record's "order"
    marked: int | None = None  # the last batch whose queue files this term marked consumed

    @property
    def epoch(self) -> int:
        return self.ctx.epoch


def committed_batch(record: dict[str, Any] | None) -> int | None:
    """The batch id a commit record names (``None``: no record, or one another career wrote)."""
    if record is None or record.get("batch_id") is None:
        return None
    return int(record["batch_id"])


def mark_consumed(layout: Layout, term: Term, record: dict[str, Any], faults: Callable[[str], None]) -> None:
    """Mark the files of the committed batch ``record`` consumed; the caller knows this term's checkpoint has
    committed it. Safe for a stale term: marks are written only if no later term has begun copying a checkpoint,
    so every later term's copy is taken after this one had the batch, and never re-runs it."""
    faults("after_checkpoint")
    if newer_term_started(layout, term.epoch):
        term.log.info("marks_skipped", reason="a newer term has started", batch=record.get("batch_id"))
        return
    archived = term.marks.consumed(record.get("files") or [])
    term.marked = committed_batch(record)
    if archived:
        term.log.debug("archived", batch=term.marked, files=archived)
