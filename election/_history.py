"""The group's term history in ZooKeeper: what each of the last terms was, for operators (``tenure history``).

``/tenure/<group>/history`` holds ``{"terms": [...]}``, oldest first, at most :data:`HISTORY_LIMIT` entries. A term
is appended by its own leader at inauguration through the fence (so only the leader of an epoch adds one, and a
stale leader adds none), then updated by the same term at its first commit and at its end. A term that never
recorded its end — its replica crashed, or lost ZooKeeper — is closed by its successor: ``clean`` when the handover
record it left says so, ``crash`` otherwise. Every write is a compare-and-set on the znode's version, retried on a
race, and an update touches only its own epoch's entry, so a late update of an old term cannot rewrite another.

The history is for people: no guarantee depends on it, and a write that fails is logged and skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from kazoo.exceptions import BadVersionError, NoNodeError

from tenure.election._acl import DigestCredential
from tenure.election._boundary import zookeeper_errors
from tenure.election._client import ZooKeeperClient
from tenure.election._handover import HandoverRecord
from tenure.election._layout import GroupPaths
from tenure.election._transaction import ensure_record_node, fenced_set
from tenure.errors import ElectionError, Fenced

__all__ = ["HISTORY_LIMIT", "TERM_ENDINGS", "TermHistory", "TermRecord", "read_history"]

HISTORY_LIMIT = 100
"""Terms kept; older ones are dropped as new ones begin."""

TERM_ENDINGS = ("clean", "revoked", "failed", "stalled", "crash")
"""How a term ended: a graceful handover, leadership lost (session, fence), the career raised, its work stopped
making progress (the leader gave the lock up and exited), or found dead by its successor. ``None`` while the term
runs."""

Ending = Literal["clean", "revoked", "failed", "stalled", "crash"]
_RETRIES = 5


@dataclass(frozen=True)
class TermRecord:
    """One term: who led, when, how it ended and what it committed. Times are Unix seconds."""

    epoch: int
    replica_id: str
    elected_at: float
    first_commit_at: float | None = None
    last_commit_at: float | None = None
    ended_at: float | None = None
    ended: str | None = None
    batches: int = 0
    records: int = 0
    closed_by: int | None = None  # the successor's epoch, when the successor closed this term
    reason: str | None = None  # why it ended, in its leader's words (``SIGTERM``, ``canary``, ``drained: …``)

    @property
    def first_commit_s(self) -> float | None:
        """From election to the term's first commit: how long the group waited on this leader."""
        return None if self.first_commit_at is None else self.first_commit_at - self.elected_at

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TermRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _decode(raw: bytes | None) -> list[TermRecord]:
    if not raw:
        return []
    try:
        terms = json.loads(raw.decode()).get("terms", [])
        return [TermRecord.from_json(t) for t in terms]
    except (ValueError, TypeError, AttributeError) as exc:
        raise ElectionError(f"the term history is not valid JSON ({exc}): delete the history znode to "
                            "start it afresh") from exc


def _encode(terms: list[TermRecord]) -> bytes:
    kept = terms[-HISTORY_LIMIT:]
    return json.dumps({"terms": [t.to_json() for t in kept]}, sort_keys=True, separators=(",", ":")).encode()


def read_history(client: ZooKeeperClient, group: str, *, queue: int = 0, queues: int = 1,
                 timeout_s: float = 10.0) -> list[TermRecord]:
    """The recorded terms of queue ``queue`` of ``group``, a group of ``queues``, oldest first (empty when none was
    recorded).

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed, or the history is not valid JSON.
    """
    paths = GroupPaths(group, queue, queues)
    with zookeeper_errors(f"{paths.label}: reading the term history"):
        try:
            raw, _stat = client.get_async(paths.history).get(timeout=timeout_s)
        except NoNodeError:
            return []
    return _decode(raw)


