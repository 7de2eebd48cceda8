"""The runner's transition tables, pair by pair — the replica's and a seat's: every step listed is accepted, every
other step refused; and the role a seat shows is the state the runner had before queues."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tenure.career.lifecycle import (
    REPLICA_TRANSITIONS,
    SEAT_TRANSITIONS,
    ReplicaState,
    Role,
    Runner,
    RunnerSettings,
    SeatState,
    role_of,
)
from tenure.career.lifecycle._execution import Execution, Work
from tenure.errors import TenureError

_R = ReplicaState
_S = SeatState
_ALLOWED = [(a, b) for a in _R for b in _R if b in REPLICA_TRANSITIONS[a]]
_REFUSED = [(a, b) for a in _R for b in _R if b not in REPLICA_TRANSITIONS[a]]
_SEAT_ALLOWED = [(a, b) for a in _S for b in _S if b in SEAT_TRANSITIONS[a]]
_SEAT_REFUSED = [(a, b) for a in _S for b in _S if a is not b and b not in SEAT_TRANSITIONS[a]]


class _Quiet:
    """Any observer or progress call, answered with nothing."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *_args, **_kwargs: None


def _runner(queues: int = 1) -> Runner:
    """A runner of ``queues`` seats that was never started (only ``_change`` is exercised)."""
    return Runner(lambda _queue, _post: SimpleNamespace(group="g"), _Quiet(), [_Quiet()] * queues,  # type: ignore[arg-type]
                  RunnerSettings(replica_id="r1"), observer=_Quiet(), progress=_Quiet(), process=_Quiet(),
                  requests=_Quiet(), terms=[_Quiet()] * queues)  # duck-typed stand-ins


def _runner_in(state: ReplicaState) -> Runner:
    runner = _runner()
    runner._state = state
    return runner


def test_the_tables_name_every_state() -> None:
    """Every state has a row; every replica state but STOPPED can leave, and every seat state can."""
    assert set(REPLICA_TRANSITIONS) == set(_R)
    assert [s for s in _R if not REPLICA_TRANSITIONS[s]] == [_R.STOPPED]
    assert set(SEAT_TRANSITIONS) == set(_S)
    assert all(SEAT_TRANSITIONS[s] for s in _S)


@pytest.mark.parametrize(("old", "new"), _ALLOWED, ids=[f"{a.value}->{b.value}" for a, b in _ALLOWED])
def test_allowed_transition_is_taken(old: ReplicaState, new: ReplicaState) -> None:
    """A step listed in REPLICA_TRANSITIONS moves the replica to the target state."""
    runner = _runner_in(old)
    runner._change(new)
    assert runner.state is new


@pytest.mark.parametrize(("old", "new"), _REFUSED, ids=[f"{a.value}->{b.value}" for a, b in _REFUSED])
def test_refused_transition_raises(old: ReplicaState, new: ReplicaState) -> None:
    """Any step not in REPLICA_TRANSITIONS raises TenureError naming both states, and the state stays."""
    runner = _runner_in(old)
    with pytest.raises(TenureError, match=f"from {old.value} to {new.value}"):
        runner._change(new)
    assert runner.state is old


@pytest.mark.parametrize(("old", "new"), _SEAT_ALLOWED, ids=[f"{a.value}->{b.value}" for a, b in _SEAT_ALLOWED])
def test_allowed_seat_transition_is_taken(old: SeatState, new: SeatState) -> None:
    """A step listed in SEAT_TRANSITIONS moves that seat, and no other, to the target state."""
    runner = _runner(2)
    runner._state = _R.ACTIVE
    seat, other = runner._seats
    seat.state = other.state = old
    runner._change(seats={seat: new})
    assert (runner.seat_state(0), runner.seat_state(1)) == (new, old)


@pytest.mark.parametrize(("old", "new"), _SEAT_REFUSED, ids=[f"{a.value}->{b.value}" for a, b in _SEAT_REFUSED])
def test_refused_seat_transition_raises_and_nothing_moves(old: SeatState, new: SeatState) -> None:
    """A seat's step not in SEAT_TRANSITIONS raises TenureError naming its queue and both states, and neither the
    replica nor any seat moves, even when the same change held a step that was allowed."""
    runner = _runner(2)
    runner._state = _R.ACTIVE
    seat, other = runner._seats
    seat.state, other.state = old, _S.FOLLOWING
    with pytest.raises(TenureError, match=f"queue 0 cannot go from {old.value} to {new.value}"):
        runner._change(_R.STOPPING, {other: _S.LEADING, seat: new})
    assert (runner.state, runner.seat_state(0), runner.seat_state(1)) == (_R.ACTIVE, old, _S.FOLLOWING)


def test_every_pair_is_covered() -> None:
    """The tables together are every ordered pair of states, self-loops included (a seat's stays is no step)."""
    assert len(_ALLOWED) + len(_REFUSED) == len(_R) ** 2
    assert len(_SEAT_ALLOWED) + len(_SEAT_REFUSED) + len(_S) == len(_S) ** 2


@pytest.mark.parametrize("replica", list(_R), ids=[r.value for r in _R])
def test_a_seat_shows_its_state_while_active_and_the_replicas_otherwise(replica: ReplicaState) -> None:
    """The role: a seat's own state while the replica is active; the replica's state (the runner's state before
    queues: starting, drained, unhealthy, stopping, stopped) whatever the seat's otherwise."""
    for seat in _S:
        expected = Role(seat.value) if replica is _R.ACTIVE else Role(replica.value)
        assert role_of(replica, seat) is expected


class _Progress(_Quiet):
    """A loop progress that records, for each ``execute()``, whether it ran inside an inauguration's allowance."""

    def __init__(self) -> None:
        self.inside = False

    @contextlib.contextmanager
    def inaugurating(self) -> Iterator[None]:
        self.inside = True
        try:
            yield
        finally:
            self.inside = False


def test_a_terms_first_execute_has_the_inaugurations_allowance_and_later_ones_do_not() -> None:
    """A term's first ``execute()`` starts its work (Spark's query), which can outlast the liveness timeout on a
    loaded host or with several queues elected at once: it runs inside the inauguration's allowance; the term's
    later units of work do not, and the next term's first does again."""
    progress = _Progress()
    seen: list[bool] = []
    career = SimpleNamespace(execute=lambda: seen.append(progress.inside) or True)
    election = SimpleNamespace(lease_headroom=lambda: None)
    execution = Execution(election, career, _Quiet(), progress, _Quiet(), _Quiet())  # type: ignore[arg-type]
    for epoch in (7, 7, 7, 9, 9):
        assert execution.once(epoch).work is Work.DONE
    assert seen == [True, False, False, True, False]
