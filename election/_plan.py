"""The balance's plan: which member should lead each queue of a group — a pure, deterministic function of the
members, their caps and readiness, and each queue's leader now (no ZooKeeper here)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Member", "moves", "plan", "rendezvous_weight"]


@dataclass(frozen=True)
class Member:
    """What a member of the balance says of itself in ``/tenure/<group>/members/<replica>``: the most queues it may
    lead (``--max-queues-led``; None for no cap) and the queues it is ready to lead now (in that queue's line, its
    career warm).

    Example::

        Member(max_queues_led=2, ready=frozenset({0, 1, 3})).encode()
        # b'{"max_queues_led": 2, "ready": [0, 1, 3]}'
    """

    max_queues_led: int | None
    ready: frozenset[int]

    def to_json(self) -> dict[str, Any]:
        return {"max_queues_led": self.max_queues_led, "ready": sorted(self.ready)}

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Member | None:
        """The member's data, or None for data that is not a member's (it then counts as no member)."""
        try:
            data = json.loads(raw.decode()) if raw else None
            if not isinstance(data, dict):
                return None
            cap = data.get("max_queues_led")
            return cls(None if cap is None else int(cap), frozenset(int(q) for q in data.get("ready") or ()))
        except (ValueError, TypeError, AttributeError):
            return None


def rendezvous_weight(queue: int, replica: str) -> int:
    """Queue ``queue``'s preference for ``replica`` (highest first): the first 8 bytes of SHA-256 of
    ``f"{queue}/{replica}"``, big-endian. Every replica computes the same weights, whatever its host."""
    return int.from_bytes(hashlib.sha256(f"{queue}/{replica}".encode()).digest()[:8], "big")


def plan(queues: int, members: Mapping[str, Member], leaders: Mapping[int, str | None]) -> dict[int, str]:
    """Who should lead each of ``queues`` queues: ``{queue: member}``; a queue no member can take is left out.

    1. Each member's share: the queues shared evenly over the members, ``floor(N/R)`` or ``ceil(N/R)``, a member
       capped below that (``max_queues_led``) taking its cap and the others sharing the rest the same way.
    2. Sticky: each queue stays with its leader while the leader is a member and within its share; a leader over
       its share keeps first the queues no other member is ready for, then those it weighs highest, and the shares
       of ``ceil`` go first to the members that lead
       more than ``floor`` (the most first), so that only the queues that must move do.
    3. Each other queue (no leader, a leader that is not a member, or one over its share), in queue order, goes to
       the member with room in its share and ready for it that has the fewest queues, ties broken by the highest
       ``rendezvous_weight``. A queue no such member can take stays with its leader (while under its cap), else goes
       to the member ready for it with the fewest queues still under its cap, else to nobody.

    Deterministic: the same members, leaders and count give the same plan, whatever the order of the mappings.

    Example::

        every = frozenset(range(4))
        plan(4, {"r1": Member(None, every), "r2": Member(None, every), "r3": Member(None, every)},
             {0: "r1", 1: "r1", 2: "r1", 3: "r1"})
        # r1 keeps the two queues it weighs highest; r2 and r3 take one each: 2, 1, 1
    """
    names = sorted(members)
    if not names:
        return {}
    limit: dict[str, int] = {m: min(queues, members[m].max_queues_led or queues) for m in names}
    total = min(queues, sum(limit.values()))
    base = max(b for b in range(queues + 1) if sum(min(limit[m], b) for m in names) <= total)
    floor = {m: min(limit[m], base) for m in names}
    ceil_left = total - sum(floor.values())  # how many members may take floor + 1
    led = {m: _to_keep([q for q in range(queues) if leaders.get(q) == m], m, members) for m in names}
    assigned: dict[int, str] = {}
    count = dict.fromkeys(names, 0)

    def take(q: int, m: str) -> None:
        nonlocal ceil_left
        if count[m] == floor[m]:
            ceil_left -= 1
        assigned[q] = m
        count[m] += 1

    # 2. Sticky: the leaders keep their queues up to their floor share, then the ceil shares by excess.
    for m in names:
        for q in led[m][:floor[m]]:
            take(q, m)
    over = sorted((m for m in names if len(led[m]) > floor[m] < limit[m]), key=lambda m: (floor[m] - len(led[m]), m))
    for m in over:
        if ceil_left <= 0:
            break
        take(led[m][floor[m]], m)

    # 3. The rest, to the members with the fewest queues.
    def fewest(q: int, candidates: list[str]) -> str:
        return min(candidates, key=lambda m: (count[m], -rendezvous_weight(q, m)))

    for q in range(queues):
        if q in assigned:
            continue
        ready = [m for m in names if q in members[m].ready]
        within = [m for m in ready if count[m] < floor[m] or (count[m] == floor[m] < limit[m] and ceil_left > 0)]
        leader = leaders.get(q)
        if within:
            take(q, fewest(q, within))
        elif leader is not None and leader in members and count[leader] < limit[leader]:
            take(q, leader)
        elif spare := [m for m in ready if count[m] < limit[m]]:
            take(q, fewest(q, spare))
    return assigned


def _to_keep(queues: list[int], replica: str, members: Mapping[str, Member]) -> list[int]:
    """The queues ``replica`` leads, in the order it keeps them: first those no other member is ready for (nobody
    else could take them), then by the highest rendezvous weight."""
    def others_ready(q: int) -> bool:
        return any(q in member.ready for name, member in members.items() if name != replica)

    return sorted(queues, key=lambda q: (others_ready(q), -rendezvous_weight(q, replica)))


def moves(planned: Mapping[int, str], leaders: Mapping[int, str | None]) -> dict[int, str]:
    """The queues ``planned`` gives to another replica than their leader now: ``{queue: to}`` (a queue without a
    leader counts: the plan is not where it should be until someone leads it)."""
    return {q: to for q, to in sorted(planned.items()) if leaders.get(q) != to}
