"""The handover-request policy: which operators' handover requests (``tenure handover``) a term of a queue
honours."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from tenure.career.lifecycle._ports import RequestSource
from tenure.career.lifecycle._states import SeatState
from tenure.election import Contender, HandoverRequest

__all__ = ["HandoverRequests", "PendingHandover"]


class PendingHandover(NamedTuple):
    """Before a term begins: whether to step aside for the request's target, and the request it grants."""

    step_aside: bool
    granted: HandoverRequest | None


_NONE = PendingHandover(False, None)


class HandoverRequests:
    """Decides, for one replica's seat in queue ``queue``, whether a handover request applies to it; times each
    request's life on this replica's monotonic ``clock``."""

    def __init__(self, requests: RequestSource, replica_id: str, clock: Callable[[], float], queue: int = 0) -> None:
        self._requests = requests
        self._replica_id = replica_id
        self._clock = clock
        self._queue = queue
        self._seen: dict[HandoverRequest, float] = {}  # request → when this replica first read it (monotonic)

    def live(self, request: HandoverRequest) -> bool:
        """Whether ``request`` is still live, on this replica's monotonic clock: for its timeout from the moment
        this replica first read it. The requester's and this host's wall clocks may disagree by minutes; only
        the timeout's length (one host's difference of two readings) crosses between hosts. A replica that
        restarts reads a pending request afresh, so it may honour it up to one timeout longer."""
        now = self._clock()
        first = self._seen.setdefault(request, now)
        self._seen = {r: t for r, t in self._seen.items() if r == request or now - t < r.timeout_s}
        return now - first < request.timeout_s

    def honour(self, request: HandoverRequest, state: SeatState, epoch: int | None) -> bool:
        """A request made to this term, live, and not naming this replica: hand over (to the target, or the next
        in line). Requests for other terms, or expired, are ignored."""
        return (state in (SeatState.LEADING, SeatState.PAUSED) and request.epoch == epoch
                and self.live(request) and request.to != self._replica_id)

    def before_term(self, epoch: int, contenders: Callable[[], list[Contender]]) -> PendingHandover:
        """Before a term of ``epoch`` begins, the live handover request made to an earlier term. Step aside when it
        names another replica that is in the election; otherwise this term grants it (and deletes it once
        inaugurated). ZooKeeper's errors (``TenureError``s) pass through."""
        request = self._requests.handover(self._queue)
        if request is None or request.epoch >= epoch or not self.live(request):
            return _NONE
        if request.to in (None, self._replica_id):
            return PendingHandover(False, request)
        in_line = {c.identity.replica_id for c in contenders() if c.identity is not None}
        return PendingHandover(request.to in in_line, None)
