"""The fenced writes of one term (the commit record, the handover record through its door, ``_handover``), and the
narrow view of the election (``ElectionView``) they write through."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final, Literal, Protocol

from kazoo.client import KazooClient
from kazoo.security import ACL
from structlog.typing import FilteringBoundLogger

from tenure.election._boundary import zookeeper_errors
from tenure.election._handover import HandoverRecord, write_handover
from tenure.election._layout import GroupPaths
from tenure.election._states import LeadershipState
from tenure.election._transaction import OutcomeUnknownError, encode_record, fenced_set, read_back, read_record
from tenure.errors import CommitOutcomeUnknown, Fenced, NotLeader

__all__ = ["COMMIT_FENCED", "CommitTally", "ElectionView", "Fence"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
COMMIT_FENCED: Final = "commit_fenced"

_Outcome = Literal["attempted", "fenced", "refused"]


class ElectionView(Protocol):
    """The election as a ``Fence`` sees it: what it needs from the election that granted its term (``Election``
    satisfies it).

    Modelled on client-go's ``resourcelock.Interface``: the fence sees the group's paths, the client and its
    bounds, the election's current epoch and state, whether it still leads (``is_leader`` folds in the
    safe-until deadline and the connection), the fault hook and the bound logger — and nothing else.
    """

    @property
    def client(self) -> KazooClient: ...

    @property
    def paths(self) -> GroupPaths: ...

    @property
    def acl(self) -> list[ACL] | None: ...

    @property
    def op_timeout_s(self) -> float: ...

    @property
    def epoch(self) -> int | None: ...

    @property
    def state(self) -> LeadershipState: ...

    @property
    def faults(self) -> Callable[[str], None] | None: ...

    @property
    def log(self) -> FilteringBoundLogger: ...

    def is_leader(self) -> bool: ...


class CommitTally:
    """Counts of commits attempted, fenced (rejected by the fence) and refused (``NotLeader``, nothing sent).

    Thread-safe. Each ``Fence`` keeps one for its term and adds to its election's, which spans every term.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[_Outcome, int] = {"attempted": 0, "fenced": 0, "refused": 0}

    def add(self, outcome: _Outcome) -> None:
        with self._lock:
            self._counts[outcome] += 1

    def __getitem__(self, outcome: _Outcome) -> int:
        with self._lock:
            return self._counts[outcome]


