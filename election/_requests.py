"""Operators' requests in ZooKeeper: a replica kept out of the election (drain) and a leader asked to hand over —
read, written and watched, here alone.

``/tenure/<group>/drained/<replica>`` — persistent; JSON ``{reason, since}``. ``tenure drain`` creates it and
``tenure undrain`` deletes it; the replica watches its own node and leaves the election (handing over first when
it leads) or joins again. It outlives the replica's process, so a restarted replica stays drained.

``/tenure/<group>/handover-request`` — persistent; JSON ``{epoch, to, requested_at, expires_at}``; in a group of several
queues each queue has its own, ``/tenure/<group>/queues/<k>/handover-request`` (``GroupPaths``), which only that queue's
terms read. ``tenure handover`` creates it. Only the leader of ``epoch`` acts on it (a clean handover, then it rejoins
at the back of the line). While it is live and names a target that is in the election, any other replica elected in a
later term defers to the target: it leaves and rejoins at the back without inaugurating, so the target is elected next.
The target, once inaugurated, deletes the request; once it has timed out everyone ignores it, so a target that died
cannot keep the group leaderless. A replica counts the timeout (``expires_at - requested_at``) on its own monotonic
clock from when it first read the request (``career.lifecycle.HandoverRequests``): the requester's wall clock and the
replica's may disagree.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from tenure.election._acl import DigestCredential
from tenure.election._boundary import zookeeper_errors
from tenure.election._client import ZooKeeperClient
from tenure.election._layout import GroupPaths
from tenure.election._transaction import lenient_object

__all__ = ["DrainRequest", "HandoverRequest", "OperatorRequests"]


@dataclass(frozen=True)
class DrainRequest:
    """Why and since when (Unix seconds) a replica is drained."""

    replica_id: str
    reason: str
    since: float

    def to_json(self) -> dict[str, Any]:
        return {"replica_id": self.replica_id, "reason": self.reason, "since": self.since}

    def encode(self) -> bytes:
        return json.dumps({"reason": self.reason, "since": self.since}, sort_keys=True).encode()

    @classmethod
    def decode(cls, replica_id: str, raw: bytes | None) -> DrainRequest:
        data = lenient_object(raw)
        return cls(replica_id, str(data.get("reason", "")), float(data.get("since") or 0.0))


@dataclass(frozen=True)
class HandoverRequest:
    """Hand over the term of ``epoch``; to ``to`` if set (else to whoever is next in line). Unix seconds."""

    epoch: int
    to: str | None
    requested_at: float
    expires_at: float

    def live(self, now: float) -> bool:
        """On the requester's own clock (``tenure handover``); a replica uses ``timeout_s`` from when it read it."""
        return now < self.expires_at

    @property
    def timeout_s(self) -> float:
        """How long the request stays live (its two times are one host's readings: no clock skew between them)."""
        return self.expires_at - self.requested_at

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def decode(cls, raw: bytes | None) -> HandoverRequest | None:
        """The request, or None for empty or unreadable data (treated as no request)."""
        try:
            data = json.loads(raw.decode()) if raw else None
            if not isinstance(data, dict):
                return None
            return cls(int(data["epoch"]), None if data.get("to") is None else str(data["to"]),
                       float(data["requested_at"]), float(data["expires_at"]))
        except (ValueError, KeyError, TypeError):
            return None


