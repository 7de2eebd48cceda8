"""The balance's plan (``tenure.election.plan``), pure logic: named cases, then properties over random groups
(hypothesis): balanced, sticky, deterministic, never more than a member's cap, every queue assigned while a member
ready for it has room."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenure.election import Member, moves, plan, rendezvous_weight

ALL4 = frozenset(range(4))


def _every(*names: str, queues: int = 4, cap: int | None = None) -> dict[str, Member]:
    return {name: Member(cap, frozenset(range(queues))) for name in names}


def _counts(planned: dict[int, str]) -> dict[str, int]:
    return dict(Counter(planned.values()))


def test_rendezvous_weight_is_sha256_of_queue_slash_replica() -> None:
    """The weight is the first 8 bytes of SHA-256 of ``"<queue>/<replica>"``, big-endian: any language computes it."""
    import hashlib

    assert rendezvous_weight(3, "r1") == int.from_bytes(hashlib.sha256(b"3/r1").digest()[:8], "big")


def test_four_queues_on_three_replicas_from_one_leader_are_two_one_one() -> None:
    """r1 leads all four; r2 and r3 join: r1 keeps the two it weighs highest, the others take one each."""
    leaders = dict.fromkeys(range(4), "r1")
    planned = plan(4, _every("r1", "r2", "r3"), leaders)
    assert sorted(_counts(planned).values()) == [1, 1, 2] and _counts(planned)["r1"] == 2
    kept = sorted(q for q, r in planned.items() if r == "r1")
    assert kept == sorted(sorted(range(4), key=lambda q: -rendezvous_weight(q, "r1"))[:2])
    assert len(moves(planned, leaders)) == 2


CASES = {
    # name: (queues, members, leaders, expected plan)
    "no members: no plan": (4, {}, {0: "r1"}, {}),
    "balanced already: nothing moves": (
        4, _every("r1", "r2", "r3"), {0: "r1", 1: "r2", 2: "r3", 3: "r1"}, {0: "r1", 1: "r2", 2: "r3", 3: "r1"}),
    "a leader that is not a member gives its queues to the members": (
        2, _every("r1", queues=2), {0: "gone", 1: "r1"}, {0: "r1", 1: "r1"}),
    "one queue stays with its leader, whoever joins": (1, _every("r1", "r2", "r3", queues=1), {0: "r2"}, {0: "r2"}),
    "a cap of one: the rest to the other": (
        4, {"r1": Member(1, ALL4), "r2": Member(None, ALL4)}, dict.fromkeys(range(4), "r1"),
        {q: ("r1" if q == max(range(4), key=lambda q: rendezvous_weight(q, "r1")) else "r2") for q in range(4)}),
    "every member capped: a queue left without a member": (
        3, {"r1": Member(1, frozenset(range(3))), "r2": Member(1, frozenset(range(3)))}, {0: "r1", 1: "r2"},
        {0: "r1", 1: "r2"}),
    "not ready for a queue: not given it": (
        2, {"r1": Member(None, frozenset({0, 1})), "r2": Member(None, frozenset({0}))}, {0: "r1", 1: "r1"},
        {0: "r2", 1: "r1"}),
    "a leader over its share keeps first the queue nobody else is ready for": (
        2, {"r1": Member(None, frozenset({0, 1})), "r2": Member(None, frozenset({1}))}, {0: "r1", 1: "r1"},
        {0: "r1", 1: "r2"}),
    "nobody ready for an orphan queue: nobody gets it": (
        2, {"r1": Member(None, frozenset({0}))}, {}, {0: "r1"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plan_cases(case: str) -> None:
    """Each named case gives exactly its plan."""
    queues, members, leaders, expected = CASES[case]
    assert plan(queues, members, leaders) == expected


# -- properties ----------------------------------------------------------------------------------------------------

NAMES = [f"r{i}" for i in range(1, 7)]


@st.composite
def groups(draw: st.DrawFn, *, all_ready: bool = False) -> tuple[int, dict[str, Member], dict[int, str | None]]:
    """A number of queues, some members (a cap each, or none; ready for all queues or a subset) and each queue's
    leader (a member, a replica that is not one, or nobody)."""
    queues = draw(st.integers(1, 12))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True))
    members = {}
    for name in names:
        cap = draw(st.none() | st.integers(1, queues))
        ready = frozenset(range(queues)) if all_ready else frozenset(
            draw(st.lists(st.integers(0, queues - 1), max_size=queues)))
        members[name] = Member(cap, ready)
    leaders = {q: draw(st.none() | st.sampled_from([*names, "outsider"])) for q in range(queues)}
    return queues, members, leaders


def _limit(member: Member, queues: int) -> int:
    return min(queues, member.max_queues_led or queues)


@settings(max_examples=200, deadline=None)
@given(groups(all_ready=True))
def test_balanced_when_every_member_is_ready(group: tuple[int, dict[str, Member], dict[int, str | None]]) -> None:
    """Every member ready for every queue: the members below their cap differ by at most one queue, and none of
    them has fewer than a capped member's share would allow (no member below its cap has two fewer than another)."""
    queues, members, leaders = group
    planned = plan(queues, members, leaders)
    counts = {m: list(planned.values()).count(m) for m in members}
    uncapped = [c for m, c in counts.items() if c < _limit(members[m], queues)]
    if uncapped:
        assert max(counts.values()) - min(uncapped) <= 1, (counts, leaders)


