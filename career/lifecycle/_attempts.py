"""The poison-batch count: how many terms in a row failed on one batch, carried from term to term by the handover
record, and the batch a term sets aside once the count reached ``max_batch_attempts``."""

from __future__ import annotations

import time

from tenure.career._protocol import FailedBatch, HandoverRecord

__all__ = ["BatchAttempts"]


class BatchAttempts:
    """This replica's view of the batch failing terms in a row (``FailedBatch``), and the handover records that
    carry it: a crash does not reset the count, a term that commits past the batch ends it.

    Used from the runner's control thread, and from the fail-stop thread once the control thread has stopped
    working (``FailStop``).

    Example::

        attempts = BatchAttempts("r1", max_attempts=3)
        attempts.began(previous_record)              # at inauguration: carry the count over
        ctx.set_aside = attempts.poison()            # the batch this term must set aside, if any
        attempts.failed(7, "ValueError: bad row")    # the term failed on batch 7: one attempt more
        election.write_handover(attempts.record(epoch, clean=False, last_batch=None, reason="failed"))
    """

    def __init__(self, replica_id: str, max_attempts: int) -> None:
        self._replica_id = replica_id
        self._max_attempts = max_attempts
        self._failed: FailedBatch | None = None

    def began(self, previous: HandoverRecord | None) -> None:
        """A term began after ``previous`` (the record the last term left): its count carries over."""
        self._failed = None if previous is None else previous.failed_batch

    def poison(self) -> FailedBatch | None:
        """The batch this term must set aside: one that failed ``max_attempts`` terms in a row."""
        failed = self._failed
        return failed if failed is not None and failed.attempts >= self._max_attempts else None

    def failed(self, batch_id: int, error: str) -> FailedBatch:
        """One more term failed on ``batch_id``: its count in a row (a new count for another batch)."""
        self._failed = (self._failed or FailedBatch(batch_id, 0, "")).again(batch_id, error)
        return self._failed

    def record(self, epoch: int, *, clean: bool, last_batch: int | None, reason: str | None) -> HandoverRecord:
        """The handover record of the term of ``epoch``, carrying the count, which is dropped once the term
        committed past its batch."""
        failed = self._failed
        if failed is not None and last_batch is not None and last_batch >= failed.batch_id:
            failed = self._failed = None
        return HandoverRecord(epoch, last_batch, clean, time.time(), self._replica_id, reason=reason,
                              failed_batch=failed)
