"""Drain requests: an operator's wish that a replica stay out of the election, kept in ZooKeeper.

``/tenure/<group>/drained/<replica>`` — persistent; JSON ``{reason, since}``. ``tenure drain`` creates it and
``tenure undrain`` deletes it; the replica watches its own node and leaves the election (handing over first when
it leads) or joins again. It outlives the replica's process, so a restarted replica stays drained.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tenure.election._layout import GroupPaths

__all__ = ["DrainRequest", "drain_requests"]


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
        try:
            data = json.loads(raw.decode()) if raw else {}
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        return cls(replica_id, str(data.get("reason", "")), float(data.get("since") or 0.0))


def drain_requests(client: KazooClient, group: str) -> list[DrainRequest]:
    """Every drained replica of ``group``, by name (nodes that vanish while read are left out)."""
    paths = GroupPaths(group)
    try:
        names = sorted(client.get_children(paths.drained))
    except NoNodeError:
        return []
    found = []
    for name in names:
        try:
            raw, _stat = client.get(paths.drained_node(name))
        except NoNodeError:
            continue
        found.append(DrainRequest.decode(name, raw))
    return found
