"""The leadership lifecycle protocol: inaugurate, execute again and again, hand over (seed 000's ILeaderCareer)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["Career", "CareerContext", "CareerObserver", "Fence", "HandoverRecord", "Outcome"]


class Outcome(enum.Enum):
    """How a term ended, as told to ``Career.hand_over``."""

    CLEAN = "clean"  # asked to step down (SIGTERM, release): finish the batch in flight, then stop
    REVOKED = "revoked"  # leadership lost (session expired, fenced): abandon the batch in flight
    FAILED = "failed"  # the career raised: release so another replica tries


@dataclass(frozen=True)
class HandoverRecord:
    """What the previous leader left at ``/tenure/<group>/handover`` (``None`` in the context if nothing)."""

    epoch: int
    last_batch: int | None
    clean: bool
    at: float
    replica_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "last_batch": self.last_batch,
            "clean": self.clean,
            "at": self.at,
            "replica_id": self.replica_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HandoverRecord:
        return cls(
            epoch=int(data["epoch"]),
            last_batch=None if data.get("last_batch") is None else int(data["last_batch"]),
            clean=bool(data["clean"]),
            at=float(data["at"]),
            replica_id=str(data.get("replica_id", "")),
        )


@runtime_checkable
class Fence(Protocol):
    """The fenced commit primitive, implemented by ``election``: the only way output becomes visible.

    ``read_commit`` returns the stored commit record (``None`` if none yet) and its znode version.
    ``commit`` writes ``record`` in one ZooKeeper transaction that checks the leader's own election node
    and compare-and-sets the record at ``expected_version``; it raises ``Fenced`` when the node is gone,
    the version moved, or the stored epoch is higher than ``epoch``, and ``NotLeader`` when the leader is
    suspended or past its safe-until deadline. It returns the new version.
    """

    @property
    def epoch(self) -> int: ...

    def read_commit(self) -> tuple[dict[str, Any] | None, int]: ...

    def commit(self, record: dict[str, Any], expected_version: int) -> int: ...


class CareerObserver(Protocol):
    """Where a career reports what it did; ``service`` turns these into Prometheus metrics.

    Batch outcomes: ``committed``, ``skipped`` (already committed: a re-run), ``fenced``, ``failed``.
    Record outcomes: ``written``, ``duplicate``, ``quarantined``, and with a row function ``retried`` (an
    attempt failed; the record waits in the retry store) and ``dead_lettered``.
    """

    def batch_finished(self, outcome: str, duration_s: float, records: dict[str, int]) -> None: ...

    def commit_finished(self, duration_s: float, committed_at: float) -> None: ...

    def backlog(self, files: int) -> None: ...

    def retry_waiting(self, records: int) -> None: ...


@dataclass
class CareerContext:
    """What a career gets at inauguration: its fencing token, a leadership check, the fence."""

    epoch: int
    fence: Fence
    still_leading: Callable[[], bool]
    previous_handover: HandoverRecord | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def after_clean_handover(self) -> bool:
        """True when the previous term ended with a clean handover (fast path); False means recover."""
        return self.previous_handover is not None and self.previous_handover.clean


class Career(Protocol):
    """A leader's work, driven by the runner on its single control thread.

    Example::

        career.prepare()                 # follower: warm up (may be a no-op)
        career.inaugurate(ctx)           # elected: recover or take the fast path
        while leading and not stopping:
            if not career.execute():     # one unit of work; False = nothing to do now
                back_off()
        last = career.hand_over(Outcome.CLEAN)
    """

    def prepare(self) -> None:
        """Get ready to lead (warm standby); called once before joining the election."""

    def ready(self) -> bool:
        """True once ``prepare`` has finished (feeds /readyz)."""

    def unhealthy(self) -> str | None:
        """Why the career cannot work now (a one-line reason), or None when it can. The runner asks every few
        seconds: an unhealthy replica leaves the election, handing over first when it leads, and rejoins once
        healthy again. Must be cheap and must not raise."""

    def inaugurate(self, ctx: CareerContext) -> None:
        """Begin a term: recover what a crashed predecessor left, or take the fast path."""

    def execute(self) -> bool:
        """Do one unit of work; return False when there was nothing to do. Must not commit unless
        ``ctx.still_leading()``; a rejected commit raises ``Fenced``."""

    def hand_over(self, outcome: Outcome) -> int | None:
        """End the term. Returns the last committed batch id (for the handover record)."""

    def close(self) -> None:
        """Release resources at process exit."""
