"""The herd baseline: an election where every contender watches the whole children list.

This is the recipe ZooKeeper's own documentation warns about (the "herd effect"): each contender creates an
ephemeral-sequential node, then lists the election's children with a watch and leads when its node is the
lowest. Any change to the list — a leader leaving included — wakes every contender, and each one re-lists.
tenure's ``Election`` watches only the next-lower node instead.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

__all__ = ["ChildrenWatchElection"]


class ChildrenWatchElection:
    """One contender of the children-watch election.

    Example::

        contender = ChildrenWatchElection(client, "/herd/g")
        contender.start()
        contender.leading.wait(10)
        contender.release()

    Attributes:
        deliveries: children-watch callbacks fired for this contender (each one is a wake-up and a re-list).
        leading: set while this contender holds the lowest node.
    """

    def __init__(self, client: KazooClient, path: str, on_leading: Callable[[], None] | None = None) -> None:
        self.client = client
        self.path = path
        self.node: str | None = None
        self.deliveries = 0
        self.seen = 0  # names in the latest listing
        self.leading = threading.Event()
        self._on_leading = on_leading
        self._lock = threading.Lock()
        self._released = False

    def start(self) -> None:
        """Create the node and look at the children (arming the watch)."""
        self.client.ensure_path(self.path)
        self.node = self.client.create(f"{self.path}/n_", b"", ephemeral=True, sequence=True)
        self._check()

    def _check(self) -> None:
        if self._released:
            return
        try:
            children: list[str] = self.client.get_children(self.path, watch=self._on_change)
        except NoNodeError:
            return
        assert self.node is not None
        self.seen = len(children)
        own = self.node.rsplit("/", 1)[1]
        if own in children and min(children, key=lambda n: n.rsplit("_", 1)[1]) == own \
                and not self.leading.is_set():
            self.leading.set()
            if self._on_leading is not None:
                self._on_leading()

    def _on_change(self, event: WatchedEvent) -> Any:
        with self._lock:
            self.deliveries += 1
        # The re-list runs on kazoo's event thread, as naive recipes do; it is what makes the herd costly.
        self._check()

    def release(self) -> None:
        """Delete own node (stops acting on deliveries; the already armed watch still fires once)."""
        self._released = True
        if self.node is not None:
            with contextlib.suppress(NoNodeError):
                self.client.delete(self.node)
        self.leading.clear()
