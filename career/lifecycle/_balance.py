"""The balance policy: this replica's member node, and when it moves one of the queues it leads to the member the
plan gives it (``tenure.election.plan``), one move at a time, once the members have settled.

No controller: every replica computes the same plan from the same view. Only a queue's leader moves it, through
the queue's targeted handover request (the contenders ahead of the target step aside), so a wrong or stale plan
costs a handover, never a second writer: each queue's fence decides who commits.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from structlog.typing import FilteringBoundLogger

from tenure.career.lifecycle._log_events import MEMBERS_CHANGED, QUEUE_MOVE_DONE, QUEUE_MOVE_STARTED
from tenure.career.lifecycle._ports import BalanceSource, RequestSource, RunnerObserver
from tenure.election import BalanceView, HandoverRequest, Member, moves, plan

__all__ = ["MOVE_TIMEOUT_S", "Balance", "Move"]

#: How soon a turn looks again when the view and this replica's seats disagree on what it leads (an election's
#: event not handled yet): the view is in flux, and a plan from it could move a queue for nothing.
_FLUX_RETRY_S: Final = 0.5
#: How long a move's handover request lives: the targeted handover takes about a second; past this the request
#: expires (a target that died meanwhile cannot keep the queue waiting) and the replica may move another queue.
MOVE_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True)
class Move:
    """Hand queue ``queue`` (led in the term of ``epoch``) to member ``to``."""

    queue: int
    to: str
    epoch: int


@dataclass(frozen=True)
class _InFlight:
    move: Move
    started: float  # monotonic


class Balance:
    """One replica's side of the balance, on the runner's control thread (only what :meth:`watch` hands kazoo runs
    on kazoo's).

    Each turn (:meth:`turn`, when :meth:`due`: at once after a change its watch heard, else every half settle time):
    keep the member node true, read the view (members, each queue's leader, the handover requests), and once the
    set of members has not changed for ``settle_s`` compute the plan; a queue this replica leads that the plan gives
    to a member whose node says it is ready for it is the move to make (at most one in flight: the next once the
    target leads that queue, can no longer take it, or the request expired).

    Example::

        balance = Balance(membership, requests, observer, replica_id="r1", settle_s=5.0, clock=time.monotonic,
                          log=log)
        if balance.due():
            move = balance.turn(Member(None, frozenset({0, 1})), leading={0: 41, 1: 57})
            if move is not None:
                request = balance.start(move)   # then hand the queue over, honouring the request
    """

    def __init__(self, source: BalanceSource, requests: RequestSource, observer: RunnerObserver, *, replica_id: str,
                 settle_s: float, clock: Callable[[], float], log: FilteringBoundLogger) -> None:
        self._source = source
        self._requests = requests
        self._observer = observer
        self._replica_id = replica_id
        self._settle_s = settle_s
        self._clock = clock
        self._log = log
        self._posted = threading.Event()  # a BalanceChanged is queued and not handled yet
        self._dirty = True
        self._next_at = -math.inf
        self._members: frozenset[str] | None = None
        self._changed_at = clock()
        self._in_flight: _InFlight | None = None
        self._requests_seen: dict[tuple[int, HandoverRequest], float] = {}  # → when first read (monotonic)

    def watch(self, post: Callable[[], None]) -> None:
        """Watch the members and every line; on each change (kazoo's thread) call ``post`` — which queues a
        ``BalanceChanged`` — unless one is queued already. ZooKeeper's errors pass through."""
        def noticed() -> None:
            if not self._posted.is_set():
                self._posted.set()
                post()

        self._source.watch(noticed)

    def changed(self) -> None:
        """A ``BalanceChanged`` (or a change of the replica's own state): read the view at the next turn."""
        self._posted.clear()
        self._dirty = True

    def due(self) -> bool:
        """Whether to take a turn now: something changed, or it is time to look again (a member's readiness is
        not watched; a move's request may have expired; the members may have settled)."""
        return self._dirty or self._clock() >= self._next_at

    def turn(self, member: Member | None, leading: Mapping[int, int]) -> Move | None:
        """Keep the member node saying ``member`` (None: not a member), read the view and, once the members have
        settled, the move to start now among the queues this replica leads (``leading``: queue → its term's
        epoch), if any. ZooKeeper's errors (``TenureError``s) pass through: the next turn tries again."""
        now = self._clock()
        self._dirty = False
        self._next_at = now + self._settle_s / 2
        self._source.keep(member)
        view = self._source.view()
        names = frozenset(view.members)
        if names != self._members:
            self._log.info(MEMBERS_CHANGED, members=sorted(names))
            self._members, self._changed_at = names, now
        self._end_move(view, now)
        settled_at = self._changed_at + self._settle_s
        if now < settled_at:
            self._next_at = min(self._next_at, settled_at)
            return None
        leaders = self._going_to(view, now)
        left = moves(plan(self._source.queues, view.members, leaders), leaders)
        self._observer.balanced(not left)
        if (self._in_flight is not None or member is None or self._source.queues == 1
                or self._replica_id not in view.members):
            return None  # one move at a time; a replica moves nothing while it is not a member in its own view
        if any(leader == self._replica_id and q not in leading for q, leader in view.leaders.items()):
            # Elected in a line, the runner not yet told (or stepping aside for a handover's target): the view
            # counts a queue this replica will not lead; look again in a moment.
            self._next_at = min(self._next_at, now + _FLUX_RETRY_S)
            return None
        for queue, to in left.items():
            if queue in leading and leaders[queue] == self._replica_id and queue in view.members[to].ready:
                return Move(queue, to, leading[queue])
        return None

    def _going_to(self, view: BalanceView, now: float) -> dict[int, str | None]:
        """Each queue's leader for the plan: its leader now, or the target of its live handover request while that
        target stands in its line (a member ready for it), as the contenders ahead of it step aside. Without this, a
        contender stepping aside shows for a moment as the queue's leader, and every replica would plan from it.
        A request is live for its timeout from when this replica first read it (its monotonic clock, as the terms
        time it: ``HandoverRequests``)."""
        seen = {key: self._requests_seen.get(key, now) for key in view.requests.items()}
        self._requests_seen = seen
        leaders = dict(view.leaders)
        for (q, request), first in seen.items():
            to = request.to
            if (now - first < request.timeout_s and to is not None and to in view.members
                    and q in view.members[to].ready):
                leaders[q] = to
        return leaders

    def leave(self) -> None:
        """Remove the member node now (drained, unhealthy, stopping). ZooKeeper's errors pass through."""
        self._dirty = True
        self._source.keep(None)

    def start(self, move: Move) -> HandoverRequest:
        """Write the move's targeted handover request (the contenders ahead of ``move.to`` step aside for it) and
        count it in flight; the runner then honours the request itself. ZooKeeper's errors pass through."""
        requested_at = time.time()  # the request's two times are one host's: only their difference crosses hosts
        request = HandoverRequest(move.epoch, move.to, requested_at, requested_at + MOVE_TIMEOUT_S)
        self._requests.put_handover(request, move.queue)
        self._in_flight = _InFlight(move, self._clock())
        self._observer.move_started(move.queue)
        self._log.info(QUEUE_MOVE_STARTED, queue=move.queue, to=move.to, epoch=move.epoch)
        return request

    def _end_move(self, view: BalanceView, now: float) -> None:
        """The move in flight is over once its target leads the queue, or is no longer ready for it (its
        inauguration failed, it left), or the request expired (a contender ahead of the target that is stepping
        aside shows as the lowest node for a moment: not the end of the move)."""
        if self._in_flight is None:
            return
        move, took = self._in_flight.move, now - self._in_flight.started
        leader = view.leaders.get(move.queue)
        target = view.members.get(move.to)
        if leader == move.to:
            self._log.info(QUEUE_MOVE_DONE, queue=move.queue, to=move.to, leader=leader, seconds=round(took, 3))
        elif target is None or move.queue not in target.ready:
            self._log.info(QUEUE_MOVE_DONE, queue=move.queue, to=move.to, leader=leader, target_ready=False)
        elif took >= MOVE_TIMEOUT_S:
            self._log.info(QUEUE_MOVE_DONE, queue=move.queue, to=move.to, leader=leader, expired=True)
        else:
            self._next_at = min(self._next_at, self._in_flight.started + MOVE_TIMEOUT_S)
            return
        self._in_flight = None
