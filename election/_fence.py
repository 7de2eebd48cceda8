"""The fenced commit: one ZooKeeper transaction that checks the leader's own node and CASes a record."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)

from election._errors import ElectionError, Fenced, NotLeader
from election._status import parse_record

if TYPE_CHECKING:
    from election._election import Election

__all__ = ["Fence", "encode_record", "fenced_set"]


def encode_record(record: dict[str, Any], epoch: int) -> bytes:
    """The record as stored: the caller's fields plus ``epoch`` (ours wins), compact sorted JSON."""
    return json.dumps({**record, "epoch": epoch}, sort_keys=True, separators=(",", ":")).encode()


class _OutcomeUnknownError(Exception):
    """The transaction was sent but its reply was lost: it may or may not have applied."""


def fenced_set(client: KazooClient, *, node: str, node_version: int, target: str, data: bytes,
               expected_version: int, timeout_s: float, context: str) -> int:
    """Send ``check(node, node_version) + set_data(target, data, version=expected_version)`` as ONE transaction.

    Returns the target's new version. Raises ``Fenced`` when the node is gone (its session ended or it was
    deleted) or the target's version moved; ``_OutcomeUnknownError`` when the reply was lost.
    """
    if expected_version < 0:
        raise ElectionError(f"{context}: expected_version={expected_version} would skip the compare-and-set; "
                            "pass the version returned by the last read")
    tx = client.transaction()
    tx.check(node, node_version)
    tx.set_data(target, data, version=expected_version)
    try:
        results = tx.commit_async().get(timeout=timeout_s)
    except (SessionExpiredError, ConnectionClosedError) as exc:
        raise Fenced(f"{context}: the session is gone ({type(exc).__name__}), so node {node} is gone with it; "
                     "if the request reached ZooKeeper before that it may have applied: re-read the record") from exc
    except (ConnectionLoss, client.handler.timeout_exception) as exc:
        raise _OutcomeUnknownError(str(exc) or type(exc).__name__) from exc
    check, set_result = results
    if isinstance(check, NoNodeError):
        raise Fenced(f"{context}: own election node {node} is gone (session expired or node deleted); "
                     "this leader is fenced off: stop writing and hand over")
    if isinstance(check, BadVersionError):
        raise Fenced(f"{context}: own election node {node} changed (version is no longer {node_version}); fenced")
    if isinstance(set_result, BadVersionError):
        raise Fenced(f"{context}: {target} is no longer at version {expected_version} (another writer moved it); "
                     "fenced: re-read before deciding anything")
    if isinstance(set_result, NoNodeError):
        raise Fenced(f"{context}: {target} does not exist (the group was deleted?); fenced")
    for result in results:
        if isinstance(result, NoAuthError):
            raise ElectionError(f"{context}: ZooKeeper denied the write to {target} (NoAuth): the client needs "
                                "auth_data=DigestCredential(...).auth_data() matching the group's ACL")
        if isinstance(result, Exception):
            raise ElectionError(f"{context}: transaction failed: {type(result).__name__}: {result}")
    return int(set_result.version)


def ensure_record_node(election: Election, path: str) -> None:
    """Create ``path`` empty (with the group's ACL) when missing, so a first commit can CAS version 0."""
    with contextlib.suppress(NodeExistsError):
        election.client.create_async(path, b"", acl=election.acl, makepath=True).get(timeout=election.op_timeout_s)


