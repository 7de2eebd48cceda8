"""The handover record, ``/tenure/<group>/handover``: what a term left for its successor — its one type, its one
reader and its one (fenced) writer, used by the runner, the term history and ``tenure status``.

A term writes it "in progress" at inauguration and again at its end (clean, failed, stalled); the next term reads
it to tell a clean handover from a crash and to carry the count of a batch failing terms in a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.security import ACL

from tenure.election._boundary import zookeeper_errors
from tenure.election._client import ZooKeeperClient
from tenure.election._layout import GroupPaths
from tenure.election._transaction import OutcomeUnknownError, encode_record, fenced_set, parse_record, read_record
from tenure.errors import CommitOutcomeUnknown, ElectionError, Fenced

__all__ = ["FailedBatch", "HandoverRecord", "read_handover", "write_handover"]


@dataclass(frozen=True)
class FailedBatch:
    """A batch that ended consecutive terms without committing, carried from term to term in the handover record.

    ``attempts`` counts terms in a row that tried ``batch_id`` and failed (or stalled) on it; a term that
    commits it ends the count. ``error`` is the last attempt's error, cut short. ``failing_s`` is how long the
    batch has been failing, at least: from its first failure to the last time a replica wrote or read this count,
    each stretch measured on one replica's monotonic clock, never a wall clock (``BatchAttempts``).
    ``split_failed`` says that a term that split the batch (set aside only what fails in it) failed on it too.
    """

    batch_id: int
    attempts: int
    error: str
    failing_s: float = 0.0
    split_failed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "attempts": self.attempts, "error": self.error,
                "failing_s": round(self.failing_s, 3), "split_failed": self.split_failed}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FailedBatch:
        return cls(batch_id=int(data["batch_id"]), attempts=int(data["attempts"]), error=str(data.get("error", "")),
                   failing_s=float(data.get("failing_s") or 0.0), split_failed=bool(data.get("split_failed")))

    def again(self, batch_id: int, error: str, failing_s: float, *, split_failed: bool = False) -> FailedBatch:
        """The count after another term failed on ``batch_id``, ``failing_s`` after the batch first failed: one more
        if it is this batch, else a new count (which has failed for no time yet)."""
        if batch_id != self.batch_id:
            return FailedBatch(batch_id, 1, error[:500], 0.0, split_failed)
        return FailedBatch(batch_id, self.attempts + 1, error[:500], max(failing_s, self.failing_s),
                           split_failed or self.split_failed)


@dataclass(frozen=True)
class HandoverRecord:
    """What the previous leader left at ``/tenure/<group>/handover`` (``None`` in the context if nothing)."""

    epoch: int
    last_batch: int | None
    clean: bool
    at: float
    replica_id: str = ""
    reason: str | None = None  # why the term ended, when it did not end cleanly on request
    failed_batch: FailedBatch | None = None  # carried forward by every term until a term commits past it

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "last_batch": self.last_batch,
            "clean": self.clean,
            "at": self.at,
            "replica_id": self.replica_id,
            "reason": self.reason,
            "failed_batch": None if self.failed_batch is None else self.failed_batch.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HandoverRecord:
        failed = data.get("failed_batch")
        return cls(
            epoch=int(data["epoch"]),
            last_batch=None if data.get("last_batch") is None else int(data["last_batch"]),
            clean=bool(data["clean"]),
            at=float(data["at"]),
            replica_id=str(data.get("replica_id", "")),
            reason=None if data.get("reason") is None else str(data["reason"]),
            failed_batch=FailedBatch.from_json(failed) if isinstance(failed, dict) else None,
        )


def read_handover(client: ZooKeeperClient, group: str, *, queue: int = 0, queues: int = 1,
                  timeout_s: float = 10.0) -> HandoverRecord | None:
    """The handover record of queue ``queue`` of ``group``, a group of ``queues`` (``None`` if none was written); a
    plain read, no leadership needed.

    Raises:
        ElectionError: the node holds no handover record (the message names it and the fix).
        ZooKeeperUnavailable, ZooKeeperDenied: ZooKeeper failed (``zookeeper_errors``).
    """
    paths = GroupPaths(group, queue, queues)
    path = paths.handover
    with zookeeper_errors(f"{paths.label}: reading the handover record"):
        try:
            raw, _stat = client.get_async(path).get(timeout=timeout_s)
        except NoNodeError:
            return None
    try:
        data = parse_record(raw)
        return None if data is None else HandoverRecord.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise ElectionError(f"{paths.label}: {path} holds no handover record ({type(exc).__name__}: {exc}): delete "
                            "it, and the next leader recovers as after a crash") from exc


def write_handover(client: ZooKeeperClient, paths: GroupPaths, record: HandoverRecord, *, epoch: int, node: str,
                   node_version: int, acl: list[ACL] | None, timeout_s: float) -> None:
    """Write ``record`` for the term of ``epoch``, fenced like a commit: one transaction checks the term's own
    election node (``node`` at ``node_version``) and compare-and-sets the record (its ``epoch`` set to the term's),
    after refusing a record a later term already wrote. ``Fence.write_handover`` is how a term calls it.

    Raises:
        Fenced: own node gone, record moved, or a higher epoch stored there.
        CommitOutcomeUnknown: the reply was lost, so the outcome is unknown (re-read with ``read_handover``).
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed otherwise (``zookeeper_errors``).
    """
    context = f"{paths.label}, epoch {epoch}, node {node}, handover"
    with zookeeper_errors(context):
        stored, version = read_record(client, paths.handover, acl=acl, timeout_s=timeout_s, context=context)
        if stored is not None and int(stored.get("epoch", -1)) > epoch:
            raise Fenced(f"{context}: the stored handover has epoch {stored['epoch']}, higher than ours; fenced")
        try:
            fenced_set(client, node=node, node_version=node_version, target=paths.handover,
                       data=encode_record(record.to_json(), epoch), expected_version=version, timeout_s=timeout_s,
                       context=context)
        except OutcomeUnknownError as exc:
            raise CommitOutcomeUnknown(f"{context}: connection lost while writing; outcome unknown ({exc})") from exc