class Fence:
    """The fenced commit primitive of one term (satisfies ``career.FencedCommit``); get it from ``Election.fence()``.

    Example::

        fence = election.fence()
        record, version = fence.read_commit()
        version = fence.commit({"batch": 17, "published": "table/batch=17"}, expected_version=version)

    ``commits_attempted``, ``commits_fenced`` and ``commits_refused`` count calls to ``commit``, rejections
    by the fence (``Fenced``) and refusals before sending (``NotLeader``) for this term.
    """

    def __init__(self, election: ElectionView, *, epoch: int, node: str, node_version: int, tally: CommitTally) -> None:
        """``epoch``, ``node`` and ``node_version`` are the term's own node; ``tally`` the election's counts."""
        self._election = election
        self._epoch = epoch
        self._node = node
        self._node_version = node_version
        self._election_tally = tally
        self._tally = CommitTally()
        self._stored_epoch: int | None = None
        self._lock = threading.Lock()

    @property
    def epoch(self) -> int:
        """The fencing token of this term (the ``czxid`` of the leader's election node)."""
        return self._epoch

    @property
    def node(self) -> str:
        """The path of the election node every commit of this term checks."""
        return self._node

    @property
    def node_version(self) -> int:
        """The version of that node the transaction checks."""
        return self._node_version

    @property
    def commits_attempted(self) -> int:
        return self._tally["attempted"]

    @property
    def commits_fenced(self) -> int:
        return self._tally["fenced"]

    @property
    def commits_refused(self) -> int:
        return self._tally["refused"]

    def _context(self, expected_version: int | None = None) -> str:
        text = f"{self._election.paths.label}, epoch {self._epoch}, node {self._node}"
        return text if expected_version is None else f"{text}, expected version {expected_version}"

    def read_commit(self) -> tuple[dict[str, Any] | None, int]:
        """The stored commit record (``None`` if never committed) and its znode version.

        Raises:
            ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed (``zookeeper_errors``).
        """
        election = self._election
        context = self._context()
        with zookeeper_errors(context):
            record, version = read_record(election.client, election.paths.commit, acl=election.acl,
                                          timeout_s=election.op_timeout_s, context=context)
        with self._lock:
            self._stored_epoch = None if record is None or record.get("epoch") is None else int(record["epoch"])
        return record, version

    def _count(self, outcome: _Outcome) -> None:
        self._tally.add(outcome)
        self._election_tally.add(outcome)  # cumulative, across terms, for metrics

    def _precheck(self, context: str) -> None:
        """Python-side refusals before anything is sent (the transaction below is what makes them atomic)."""
        election = self._election
        current = election.epoch
        if current != self._epoch:
            self._count("fenced")
            raise Fenced(f"{context}: this term is over (the election is now at epoch {current}); fenced")
        if not election.is_leader():
            self._count("refused")
            raise NotLeader(f"{context}: not leading now (state {election.state.name}, suspended or past the "
                            "safe-until deadline); no commit may start")
        with self._lock:
            stored = self._stored_epoch
        if stored is not None and stored > self._epoch:
            self._count("fenced")
            raise Fenced(f"{context}: the stored commit has epoch {stored}, higher than ours; a newer leader "
                         "has committed: fenced")

    def commit(self, record: dict[str, Any], expected_version: int) -> int:
        """Write ``record`` (plus ``"epoch"``) to ``/tenure/<group>/commit`` iff this term still holds.

        One transaction: check(own election node) + set_data(commit, version=expected_version).

        Raises:
            NotLeader: suspended, past the safe-until deadline, or disconnected — nothing was sent.
            Fenced: the node is gone, the version moved, or a higher epoch is stored.
            CommitOutcomeUnknown: the reply was lost and the outcome could not be read back (re-read).
            ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed otherwise (``zookeeper_errors``).
        """
        self._count("attempted")
        context = self._context(expected_version)
        self._precheck(context)
        election = self._election
        if election.faults is not None:
            election.faults("before_transaction")  # a pause here is what the fence exists for
        data = encode_record(record, self._epoch)
        try:
            with zookeeper_errors(context):
                version = fenced_set(election.client, node=self._node, node_version=self._node_version,
                                     target=election.paths.commit, data=data, expected_version=expected_version,
                                     timeout_s=election.op_timeout_s, context=context)
        except Fenced:
            self._count("fenced")
            election.log.info(COMMIT_FENCED, epoch=self._epoch, expected_version=expected_version)
            raise
        except OutcomeUnknownError as exc:
            return self._resolve_unknown(data, expected_version, context, exc)
        with self._lock:
            self._stored_epoch = self._epoch
        election.log.debug("committed", epoch=self._epoch, version=version)
        return version

    def _resolve_unknown(self, data: bytes, expected_version: int, context: str, exc: OutcomeUnknownError) -> int:
        """The reply was lost: read the record back to learn whether our transaction applied."""
        election = self._election
        try:
            raw, version = read_back(election.client, election.paths.commit, timeout_s=election.op_timeout_s)
        except Exception as read_exc:
            raise CommitOutcomeUnknown(f"{context}: connection lost during the commit ({exc}) and the record could not "
                                f"be read back ({type(read_exc).__name__}): outcome unknown; re-read with "
                                "read_commit() once connected") from read_exc
        if version == expected_version + 1 and raw == data:
            election.log.info("commit_confirmed_after_connection_loss", epoch=self._epoch, version=version)
            return version
        if version == expected_version:
            self._count("refused")
            raise NotLeader(f"{context}: connection lost during the commit ({exc}); it did not apply")
        self._count("fenced")
        election.log.info(COMMIT_FENCED, epoch=self._epoch, expected_version=expected_version,
                      after="connection loss")
        raise Fenced(f"{context}: connection lost during the commit and the record moved to version "
                     f"{version} by someone else; fenced")

    def write_handover(self, record: HandoverRecord) -> None:
        """Write the handover record for this term, fenced like a commit (``election._handover.write_handover``).

        Raises:
            Fenced: own node gone, record moved, or a higher epoch stored there.
            CommitOutcomeUnknown: the reply was lost, so the outcome is unknown (re-read the record).
            ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed otherwise.
        """
        election = self._election
        write_handover(election.client, election.paths, record, epoch=self._epoch, node=self._node,
                       node_version=self._node_version, acl=election.acl, timeout_s=election.op_timeout_s)
        election.log.info("handover_written", epoch=self._epoch, clean=record.clean)

    def __repr__(self) -> str:
        return f"Fence(group={self._election.paths.group!r}, epoch={self._epoch}, node={self._node!r})"
