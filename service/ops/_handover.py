"""``tenure handover``: ask the leader (of one queue, in a group of several) to hand over cleanly, to a named ready
replica or to the next in line, and with ``--wait`` report when the new leader committed and the gap the output saw.

The request is a znode (``tenure.election.OperatorRequests``); the leader and the replicas ahead of the target
react from their own control threads. Refusals are one line: no leader, the target already leads, the target is
not in the election (or is drained), the target is not ready, a handover already in progress.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from tenure.election import (
    DigestCredential,
    HandoverRequest,
    OperatorRequests,
    TermRecord,
    ZooKeeperClient,
    group_status,
    read_history,
)
from tenure.errors import TenureError

__all__ = ["HandoverDone", "HandoverError", "request_handover", "wait_handover"]


class HandoverError(TenureError):
    """A handover that cannot be requested; the message says why and what to do."""


@dataclass(frozen=True)
class HandoverDone:
    """The term that handed over, the term that followed, and the gap between their commits (if both known)."""

    old: TermRecord | None
    new: TermRecord
    gap_s: float | None


def _readiness(metrics_url: str, timeout_s: float = 3.0) -> tuple[bool, str]:
    url = metrics_url.removesuffix("/metrics") + "/readyz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status == 200, ""
    except urllib.error.HTTPError as exc:
        try:
            reasons = json.loads(exc.read().decode()).get("reasons", [])
        except ValueError:
            reasons = []
        return False, "; ".join(reasons) or f"HTTP {exc.code}"
    except OSError as exc:
        return False, f"{url} does not answer ({exc})"


def request_handover(client: ZooKeeperClient, group: str, *, to: str | None = None, timeout_s: float = 60.0,
                     credential: DigestCredential | None = None, queue: int = 0,
                     queues: int = 1) -> HandoverRequest:
    """Ask the current leader of queue ``queue`` of ``group``, a group of ``queues``, to hand over (to ``to``, a ready
    replica in that queue's election, if given). With ``credential``, the request's node carries its ACL.

    Raises:
        HandoverError: see the module docstring.
    """
    status = group_status(client, group, queue=queue, queues=queues)
    requests = OperatorRequests(client, group, queues=queues, credential=credential)
    where = f"group {group!r}" if queues == 1 else f"queue {queue} of group {group!r}"
    if status.leader is None or status.leader.identity is None:
        raise HandoverError(f"{where} has no leader: there is nothing to hand over (`tenure status`)")
    leader = status.leader.identity.replica_id
    if to is not None:
        if to == leader:
            raise HandoverError(f"replica {to!r} already leads {where} (epoch {status.leader.epoch})")
        target = next((c for c in status.contenders if c.identity and c.identity.replica_id == to), None)
        if target is None or target.identity is None:
            drained = {d.replica_id for d in status.drained}
            if to in drained:
                raise HandoverError(f"replica {to!r} is drained: undrain it first (`tenure undrain {to}`)")
            line = ", ".join(c.identity.replica_id for c in status.contenders if c.identity) or "none"
            raise HandoverError(f"replica {to!r} is not in the election of {where} (in line: {line}): "
                                "check the replica id (`tenure status`)")
        ready, why = _readiness(target.identity.metrics_url)
        if not ready:
            raise HandoverError(f"replica {to!r} is not ready ({why}): hand over to a ready replica, or none")
    now = time.time()
    pending = requests.handover(queue)
    if pending is not None and pending.live(now) and pending.epoch == status.leader.epoch:
        raise HandoverError(f"a handover of epoch {pending.epoch} is already requested (to "
                            f"{pending.to or 'the next in line'}) until "
                            f"{time.strftime('%H:%M:%S', time.localtime(pending.expires_at))}: wait for it")
    request = HandoverRequest(epoch=status.leader.epoch, to=to, requested_at=now, expires_at=now + timeout_s)
    requests.put_handover(request, queue)
    return request


def wait_handover(client: ZooKeeperClient, group: str, request: HandoverRequest, *, timeout_s: float,
                  queue: int = 0, queues: int = 1) -> HandoverDone | None:
    """Wait until a later term of the request's queue than the request's has committed; None at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        terms = read_history(client, group, queue=queue, queues=queues)
        new = next((t for t in terms if t.epoch > request.epoch and t.first_commit_at is not None), None)
        if new is not None:
            old = next((t for t in terms if t.epoch == request.epoch), None)
            gap = (None if old is None or old.last_commit_at is None or new.first_commit_at is None
                   else new.first_commit_at - old.last_commit_at)
            return HandoverDone(old, new, gap)
        time.sleep(0.1)
    return None