class Fence:
    """The fenced commit primitive of one term (satisfies ``career.Fence``); get it from ``Election.fence()``.

    Example::

        fence = election.fence()
        record, version = fence.read_commit()
        version = fence.commit({"batch": 17, "published": "table/batch=17"}, expected_version=version)

    ``commits_attempted``, ``commits_fenced`` and ``commits_refused`` count calls to ``commit``, rejections
    by the fence (``Fenced``) and refusals before sending (``NotLeader``) for this term.
    """

    def __init__(self, election: Election, *, epoch: int, node: str, node_version: int) -> None:
        self._election = election
        self._epoch = epoch
        self._node = node
        self._node_version = node_version
        self._stored_epoch: int | None = None
        self._lock = threading.Lock()
        self.commits_attempted = 0
        self.commits_fenced = 0
        self.commits_refused = 0

    @property
    def epoch(self) -> int:
        """The fencing token of this term (the ``czxid`` of the leader's election node)."""
        return self._epoch

    @property
    def node(self) -> str:
        """The path of the election node every commit of this term checks."""
        return self._node

    def _context(self, expected_version: int | None = None) -> str:
        text = f"group {self._election.group}, epoch {self._epoch}, node {self._node}"
        return text if expected_version is None else f"{text}, expected version {expected_version}"

    def read_commit(self) -> tuple[dict[str, Any] | None, int]:
        """The stored commit record (``None`` if never committed) and its znode version."""
        election = self._election
        path = election.paths.commit
        for _ in range(2):
            try:
                raw, stat = election.client.get_async(path).get(timeout=election.op_timeout_s)
            except NoNodeError:
                ensure_record_node(election, path)
                continue
            record = parse_record(raw)
            with self._lock:
                self._stored_epoch = None if record is None or record.get("epoch") is None else int(record["epoch"])
            return record, int(stat.version)
        raise ElectionError(f"{self._context()}: {path} vanished twice while reading it: "
                            "is someone deleting the group?")

    def _count(self, attr: str) -> None:
        with self._lock:
            setattr(self, attr, getattr(self, attr) + 1)
        self._election._count(attr)  # cumulative, across terms, for metrics

    def _precheck(self, context: str) -> None:
        """Python-side refusals before anything is sent (the transaction below is what makes them atomic)."""
        election = self._election
        if election.epoch != self._epoch:
            self._count("commits_fenced")
            raise Fenced(f"{context}: this term is over (the election is now at epoch {election.epoch}); fenced")
        if not election.is_leader():
            self._count("commits_refused")
            raise NotLeader(f"{context}: not leading now (state {election.state.name}, suspended or past the "
                            "safe-until deadline); no commit may start")
        with self._lock:
            stored = self._stored_epoch
        if stored is not None and stored > self._epoch:
            self._count("commits_fenced")
            raise Fenced(f"{context}: the stored commit has epoch {stored}, higher than ours; a newer leader "
                         "has committed: fenced")

    def commit(self, record: dict[str, Any], expected_version: int) -> int:
        """Write ``record`` (plus ``"epoch"``) to ``/tenure/<group>/commit`` iff this term still holds.

        One transaction: check(own election node) + set_data(commit, version=expected_version).

        Raises:
            NotLeader: suspended, past the safe-until deadline, or disconnected — nothing was sent.
            Fenced: the node is gone, the version moved, or a higher epoch is stored.
            ElectionError: the reply was lost and the outcome could not be read back (re-read).
        """
        self._count("commits_attempted")
        context = self._context(expected_version)
        self._precheck(context)
        election = self._election
        if election.faults is not None:
            election.faults("before_transaction")  # a pause here is what the fence exists for
        data = encode_record(record, self._epoch)
        try:
            version = fenced_set(election.client, node=self._node, node_version=self._node_version,
                                 target=election.paths.commit, data=data, expected_version=expected_version,
                                 timeout_s=election.op_timeout_s, context=context)
        except Fenced:
            self._count("commits_fenced")
            election.log.info("commit_fenced", epoch=self._epoch, expected_version=expected_version)
            raise
        except _OutcomeUnknownError as exc:
            return self._resolve_unknown(data, expected_version, context, exc)
        with self._lock:
            self._stored_epoch = self._epoch
        election.log.debug("committed", epoch=self._epoch, version=version)
        return version

    def _resolve_unknown(self, data: bytes, expected_version: int, context: str, exc: _OutcomeUnknownError) -> int:
        """The reply was lost: read the record back (retrying connection losses until ``op_timeout_s``) to learn
        whether our transaction applied."""
        election = self._election
        deadline = time.monotonic() + election.op_timeout_s
        while True:
            try:
                raw, stat = election.client.get_async(election.paths.commit).get(timeout=election.op_timeout_s)
                break
            except (SessionExpiredError, ConnectionLoss) as retry_exc:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                read_exc: Exception = retry_exc
            except Exception as other:
                read_exc = other
            raise ElectionError(f"{context}: connection lost during the commit ({exc}) and the record could not "
                                f"be read back ({type(read_exc).__name__}): outcome unknown; re-read with "
                                "read_commit() once connected") from read_exc
        if stat.version == expected_version + 1 and raw == data:
            election.log.info("commit_confirmed_after_connection_loss", epoch=self._epoch, version=stat.version)
            return int(stat.version)
        if stat.version == expected_version:
            self._count("commits_refused")
            raise NotLeader(f"{context}: connection lost during the commit ({exc}); it did not apply")
        self._count("commits_fenced")
        election.log.info("commit_fenced", epoch=self._epoch, expected_version=expected_version,
                          after="connection loss")
        raise Fenced(f"{context}: connection lost during the commit and the record moved to version "
                     f"{stat.version} by someone else; fenced")

    def __repr__(self) -> str:
        return f"Fence(group={self._election.group!r}, epoch={self._epoch}, node={self._node!r})"
