"""The replica's side of operators' requests (``tenure drain``, ``tenure handover``): watch their znodes and tell
the runner, which alone acts, from its control thread.

kazoo's watches only post ``DrainChanged`` and ``HandoverRequested`` (``tenure.career.lifecycle``) to the runner's
queue. A watch fires once at once with the node's state, and again on every change, across reconnects.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from tenure.career.lifecycle import DrainChanged, HandoverRequested
from tenure.election import DrainRequest, GroupPaths, HandoverRequest

__all__ = ["OperatorRequests"]


class OperatorRequests:
    """Reads and watches this replica's drain node and the group's handover request (the runner's
    ``RequestSource``)."""

    def __init__(self, client: KazooClient, paths: GroupPaths, replica_id: str,
                 post: Callable[[DrainChanged | HandoverRequested], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._paths = paths
        self._replica_id = replica_id
        self._post = post
        self._clock = clock
        self._seen: dict[HandoverRequest, float] = {}  # request → when this replica first read it (monotonic)
        self._watches: list[DataWatch] = []

    def live(self, request: HandoverRequest) -> bool:
        """Whether ``request`` is still live, on this replica's monotonic clock: for its timeout from the moment
        this replica first read it. The requester's and this host's wall clocks may disagree by minutes; only
        the timeout's length (one host's difference of two readings) crosses between hosts. A replica that
        restarts reads a pending request afresh, so it may honour it up to one timeout longer."""
        now = self._clock()
        first = self._seen.setdefault(request, now)
        self._seen = {r: t for r, t in self._seen.items() if r == request or now - t < r.timeout_s}
        return now - first < request.timeout_s

    def drain(self, timeout_s: float) -> DrainRequest | None:
        """The drain request now (one read), so a replica drained before it starts never joins."""
        try:
            raw, _stat = self._client.get_async(self._paths.drained_node(self._replica_id)).get(timeout=timeout_s)
        except NoNodeError:
            return None
        return DrainRequest.decode(self._replica_id, raw)

    def handover(self, timeout_s: float) -> HandoverRequest | None:
        """The handover request now (one read), for a replica deciding whether to defer to its target."""
        try:
            raw, _stat = self._client.get_async(self._paths.handover_request).get(timeout=timeout_s)
        except NoNodeError:
            return None
        return HandoverRequest.decode(raw)

    def delete_handover(self, request: HandoverRequest, timeout_s: float) -> None:
        """Remove the handover request it was asked for, once granted (a newer request is left alone)."""
        try:
            raw, stat = self._client.get_async(self._paths.handover_request).get(timeout=timeout_s)
            if HandoverRequest.decode(raw) == request:
                self._client.delete_async(self._paths.handover_request, version=stat.version).get(timeout=timeout_s)
        except (NoNodeError, BadVersionError):
            pass  # gone already, or replaced by a newer request

    def watch(self) -> None:
        """Post every change from now on."""
        def drain_changed(data: bytes | None, stat: ZnodeStat | None) -> None:
            self._post(DrainChanged(None if stat is None else DrainRequest.decode(self._replica_id, data)))

        def handover_changed(data: bytes | None, stat: ZnodeStat | None) -> None:
            self._post(HandoverRequested(None if stat is None else HandoverRequest.decode(data)))

        self._watches = [DataWatch(self._client, self._paths.drained_node(self._replica_id), drain_changed),
                         DataWatch(self._client, self._paths.handover_request, handover_changed)]
