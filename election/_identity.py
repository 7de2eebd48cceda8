"""Who a contender is: the JSON data of its election node."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

from tenure.errors import ConfigError

__all__ = ["Identity"]


@dataclass(frozen=True)
class Identity:
    """A replica's identity, stored as JSON in its election node so ``tenure status`` can show who leads.

    Example::

        Identity(replica_id="r1", host=socket.gethostname(), pid=os.getpid(),
                 metrics_url="http://127.0.0.1:9400/metrics", started_at=time.time())
    """

    replica_id: str
    host: str
    pid: int
    metrics_url: str = ""
    started_at: float = 0.0  # wall clock (time.time()), for humans only

    def __post_init__(self) -> None:
        if not self.replica_id:
            raise ConfigError("Identity.replica_id='' is empty: give each replica a unique, non-empty id")

    @classmethod
    def local(cls, replica_id: str, metrics_url: str = "") -> Identity:
        """This process's identity: hostname, pid and the current wall-clock time."""
        return cls(replica_id, socket.gethostname(), os.getpid(), metrics_url, time.time())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Identity:
        return cls(replica_id=str(data["replica_id"]), host=str(data.get("host", "")),
                   pid=int(data.get("pid", 0)), metrics_url=str(data.get("metrics_url", "")),
                   started_at=float(data.get("started_at", 0.0)))

    @classmethod
    def from_bytes(cls, raw: bytes) -> Identity | None:
        """Parse node data; ``None`` when it is not an identity (a foreign or damaged node)."""
        try:
            data = json.loads(raw.decode())
            return cls.from_json(data) if isinstance(data, dict) else None
        except (ValueError, KeyError, TypeError):
            return None
