"""The runner's transition table, pair by pair: every step it lists is accepted, every other step refused."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tenure.career.lifecycle import TRANSITIONS, Runner, RunnerSettings, RunnerState
from tenure.errors import TenureError

_S = RunnerState
_ALLOWED = [(a, b) for a in _S for b in _S if b in TRANSITIONS[a]]
_REFUSED = [(a, b) for a in _S for b in _S if b not in TRANSITIONS[a]]


class _Quiet:
    """Any observer or progress call, answered with nothing."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *_args, **_kwargs: None


def _runner_in(state: RunnerState) -> Runner:
    """A runner that was never started, put in ``state`` (only ``_transition`` is exercised)."""
    election = SimpleNamespace(group="g")
    runner = Runner(lambda _post: election, _Quiet(), RunnerSettings(replica_id="r1"),  # type: ignore[arg-type]
                    observer=_Quiet(), progress=_Quiet(), process=_Quiet(), requests=_Quiet(),
                    terms=_Quiet())  # duck-typed stand-ins
    runner._state = state
    return runner


def test_the_table_names_every_state() -> None:
    """Every state has a row, and every state but STOPPED can leave."""
    assert set(TRANSITIONS) == set(_S)
    assert [s for s in _S if not TRANSITIONS[s]] == [_S.STOPPED]


@pytest.mark.parametrize(("old", "new"), _ALLOWED, ids=[f"{a.value}->{b.value}" for a, b in _ALLOWED])
def test_allowed_transition_is_taken(old: RunnerState, new: RunnerState) -> None:
    """A step listed in TRANSITIONS moves the runner to the target state."""
    runner = _runner_in(old)
    runner._transition(new)
    assert runner.state is new


@pytest.mark.parametrize(("old", "new"), _REFUSED, ids=[f"{a.value}->{b.value}" for a, b in _REFUSED])
def test_refused_transition_raises(old: RunnerState, new: RunnerState) -> None:
    """Any step not in TRANSITIONS raises TenureError naming both states, and the state stays."""
    runner = _runner_in(old)
    with pytest.raises(TenureError, match=f"from {old.value} to {new.value}"):
        runner._transition(new)
    assert runner.state is old


def test_every_pair_is_covered() -> None:
    """The two tables together are every ordered pair of states, self-loops included."""
    assert len(_ALLOWED) + len(_REFUSED) == len(_S) ** 2