class OperatorRequests:
    """One group's operators' requests: who is drained, whether a handover of one of its ``queues`` is asked — read,
    written, watched. Drain requests are the group's; each queue has its own handover request (``queue``, 0 in a
    group of one queue).

    The replica reads and watches them (the runner's ``RequestSource``); ``tenure drain``, ``undrain`` and
    ``handover`` write them, and ``tenure status`` lists the drained replicas. Every call is bounded by
    ``timeout_s``; with ``credential``, the nodes it creates carry its ACL.

    Example::

        requests = OperatorRequests(client, "orders", timeout_s=5.0)
        requests.put_drain(DrainRequest("r2", "new disk", time.time()))
        requests.watch("r2", on_drain=print, on_handover=print)   # from kazoo's thread: only enqueue there

    Raises (every call but ``watch``, which waits): ZooKeeperUnavailable, ZooKeeperDenied, ElectionError when
    ZooKeeper fails.
    """

    def __init__(self, client: ZooKeeperClient, group: str, *, queues: int = 1,
                 credential: DigestCredential | None = None, timeout_s: float = 10.0) -> None:
        self._client = client
        self._paths = GroupPaths(group, queues=queues)
        self._acl = credential.acls() if credential else None
        self._timeout_s = timeout_s
        self._watches: list[DataWatch] = []

    def _get(self, path: str) -> tuple[bytes, int] | None:
        try:
            raw, stat = self._client.get_async(path).get(timeout=self._timeout_s)
        except NoNodeError:
            return None
        return raw, int(stat.version)

    def _put(self, path: str, data: bytes) -> None:
        try:
            self._client.create_async(path, data, acl=self._acl, makepath=True).get(timeout=self._timeout_s)
        except NodeExistsError:
            self._client.set_async(path, data).get(timeout=self._timeout_s)

    def _what(self, step: str, queue: int | None = None) -> str:
        label = self._paths.label if queue is None else self._paths.of_queue(queue).label
        return f"{label}: {step}"

    # -- drain -------------------------------------------------------------------------------------------------

    def drains(self) -> list[DrainRequest]:
        """Every drained replica of the group, by name (nodes that vanish while read are left out)."""
        with zookeeper_errors(self._what("reading the drained replicas")):
            try:
                names = sorted(self._client.get_children_async(self._paths.drained).get(timeout=self._timeout_s))
            except NoNodeError:
                return []
            found = []
            for name in names:
                if (got := self._get(self._paths.drained_node(name))) is not None:
                    found.append(DrainRequest.decode(name, got[0]))
            return found

    def drain(self, replica_id: str) -> DrainRequest | None:
        """``replica_id``'s drain request now (one read), so a replica drained before it starts never joins."""
        with zookeeper_errors(self._what(f"reading the drain request of {replica_id}")):
            got = self._get(self._paths.drained_node(replica_id))
        return None if got is None else DrainRequest.decode(replica_id, got[0])

    def put_drain(self, request: DrainRequest) -> None:
        """Drain ``request.replica_id`` (or replace its reason when it is drained already)."""
        with zookeeper_errors(self._what(f"draining {request.replica_id}")):
            self._put(self._paths.drained_node(request.replica_id), request.encode())

    def remove_drain(self, replica_id: str) -> bool:
        """Undrain ``replica_id``; False when it was not drained."""
        with zookeeper_errors(self._what(f"undraining {replica_id}")):
            try:
                self._client.delete_async(self._paths.drained_node(replica_id)).get(timeout=self._timeout_s)
            except NoNodeError:
                return False
        return True

    # -- handover request --------------------------------------------------------------------------------------

    def handover(self, queue: int = 0) -> HandoverRequest | None:
        """Queue ``queue``'s handover request now (one read); None when there is none or it is unreadable."""
        with zookeeper_errors(self._what("reading the handover request", queue)):
            got = self._get(self._paths.of_queue(queue).handover_request)
        return None if got is None else HandoverRequest.decode(got[0])

    def put_handover(self, request: HandoverRequest, queue: int = 0) -> None:
        """Ask queue ``queue``'s leader for a handover (replacing any earlier request of that queue)."""
        with zookeeper_errors(self._what(f"requesting a handover of epoch {request.epoch}", queue)):
            self._put(self._paths.of_queue(queue).handover_request, request.encode())

    def remove_handover(self, request: HandoverRequest, queue: int = 0) -> None:
        """Remove queue ``queue``'s ``request`` once granted; a newer request (or none) is left alone."""
        path = self._paths.of_queue(queue).handover_request
        with zookeeper_errors(self._what(f"removing the handover request of epoch {request.epoch}", queue)):
            got = self._get(path)
            if got is None or HandoverRequest.decode(got[0]) != request:
                return
            with contextlib.suppress(NoNodeError, BadVersionError):  # gone already, or replaced by a newer request
                self._client.delete_async(path, version=got[1]).get(timeout=self._timeout_s)

    # -- watches -----------------------------------------------------------------------------------------------

    def watch(self, replica_id: str, on_drain: Callable[[DrainRequest | None], None],
              on_handover: Callable[[int, HandoverRequest | None], None]) -> None:
        """Call ``on_drain`` with ``replica_id``'s drain request and ``on_handover`` with each queue and its handover
        request (None when there is none) at once, then on every change, across reconnects. Both are called from
        kazoo's thread: they must only enqueue. Hazard: kazoo's ``DataWatch`` retries its first read until
        ZooKeeper answers, so while the ensemble is unreachable this call waits for it."""
        def drain_changed(data: bytes | None, stat: ZnodeStat | None) -> None:
            on_drain(None if stat is None else DrainRequest.decode(replica_id, data))

        def handover_changed(queue: int) -> Callable[[bytes | None, ZnodeStat | None], None]:
            def changed(data: bytes | None, stat: ZnodeStat | None) -> None:
                on_handover(queue, None if stat is None else HandoverRequest.decode(data))
            return changed

        with zookeeper_errors(self._what("watching the operators' requests")):
            self._watches = [DataWatch(self._client, self._paths.drained_node(replica_id), drain_changed)]
            self._watches += [DataWatch(self._client, self._paths.of_queue(queue).handover_request,
                                        handover_changed(queue)) for queue in range(self._paths.queues)]
