"""``tenure drain`` / ``tenure undrain``: keep a replica out of the election for maintenance, warm, and let it back.

The request is a znode (``tenure.election.OperatorRequests``); the replica reacts from its own control thread.
Refusals are one line: an unknown replica, draining the last replica in the election (the group would have no
leader) without ``force``, undraining a replica that is not drained.
"""

from __future__ import annotations

import time

from tenure.election import DigestCredential, DrainRequest, OperatorRequests, ZooKeeperClient, read_contenders
from tenure.errors import TenureError
from tenure.service.ops._queues import group_queue_count

__all__ = ["DrainError", "drain", "undrain", "wait_in_election"]


class DrainError(TenureError):
    """A drain or undrain that cannot be done; the message says why and what to do."""


def _contenders(client: ZooKeeperClient, group: str) -> list[str]:
    """The replicas in the group's election: in its line, or in any queue's line of a group of several (a replica
    at its --max-queues-led stands only in the lines of the queues it leads)."""
    queues = group_queue_count(client, group)
    found = [c.identity.replica_id for queue in range(queues)
             for c in read_contenders(client, group, queue=queue, queues=queues) if c.identity is not None]
    return list(dict.fromkeys(found))


def drain(client: ZooKeeperClient, group: str, replica_id: str, *, reason: str = "", force: bool = False,
          credential: DigestCredential | None = None) -> DrainRequest:
    """Ask ``replica_id`` to leave the election (handing over first if it leads); returns the request. With
    ``credential``, the drain node carries its ACL.

    Draining a drained replica replaces its reason. Raises:
        DrainError: the replica is neither in the election nor drained, or it is the last replica in the
            election and ``force`` is not set.
    """
    requests = OperatorRequests(client, group, credential=credential)
    contenders = _contenders(client, group)
    drained = {d.replica_id for d in requests.drains()}
    if replica_id not in contenders and replica_id not in drained:
        raise DrainError(f"replica {replica_id!r} is not in the election of group {group!r} (contenders: "
                         f"{', '.join(contenders) or 'none'}): check the replica id (`tenure status`)")
    others = [r for r in contenders if r != replica_id]
    if not others and replica_id not in drained and not force:
        raise DrainError(f"replica {replica_id!r} is the last replica in the election of group {group!r}: "
                         "draining it leaves the group without a leader; start another replica first, or pass "
                         "--force")
    request = DrainRequest(replica_id, reason, time.time())
    requests.put_drain(request)
    return request


def undrain(client: ZooKeeperClient, group: str, replica_id: str) -> None:
    """Let a drained replica join the election again (at the back of the line).

    Raises:
        DrainError: the replica is not drained.
    """
    requests = OperatorRequests(client, group)
    if not requests.remove_drain(replica_id):
        drained = ", ".join(d.replica_id for d in requests.drains()) or "none"
        raise DrainError(f"replica {replica_id!r} is not drained in group {group!r} (drained: {drained}): "
                         "check the replica id")


def wait_in_election(client: ZooKeeperClient, group: str, replica_id: str, *, in_election: bool,
                     timeout_s: float) -> bool:
    """Wait until ``replica_id`` has left (or, ``in_election``, joined) the election; False at the deadline."""
    deadline = time.monotonic() + timeout_s
    while (replica_id in _contenders(client, group)) != in_election:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
