"""What a stall is: its reason and its one-line detail (the progress watchdog, the runner and the metrics share it)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["STALL_REASONS", "Stall", "StallReason"]


class StallReason(enum.Enum):
    """Why a replica gave its lock up and exited (the label of ``tenure_stalls_total``)."""

    CONTROL_LOOP = "control_loop"  # the control loop did not come round within the liveness timeout
    NO_PROGRESS = "no_progress"  # input waited and no batch finished within the stall timeout
    SPARK_UNRESPONSIVE = "spark_unresponsive"  # the leader's JVM did not answer a call within its deadline
    EVENT_QUEUE_FULL = "event_queue_full"  # an election event could not be queued: never drop one

    @property
    def counts_against_batch(self) -> bool:
        """Whether the batch in flight is to blame: only a batch that did not finish while everything else
        answered. A frozen JVM or a stuck loop says nothing about the batch's data."""
        return self is StallReason.NO_PROGRESS


STALL_REASONS: tuple[str, ...] = tuple(reason.value for reason in StallReason)


@dataclass(frozen=True)
class Stall:
    """A stall: its reason, a one-line detail for people, the batch in flight (if any), and the queue whose term
    stalled (None: the replica's own, its control loop or its event queue)."""

    reason: StallReason
    detail: str
    batch_id: int | None = None
    queue: int | None = None

    def describe(self) -> str:
        """The detail and the batch in flight, in one line (the term history's reason; ``/readyz`` prefixes
        ``stalled:``)."""
        batch = f" (batch {self.batch_id} in flight)" if self.batch_id is not None else ""
        return f"{self.detail}{batch}"
