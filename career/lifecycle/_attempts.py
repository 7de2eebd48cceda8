"""The poison-batch count: how many terms in a row failed on one batch and for how long, carried from term to term by
the handover record, and the batch a term sets aside once both reach their bounds.

A batch is set aside only after ``max_batch_attempts`` failed terms *and* ``set_aside_after_s`` of failing, so
that a dependency outage of minutes, which fails every term for a while, sets nothing aside. How long a batch has
been failing is measured without any wall clock (STYLE habit 19): the count carries ``failing_s``, a lower bound of
the time since the batch first failed, and each replica adds only what its own monotonic clock measured since it
last read or wrote the count — within its term, and across its own back-off (a process remembers when it last saw
the count). Time in which no replica that saw the count was running is not counted: the span can come late,
never early.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tenure.career._protocol import FailedBatch, HandoverRecord

__all__ = ["BatchAttempts"]


class BatchAttempts:
    """This replica's view of the batch failing terms in a row (``FailedBatch``), and the handover records that
    carry it: a crash does not reset the count, a term that commits past the batch ends it.

    Used from the runner's control thread, and from the fail-stop thread once the control thread has stopped
    working (``FailStop``).

    Example::

        attempts = BatchAttempts("r1", max_attempts=3, min_failing_s=600.0)
        attempts.began(previous_record)              # at inauguration: carry the count over
        ctx.set_aside = attempts.poison()            # the batch this term must set aside, if any
        attempts.failed(7, "ValueError: bad row")    # the term failed on batch 7: one attempt more
        election.write_handover(attempts.record(epoch, clean=False, last_batch=None, reason="failed"))
    """

    def __init__(self, replica_id: str, max_attempts: int, min_failing_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._replica_id = replica_id
        self._max_attempts = max_attempts
        self._min_failing_s = min_failing_s
        self._clock = clock
        self._failed: FailedBatch | None = None
        # (batch, failing_s, monotonic): the failing span this process last saw for a batch, and when.
        self._seen: tuple[int, float, float] | None = None
        self._setting_aside: int | None = None  # the batch this term was told to set aside

    def _failing_s(self, failed: FailedBatch) -> float:
        """How long ``failed`` has been failing now, at least: the larger of what it carries and what this process
        last saw for it plus the monotonic time since."""
        seen = self._seen
        if seen is None or seen[0] != failed.batch_id:
            return failed.failing_s
        return max(failed.failing_s, seen[1] + (self._clock() - seen[2]))

    def _saw(self, failed: FailedBatch | None) -> FailedBatch | None:
        """``failed`` with its span brought up to now, remembered as seen now."""
        if failed is None:
            return None
        span = self._failing_s(failed)
        self._seen = (failed.batch_id, span, self._clock())
        return FailedBatch(failed.batch_id, failed.attempts, failed.error, span, failed.split_failed)

    def began(self, previous: HandoverRecord | None) -> None:
        """A term began after ``previous`` (the record the last term left): its count carries over."""
        self._setting_aside = None
        self._failed = self._saw(None if previous is None else previous.failed_batch)

    def poison(self) -> FailedBatch | None:
        """The batch this term must set aside: one that failed ``max_attempts`` terms in a row for at least
        ``min_failing_s`` (its span as of now)."""
        failed = self._saw(self._failed)
        if failed is None or failed.attempts < self._max_attempts or failed.failing_s < self._min_failing_s:
            return None
        self._setting_aside = failed.batch_id
        return failed

    def failed(self, batch_id: int, error: str) -> FailedBatch:
        """One more term failed on ``batch_id``: its count in a row (a new count for another batch). A term that
        was told to set the batch aside and failed on it too marks it ``split_failed``: the next sets it aside
        whole."""
        current = self._saw(self._failed) or FailedBatch(batch_id, 0, "")
        self._failed = self._saw(current.again(batch_id, error, current.failing_s,
                                               split_failed=batch_id == self._setting_aside))
        assert self._failed is not None
        return self._failed

    def record(self, epoch: int, *, clean: bool, last_batch: int | None, reason: str | None) -> HandoverRecord:
        """The handover record of the term of ``epoch``, carrying the count (its span as of now), which is dropped
        once the term committed past its batch."""
        failed = self._saw(self._failed)
        if failed is not None and last_batch is not None and last_batch >= failed.batch_id:
            failed = self._failed = None
        return HandoverRecord(epoch, last_batch, clean, time.time(), self._replica_id, reason=reason,
                              failed_batch=failed)