@settings(max_examples=200, deadline=None)
@given(groups(all_ready=True))
def test_sticky_only_the_queues_that_must_move_do(
        group: tuple[int, dict[str, Member], dict[int, str | None]]) -> None:
    """A member either keeps every queue it leads (and perhaps gains some) or keeps a subset of them (and gains
    none), and one that gives queues away keeps as many as its share allows (its cap, or within one of the most any
    member has): only the queues that must move do."""
    queues, members, leaders = group
    planned = plan(queues, members, leaders)
    counts = Counter(planned.values())
    for m in members:
        led = {q for q, r in leaders.items() if r == m}
        got = {q for q, r in planned.items() if r == m}
        assert led <= got or got <= led, (m, led, got)
        if got < led:
            assert counts[m] == _limit(members[m], queues) or counts[m] >= max(counts.values()) - 1, (m, planned)


@settings(max_examples=200, deadline=None)
@given(groups(), st.randoms(use_true_random=False))
def test_deterministic_whatever_the_order(group: tuple[int, dict[str, Member], dict[int, str | None]],
                                          rnd: object) -> None:
    """The same members and leaders, given in another order, give the same plan."""
    import random

    assert isinstance(rnd, random.Random)
    queues, members, leaders = group
    names, qs = list(members), list(leaders)
    rnd.shuffle(names)
    rnd.shuffle(qs)
    assert plan(queues, {n: members[n] for n in names}, {q: leaders[q] for q in qs}) == plan(queues, members, leaders)


@settings(max_examples=200, deadline=None)
@given(groups())
def test_never_more_than_a_cap_and_never_a_queue_to_a_member_not_ready(
        group: tuple[int, dict[str, Member], dict[int, str | None]]) -> None:
    """No member gets more queues than its cap; a member gets a queue it is not ready for only when it leads it
    already (it keeps it)."""
    queues, members, leaders = group
    planned = plan(queues, members, leaders)
    for m, count in Counter(planned.values()).items():
        assert count <= _limit(members[m], queues)
    for q, m in planned.items():
        assert q in members[m].ready or leaders.get(q) == m, (q, m)


@settings(max_examples=200, deadline=None)
@given(groups())
def test_every_queue_assigned_while_a_member_ready_for_it_has_room(
        group: tuple[int, dict[str, Member], dict[int, str | None]]) -> None:
    """A queue the plan leaves out has no member ready for it below its cap (and its leader, if a member, is at its
    cap)."""
    queues, members, leaders = group
    planned = plan(queues, members, leaders)
    counts = Counter(planned.values())
    for q in set(range(queues)) - set(planned):
        room = [m for m in members if counts[m] < _limit(members[m], queues)
                and (q in members[m].ready or leaders.get(q) == m)]
        assert not room, (q, room, planned)
