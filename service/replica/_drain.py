"""The replica's side of ``tenure drain``: watch its own drain node and tell the runner, from its control thread.

kazoo's watch only posts :class:`DrainChanged` to the runner's queue; the runner alone leaves or joins the
election. The watch also fires once at once with the node's state, and again after a reconnect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from election import DrainRequest, GroupPaths

__all__ = ["DrainChanged", "DrainSwitch"]


@dataclass(frozen=True)
class DrainChanged:
    """The replica's drain node changed: ``request`` is None once undrained."""

    request: DrainRequest | None


class DrainSwitch:
    """Reads and watches ``/tenure/<group>/drained/<replica>`` for one replica."""

    def __init__(self, client: KazooClient, paths: GroupPaths, replica_id: str,
                 post: Callable[[DrainChanged], None]) -> None:
        self._client = client
        self._path = paths.drained_node(replica_id)
        self._replica_id = replica_id
        self._post = post
        self._watch: DataWatch | None = None

    def current(self, timeout_s: float) -> DrainRequest | None:
        """The request now (one read), so a replica drained before it starts never joins."""
        try:
            raw, _stat = self._client.get_async(self._path).get(timeout=timeout_s)
        except NoNodeError:
            return None
        return DrainRequest.decode(self._replica_id, raw)

    def watch(self) -> None:
        """Post every change from now on (kazoo re-arms the watch, across reconnects too)."""
        def changed(data: bytes | None, stat: ZnodeStat | None) -> None:
            self._post(DrainChanged(None if stat is None else DrainRequest.decode(self._replica_id, data)))

        self._watch = DataWatch(self._client, self._path, changed)
