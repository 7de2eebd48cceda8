"""The line of contenders: one contender's own node in it — created, found, placed, re-checked and deleted.

kazoo's Lock recipe with its gaps closed (ARCHITECTURE.md "ZooKeeper layout"): a guid-protected create, a watch
on the next-lower node only, and the ownership check whose absence gave Curator two leaders (CURATOR-696).
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.security import ACL
from structlog.typing import FilteringBoundLogger

from tenure.election._identity import Identity
from tenure.election._layout import NODE_MARK, GroupPaths, sort_nodes
from tenure.election._transaction import ensure_record_node
from tenure.errors import ElectionError

__all__ = ["JOINED", "RELEASED", "RELEASE_INCOMPLETE", "Line", "Look", "OwnNode", "Place", "Verdict"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
JOINED: Final = "joined"
RELEASED: Final = "released"
RELEASE_INCOMPLETE: Final = "release_incomplete"

_CREATE_TRIES = 5
_REPLICA_CACHE = 1000  # node name → replica id; cleared when it grows past this (names never repeat)

#: Makes a fresh watch of a kind (``"own"`` or ``"predecessor"``); the caller drops deliveries of older ones.
_Arm = Callable[[str], Callable[[WatchedEvent], None]]


@dataclass(frozen=True)
class OwnNode:
    """Own election node: its path, data version, ``czxid`` (the term's epoch) and the session that owns it."""

    path: str
    version: int
    epoch: int
    session_id: int | None

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[1]


class Place(enum.Enum):
    """Where one look at the line found own node."""

    LOST = "lost"  # own node is gone, or not this session's: forget it and create another
    RELIST = "relist"  # the predecessor went between listing and watching: look again
    LOWEST = "lowest"  # lowest and owned by this session (own node watched): lead
    BEHIND = "behind"  # not the lowest: the next-lower node is watched


@dataclass(frozen=True)
class Look:
    """One look at the line; ``predecessor``, ``position`` and ``leader`` (node names) are set when BEHIND."""

    place: Place
    predecessor: str | None = None
    position: int = 0
    leader: str | None = None


class Verdict(enum.Enum):
    """A leader's re-check of its own node (after a reconnect or a deadline suspension)."""

    HOLDS = "holds"
    DELETED = "node deleted"
    NOT_OWNED = "node not owned by this session"
    NOT_LOWEST = "not the lowest node after reconnect"


class Line:
    """One contender's place in ``/tenure/<group>/election``; used from the election's control thread only.

    Example::

        line = Line(client, paths, identity, acl=None, op_timeout_s=10.0, clock=time.monotonic, log=log)
        own = line.create(session)
        look = line.look(own, session, arm)   # Place.LOWEST: lead; Place.BEHIND: follow look.predecessor
    """

    def __init__(self, client: KazooClient, paths: GroupPaths, identity: Identity, *, acl: list[ACL] | None,
                 op_timeout_s: float, clock: Callable[[], float], log: FilteringBoundLogger) -> None:
        self._client = client
        self._paths = paths
        self._identity = identity
        self._acl = acl
        self._op_timeout_s = op_timeout_s
        self._clock = clock
        self._log = log
        self._guid: str | None = None  # set while a create may have reached the server unanswered
        self._create_tried = False
        self._replica_names: dict[str, str | None] = {}
        self._orphans: list[str] = []

    def _op(self, result: Any, timeout_s: float | None = None) -> Any:
        """Wait for a kazoo async result with a bound: sync calls can hang while disconnected."""
        return result.get(timeout=self._op_timeout_s if timeout_s is None else timeout_s)

    def _connected(self) -> bool:
        return bool(self._client.state == KazooState.CONNECTED)

    # -- joining -----------------------------------------------------------------------------

    def create(self, session: int | None, before_create: Callable[[str], None] | None = None) -> OwnNode | None:
        """Create own node ``<guid>-n_<seq>``; ``None`` when it could not be done now (retry later).

        The guid trick (credited by kazoo to Curator): if a create's reply is lost, the node may exist anyway,
        so every retry first lists the children and looks for our guid. ``before_create`` is a test seam
        called with the node prefix just before each create.
        """
        if self._guid is None:
            self._guid = uuid.uuid4().hex
            self._create_tried = False
        prefix = self._paths.node(self._guid + NODE_MARK)
        for attempt in range(1, _CREATE_TRIES + 1):
            try:
                if self._create_tried and (found := self._find_own(session)) is not None:
                    return found
                self._ensure_paths()
                self._create_tried = True
                if before_create is not None:
                    before_create(prefix)
                path, stat = self._op(self._client.create_async(
                    prefix, self._identity.to_bytes(), acl=self._acl, ephemeral=True, sequence=True,
                    include_data=True))
                return self._adopt(path, stat, session)
            except NoNodeError:
                self._log.debug("create_parent_missing", attempt=attempt)
            except (ConnectionLoss, self._client.handler.timeout_exception) as exc:
                self._log.debug("create_retry", attempt=attempt, error=type(exc).__name__)
                if not self._connected():
                    return None
                time.sleep(min(0.05 * 2**attempt, 1.0))
        return None

    def abandon(self) -> None:
        """Forget a pending create: its node, if any, belongs to a session or a node we have given up on."""
        self._guid = None

    def _ensure_paths(self) -> None:
        self._op(self._client.ensure_path_async(self._paths.election, acl=self._acl))
        for path in (self._paths.commit, self._paths.handover):
            ensure_record_node(self._client, path, acl=self._acl, timeout_s=self._op_timeout_s)

    def _find_own(self, session: int | None) -> OwnNode | None:
        try:
            names = self.names()
        except NoNodeError:
            return None  # no parent, so no node of ours: create (after ensuring the parent)
        assert self._guid is not None
        for name in (n for n in names if n.startswith(self._guid + NODE_MARK)):
            path = self._paths.node(name)
            stat = self._op(self._client.exists_async(path))
            if stat is not None and stat.ephemeralOwner == session:
                self._log.info("own_node_found_after_retry", node=name)
                return self._adopt(path, stat, session)
        return None

    def _adopt(self, path: str, stat: Any, session: int | None) -> OwnNode:
        self._guid = None
        self._log.info(JOINED, node=path.rsplit("/", 1)[1], czxid=int(stat.czxid))
        return OwnNode(path=path, version=int(stat.version), epoch=int(stat.czxid), session_id=session)

    # -- placing -----------------------------------------------------------------------------

    def names(self) -> list[str]:
        """The election node names in line order (raises ``NoNodeError`` when the parent is gone)."""
        return sort_nodes(self._op(self._client.get_children_async(self._paths.election)))

    def look(self, own: OwnNode, session: int | None, arm: _Arm) -> Look:
        """Steps 2–5 of the recipe: list, find own node, and either verify it leads or watch the one before.

        Lowest: lead iff this session owns the node (CURATOR-696: a node left by an old session is not
        ours), with a watch on it. Otherwise watch only the next-lower node, as a data watch via get, so no
        watch is left behind when it is already gone (then look again: never assume).
        """
        names = self.names()
        if own.name not in names:
            self._log.info("own_node_missing", node=own.name)
            return Look(Place.LOST)
        position = names.index(own.name)
        if position == 0:
            try:
                _, stat = self._op(self._client.get_async(own.path, watch=arm("own")))
            except NoNodeError:
                return Look(Place.LOST)
            if stat.ephemeralOwner != session:
                self._log.info("node_not_owned", node=own.path, owner=hex(stat.ephemeralOwner),
                               session=hex(session or 0))
                return Look(Place.LOST)
            return Look(Place.LOWEST)
        predecessor = names[position - 1]
        try:
            self._op(self._client.get_async(self._paths.node(predecessor), watch=arm("predecessor")))
        except NoNodeError:
            return Look(Place.RELIST)
        return Look(Place.BEHIND, predecessor=predecessor, position=position, leader=names[0])

    def recheck(self, own: OwnNode, session: int | None, arm: _Arm) -> Verdict:
        """A leader's own node must still exist, be owned by this session and be the lowest (own node watched)."""
        try:
            names = self.names()
            try:
                _, stat = self._op(self._client.get_async(own.path, watch=arm("own")))
            except NoNodeError:
                stat = None
        except NoNodeError:
            names, stat = [], None
        if stat is None:
            return Verdict.DELETED
        if stat.ephemeralOwner != session or session != own.session_id:
            return Verdict.NOT_OWNED
        if not names or names[0] != own.name:
            return Verdict.NOT_LOWEST
        return Verdict.HOLDS

    def replica_of(self, name: str) -> str | None:
        """The replica id stored in node ``name`` (cached; ``None`` if gone or not an identity)."""
        if name not in self._replica_names:
            if len(self._replica_names) > _REPLICA_CACHE:
                self._replica_names.clear()
            try:
                raw, _ = self._op(self._client.get_async(self._paths.node(name)))
            except NoNodeError:
                return None
            identity = Identity.from_bytes(raw)
            self._replica_names[name] = identity.replica_id if identity else None
        return self._replica_names[name]

    # -- leaving -----------------------------------------------------------------------------

    def delete_until(self, node: str, deadline: float) -> ElectionError | None:
        """Delete ``node`` now; retry transient errors with back-off until ``deadline`` (logged, not swallowed).

        Returns the error to raise to the caller when the deadline passed; the node is then kept as an orphan.
        """
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - self._clock()
            try:
                self._op(self._client.delete_async(node), timeout_s=max(0.01, min(self._op_timeout_s, remaining)))
                self._log.info(RELEASED, node=node.rsplit("/", 1)[1], attempt=attempt)
                return None
            except NoNodeError:
                self._log.info(RELEASED, node=node.rsplit("/", 1)[1], already_gone=True)
                return None
            except (SessionExpiredError, ConnectionClosedError) as exc:
                self._log.info(RELEASED, node=node.rsplit("/", 1)[1], gone_with_session=type(exc).__name__)
                return None
            except (KazooException, self._client.handler.timeout_exception) as exc:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    self._orphans.append(node)
                    self._log.warning(RELEASE_INCOMPLETE, node=node, attempts=attempt, error=type(exc).__name__)
                    return ElectionError(
                        f"{self._paths.label}: could not delete election node {node} after {attempt} "
                        f"attempts ({type(exc).__name__}); retrying in the background; it also goes when the "
                        "session ends (stop the client to end it)")
                self._log.debug("release_retry", attempt=attempt, error=type(exc).__name__)
                time.sleep(min(0.05 * 2**attempt, 1.0, remaining))

    def leave(self, node: str) -> None:
        """Delete a node we own but no longer stand on (a revoked term's), now or on a later tick."""
        self._orphans.append(node)
        self.delete_orphans()

    def orphans_died(self) -> None:
        """The session ended: the orphans were ephemeral and went with it."""
        self._orphans.clear()

    def delete_orphans(self) -> None:
        """Nodes we own but left behind (a failed release, a revoked term): delete them when we can."""
        if not self._orphans or not self._connected():
            return
        for node in list(self._orphans):
            try:
                self._op(self._client.delete_async(node))
            except NoNodeError:
                pass
            except (KazooException, self._client.handler.timeout_exception) as exc:
                self._log.debug("orphan_delete_retry", node=node, error=type(exc).__name__)
                continue
            self._orphans.remove(node)
            self._log.info("orphan_deleted", node=node)
