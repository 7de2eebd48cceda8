"""Each term's entry in its queue's term history: begun at inauguration, updated at the first commit and at the end.

The runner calls it from its control thread. The history is for operators, so a ZooKeeper error here is logged
(``term_history_not_written``) and the term goes on; the next write, or the successor, catches up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from structlog.typing import FilteringBoundLogger

from tenure.career import HandoverRecord, Outcome
from tenure.career.lifecycle import CANARY
from tenure.election import Fence, TermHistory, TermRecord
from tenure.errors import TenureError
from tenure.service.replica._metrics import QueueMetrics

__all__ = ["CANARY_GAP", "TermRecorder"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
CANARY_GAP: Final = "canary_gap"

_PROGRESS_EVERY_S = 30.0


class TermRecorder:
    """Keeps one replica's terms of one queue in that queue's history (the runner's ``TermJournal``), with the
    queue's series (``metrics``)."""

    def __init__(self, history: TermHistory, metrics: QueueMetrics, replica_id: str,
                 log: FilteringBoundLogger) -> None:
        self._history = history
        self._metrics = metrics
        self._replica_id = replica_id
        self._log = log
        self._epoch: int | None = None
        self._next_progress = 0.0
        self._previous: TermRecord | None = None

    def began(self, fence: Fence, previous: HandoverRecord | None, elected_at: float) -> None:
        """Append the term (closing an earlier one left open) through the fence; count its commits from zero."""
        self._metrics.begin_term()
        self._epoch = fence.epoch
        self._next_progress = 0.0
        self._previous = None

        def begin() -> None:
            self._previous = self._history.begin(
                epoch=fence.epoch, node=fence.node, node_version=fence.node_version, replica_id=self._replica_id,
                elected_at=elected_at, previous=previous)

        self._write("begin", begin)

    def progressed(self) -> None:
        """Record the term's first commit when it happens, then its counts every ``_PROGRESS_EVERY_S`` (what a
        term that dies shows: its counts as of its last update)."""
        counts = self._metrics.term
        if self._epoch is None or counts.first_commit_at is None or time.monotonic() < self._next_progress:
            return
        if self._next_progress == 0.0:
            self._observe_gap(counts.first_commit_at)
        self._next_progress = time.monotonic() + _PROGRESS_EVERY_S
        self._update("progress", first_commit_at=counts.first_commit_at, last_commit_at=counts.last_commit_at,
                     batches=counts.batches, records=counts.records)

    def ended(self, outcome: Outcome, reason: str) -> None:
        """Close the term: how and why it ended, when, and what it committed."""
        if self._epoch is None:
            return
        counts = self._metrics.term
        self._update("end", ended=outcome.value, reason=reason, ended_at=time.time(),
                     first_commit_at=counts.first_commit_at, last_commit_at=counts.last_commit_at,
                     batches=counts.batches, records=counts.records)
        self._epoch = None

    def _observe_gap(self, first_commit_at: float) -> None:
        """The pause the output saw before this term's first commit: from the previous term's last commit."""
        previous = self._previous
        if previous is None or previous.last_commit_at is None:
            return
        gap = first_commit_at - previous.last_commit_at
        self._metrics.handover_gap.observe(gap)
        if previous.reason == CANARY:
            self._metrics.canary_gap.set(gap)
            self._log.info(CANARY_GAP, seconds=round(gap, 3), previous_epoch=previous.epoch)

    def _update(self, what: str, **changes: Any) -> None:
        epoch = self._epoch
        assert epoch is not None
        self._write(what, lambda: self._history.update(epoch, **changes))

    def _write(self, what: str, write: Callable[[], None]) -> None:
        try:
            write()
        except TenureError as exc:  # the election's calls raise the product's errors only
            self._log.warning("term_history_not_written", step=what, epoch=self._epoch,
                              reason=f"{type(exc).__name__}: {exc}")
