"""Handover requests: an operator asks the leader of a given epoch to hand over, optionally to a named replica.

``/tenure/<group>/handover-request`` — persistent; JSON ``{epoch, to, requested_at, expires_at}``. ``tenure
handover`` creates it. Only the leader of ``epoch`` acts on it (a clean handover, then it rejoins at the back of
the line). While it is live and names a target that is in the election, any other replica elected in a later term
defers to the target: it leaves and rejoins at the back without inaugurating, so the target is elected next. The
target, once inaugurated, deletes the request; once it has timed out everyone ignores it, so a target that died
cannot keep the group leaderless. A replica counts the timeout (``expires_at - requested_at``) on its own monotonic
clock from when it first read the request: the requester's wall clock and the replica's may disagree.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tenure.election._layout import GroupPaths

__all__ = ["HandoverRequest", "read_handover_request"]


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


def read_handover_request(client: KazooClient, group: str, *, timeout_s: float = 10.0) -> HandoverRequest | None:
    try:
        raw, _stat = client.get_async(GroupPaths(group).handover_request).get(timeout=timeout_s)
    except NoNodeError:
        return None
    return HandoverRequest.decode(raw)
