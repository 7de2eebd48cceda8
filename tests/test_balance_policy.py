"""The balance policy (``tenure.career.lifecycle.Balance``), pure logic on a fake view and clock: the settle time,
one move in flight, a target's readiness, a group of one queue, and a handover request's target counted as the
queue's leader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from tenure.career.lifecycle import MOVE_TIMEOUT_S, Balance, Move
from tenure.election import BalanceView, HandoverRequest, Member

SETTLE_S = 5.0
EVERY = frozenset(range(4))


@dataclass
class _Source:
    """The members and lines as a test sets them; what the policy kept."""

    current: BalanceView
    queues: int = 4
    kept: list[Member | None] = field(default_factory=list)

    def view(self) -> BalanceView:
        return self.current

    def keep(self, member: Member | None) -> bool:
        self.kept.append(member)
        return True

    def watch(self, on_change: Callable[[], None]) -> None:
        on_change()


@dataclass
class _Requests:
    put: list[tuple[HandoverRequest, int]] = field(default_factory=list)

    def put_handover(self, request: HandoverRequest, queue: int = 0) -> None:
        self.put.append((request, queue))


@dataclass
class _Observer:
    balanced_seen: list[bool] = field(default_factory=list)
    moved: list[int] = field(default_factory=list)

    def balanced(self, balanced: bool) -> None:
        self.balanced_seen.append(balanced)

    def move_started(self, queue: int) -> None:
        self.moved.append(queue)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _view(leaders: dict[int, str | None], *names: str, ready: frozenset[int] = EVERY,
          requests: dict[int, HandoverRequest] | None = None) -> BalanceView:
    return BalanceView({n: Member(None, ready) for n in names}, leaders, requests or {})


def _balance(source: _Source, clock: _Clock, *, settled: bool = True) -> tuple[Balance, _Requests, _Observer]:
    """The policy of r1 on ``source``; ``settled``: its first turn taken and the settle time passed since."""
    requests, observer = _Requests(), _Observer()
    balance = Balance(source, requests, observer, replica_id="r1", settle_s=SETTLE_S,  # type: ignore[arg-type]
                      clock=clock, log=structlog.get_logger("test"))
    if settled:
        assert balance.turn(Member(None, EVERY), {}) is None  # the first view: the members just "changed"
        clock.now += SETTLE_S
    return balance, requests, observer


ALL_R1 = dict.fromkeys(range(4), "r1")
LEADING = {q: 10 + q for q in range(4)}
MEMBER = Member(None, EVERY)


def _settled_pair() -> tuple[Balance, _Source, _Requests, _Observer, _Clock]:
    """r1's policy, r1 leading all four queues and r2 a member too, the members settled."""
    clock = _Clock()
    source = _Source(_view(ALL_R1, "r1", "r2"))
    balance, requests, observer = _balance(source, clock)
    return balance, source, requests, observer, clock


def test_no_move_before_the_members_have_settled_then_one() -> None:
    """A new member: no plan until the set of members has not changed for the settle time; then the one move."""
    clock = _Clock()
    source = _Source(_view(ALL_R1, "r1"))
    balance, requests, observer = _balance(source, clock, settled=False)
    member = Member(None, EVERY)
    assert balance.turn(member, LEADING) is None  # r1 alone: settles, then balanced
    clock.now += SETTLE_S
    assert balance.turn(member, LEADING) is None and observer.balanced_seen[-1] is True
    source.current = _view(ALL_R1, "r1", "r2")
    clock.now += 1.0
    assert balance.turn(member, LEADING) is None, "the members just changed"
    assert not balance.due()
    clock.now += SETTLE_S
    assert balance.due()
    move = balance.turn(member, LEADING)
    assert move is not None and move.to == "r2" and move.epoch == LEADING[move.queue]
    assert observer.balanced_seen[-1] is False
    assert source.kept == [member] * 4
    assert requests.put == []  # turn decides; start writes


def test_one_move_in_flight_until_its_target_leads_the_queue() -> None:
    """After a move starts, no other until the target leads the moved queue (or the request expires)."""
    balance, source, requests, observer, _clock = _settled_pair()
    move = balance.turn(MEMBER, LEADING)
    assert move is not None
    request = balance.start(move)
    assert requests.put == [(request, move.queue)] and request.to == "r2" and request.epoch == move.epoch
    assert request.timeout_s == MOVE_TIMEOUT_S and observer.moved == [move.queue]
    leaders = {**ALL_R1, move.queue: None}  # handed over, the target not yet elected
    source.current = _view(leaders, "r1", "r2", requests={move.queue: request})
    still = {q: e for q, e in LEADING.items() if q != move.queue}
    assert balance.turn(MEMBER, still) is None
    source.current = _view({**ALL_R1, move.queue: "r2"}, "r1", "r2")
    second = balance.turn(MEMBER, still)
    assert second is not None and second.queue != move.queue and second.to == "r2"


def test_a_move_in_flight_ends_when_its_request_expires() -> None:
    """A target that never takes the queue (it died, still a member for a while) holds the next move back only until
    the request expires."""
    balance, _source, _requests, _observer, clock = _settled_pair()
    move = balance.turn(MEMBER, LEADING)
    assert move is not None
    balance.start(move)
    assert balance.turn(MEMBER, LEADING) is None
    clock.now += MOVE_TIMEOUT_S
    assert balance.turn(MEMBER, LEADING) == move  # r1 leads it again: the same move, once more


def test_no_queue_to_a_target_not_ready_for_it_and_none_in_a_group_of_one_queue() -> None:
    """The plan never gives a queue to a member not ready for it; in a group of one queue nothing ever moves."""
    clock = _Clock()
    source = _Source(_view(ALL_R1, "r1", "r2", ready=frozenset()))
    balance, _requests, observer = _balance(source, clock)
    assert balance.turn(Member(None, EVERY), LEADING) is None and observer.balanced_seen[-1] is True
    one = _Source(BalanceView({"r1": Member(None, frozenset({0})), "r2": Member(None, frozenset({0}))},
                              {0: "r2"}, {}), queues=1)
    solo, _, _ = _balance(one, clock)
    assert solo.turn(Member(None, frozenset({0})), {0: 7}) is None


def test_a_queue_with_a_live_request_counts_as_its_targets() -> None:
    """r2 is stepping aside in queue 0 for a handover's target r0, so it shows as queue 0's lowest node for a moment.
    Counted as r2's, the queues look shared 2 (r1), 1, 1: nothing to move. Counted as r0's, as it is about to be,
    r0 and r1 lead two each and r1 (after r0 by name) gives one to r2: the plan of where the queues are going."""
    clock = _Clock()
    leaders = {0: "r2", 1: "r1", 2: "r1", 3: "r0"}
    leading = {1: 11, 2: 12}
    plain, _, _ = _balance(_Source(_view(leaders, "r0", "r1", "r2")), clock)
    assert plain.turn(Member(None, EVERY), leading) is None
    request = HandoverRequest(5, "r0", 0.0, MOVE_TIMEOUT_S)
    source = _Source(_view(leaders, "r0", "r1", "r2", requests={0: request}))
    balance, _requests, _observer = _balance(source, clock)
    move = balance.turn(Member(None, EVERY), leading)
    assert move is not None and move == Move(move.queue, "r2", leading[move.queue]), move
