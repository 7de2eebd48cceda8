"""Leadership states and the one table of legal transitions between them (checked on every change)."""

from __future__ import annotations

import enum

from tenure.errors import ElectionError

__all__ = ["TRANSITIONS", "IllegalTransitionError", "LeadershipState", "check_transition"]


class LeadershipState(enum.Enum):
    """Where one ``Election`` stands; only its control thread changes it, through ``TRANSITIONS``.

    Example::

        if election.state is LeadershipState.LEADING and election.is_leader(): ...
    """

    IDLE = "idle"  # not in the election: before start(), after release()
    JOINING = "joining"  # creating the node, listing, or waiting for a (new) session to do so
    FOLLOWING = "following"  # own node is not the lowest; watching only the next-lower node
    LEADING = "leading"  # own node is the lowest and owned by the current session: a term is running
    SUSPENDED = "suspended"  # a leader that must not commit: connection suspended or safe-until passed
    RELEASING = "releasing"  # deleting the own node on request
    CLOSED = "closed"  # control thread stopped; terminal


_S = LeadershipState

#: Every legal step. Anything else is a bug in the recipe and raises ``IllegalTransitionError``.
#: A term ends (LEADING/SUSPENDED → JOINING or RELEASING) with exactly one ``Revoked`` event.
TRANSITIONS: dict[LeadershipState, frozenset[LeadershipState]] = {
    _S.IDLE: frozenset({_S.JOINING, _S.CLOSED}),
    _S.JOINING: frozenset({_S.FOLLOWING, _S.LEADING, _S.RELEASING}),
    _S.FOLLOWING: frozenset({_S.LEADING, _S.JOINING, _S.RELEASING}),
    _S.LEADING: frozenset({_S.SUSPENDED, _S.JOINING, _S.RELEASING}),
    _S.SUSPENDED: frozenset({_S.LEADING, _S.JOINING, _S.RELEASING}),
    _S.RELEASING: frozenset({_S.IDLE}),
    _S.CLOSED: frozenset(),
}


class IllegalTransitionError(ElectionError):
    """The recipe tried a state change that ``TRANSITIONS`` does not allow (a bug, never an operating condition)."""


def check_transition(current: LeadershipState, target: LeadershipState) -> LeadershipState:
    """Return ``target`` if ``current → target`` is legal, else raise ``IllegalTransitionError`` naming both."""
    if target not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(s.name for s in TRANSITIONS[current])) or "nothing (terminal)"
        raise IllegalTransitionError(f"illegal leadership transition {current.name} → {target.name}: "
                                f"from {current.name} only {allowed} may follow")
    return target