class TermHistory:
    """Writes the term history of one queue of a group (a replica's runner records its terms of that queue through
    it; ``queue`` of ``queues``, by default a group's one queue).

    Example::

        history = TermHistory(client, "orders", credential=cred, timeout_s=5.0)
        history.begin(epoch=fence.epoch, node=fence.node, node_version=fence.node_version, replica_id="r1",
                      elected_at=time.time(), previous=handover_record)
        history.update(fence.epoch, first_commit_at=time.time(), batches=1, records=500)
        history.update(fence.epoch, ended="clean", ended_at=time.time())

    Every call bounds each ZooKeeper call by ``timeout_s`` and raises the product's errors only
    (``zookeeper_errors``); with ``credential``, the history node, when this creates it, carries its ACL.
    """

    def __init__(self, client: ZooKeeperClient, group: str, *, queue: int = 0, queues: int = 1,
                 credential: DigestCredential | None = None, timeout_s: float = 10.0) -> None:
        self._client = client
        self._paths = GroupPaths(group, queue, queues)
        self._acl = credential.acls() if credential else None
        self._timeout_s = timeout_s

    @property
    def group(self) -> str:
        return self._paths.group

    def read(self) -> list[TermRecord]:
        return read_history(self._client, self._paths.group, queue=self._paths.queue, queues=self._paths.queues,
                            timeout_s=self._timeout_s)

    def begin(self, *, epoch: int, node: str, node_version: int, replica_id: str, elected_at: float,
              previous: HandoverRecord | None) -> TermRecord | None:
        """Append this term, closing any earlier one left open, in one write checked against the term's own
        election node (``node`` at ``node_version``), as a commit is.

        Args:
            previous: the handover record this term found; an open term of its epoch is closed ``clean`` or
                ``crash`` as the record says, any other open term ``crash``.

        Returns:
            the term before this one, as recorded (closed), or None for the group's first.

        Raises:
            Fenced: the term's node is gone: a stale leader records nothing.
        """
        clean_epoch = previous.epoch if previous is not None and previous.clean else None
        last_commit: dict[int, float] = {}

        def close(t: TermRecord) -> TermRecord:
            if t.ended is not None or t.epoch >= epoch:
                return t
            committed_at = last_commit.get(t.epoch)
            return replace(t, ended="clean" if t.epoch == clean_epoch else "crash", closed_by=epoch,
                           ended_at=t.ended_at or elected_at,
                           last_commit_at=max(filter(None, (t.last_commit_at, committed_at)), default=None))

        before: list[TermRecord] = []

        def change(terms: list[TermRecord]) -> list[TermRecord]:
            closed = [close(t) for t in terms if t.epoch != epoch]
            before[:] = closed[-1:]
            return [*closed, TermRecord(epoch=epoch, replica_id=replica_id, elected_at=elected_at)]

        with zookeeper_errors(f"{self._paths.label}: recording term {epoch}"):
            last_commit.update(self._last_commit())
            self._write(change, fenced_by=(node, node_version))
        return before[0] if before else None

    def _last_commit(self) -> dict[int, float]:
        """{epoch: committed_at} of the stored commit record, so a closed term's last commit is exact even when
        it died between history updates (empty when the record has no ``committed_at``)."""
        try:
            raw, _stat = self._client.get_async(self._paths.commit).get(timeout=self._timeout_s)
            record = json.loads(raw.decode()) if raw else {}
            return {int(record["epoch"]): float(record["committed_at"])}
        except (NoNodeError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def update(self, epoch: int, **changes: Any) -> None:
        """Change this term's own entry (``first_commit_at``, counts, ``ended`` …); no-op if it is not recorded."""
        if changes.get("ended") not in (None, *TERM_ENDINGS):
            raise ValueError(f"ended={changes['ended']!r} is not one of {TERM_ENDINGS}")

        def change(terms: list[TermRecord]) -> list[TermRecord]:
            return [replace(t, **changes) if t.epoch == epoch else t for t in terms]

        with zookeeper_errors(f"{self._paths.label}: updating term {epoch}"):
            self._write(change, fenced_by=None)

    def _write(self, change: Callable[[list[TermRecord]], list[TermRecord]],
               fenced_by: tuple[str, int] | None) -> None:
        path = self._paths.history
        for _ in range(_RETRIES):
            try:
                raw, stat = self._client.get_async(path).get(timeout=self._timeout_s)
            except NoNodeError:
                ensure_record_node(self._client, path, acl=self._acl, timeout_s=self._timeout_s)
                continue
            data = _encode(change(_decode(raw)))
            try:
                if fenced_by is None:
                    self._client.set_async(path, data, version=stat.version).get(timeout=self._timeout_s)
                else:
                    fenced_set(self._client, node=fenced_by[0], node_version=fenced_by[1], target=path, data=data,
                               expected_version=stat.version, timeout_s=self._timeout_s,
                               context=f"{self._paths.label}, term history")
                return
            except BadVersionError:
                continue  # another term wrote meanwhile: read again
            except Fenced:
                if fenced_by is not None and self._client.exists(fenced_by[0]) is None:
                    raise  # the term's node is gone: a stale leader records nothing
                continue  # the history moved under us (another term's update): read again
        raise ElectionError(f"{self._paths.label}: the term history kept changing under {_RETRIES} "
                            "writes; skipped")
