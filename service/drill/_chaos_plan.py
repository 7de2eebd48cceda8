"""`tenure drill chaos`, the plan: the run's settings and its faults, drawn up front from the seed."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Final

from tenure.service.drill._settings import DrillError, DrillSettings
from tenure.service.replica import FAULT_POINTS

__all__ = ["CAREER_POINTS", "FAULT_KINDS", "LEADER_KINDS", "ChaosSettings", "PlannedFault", "plan_faults"]

#: The kinds a fault is drawn from, each equally likely.
FAULT_KINDS: Final = ("sigkill", "sigterm", "pause", "partition", "zk-restart", "inject")
#: The kinds that hit a leader: on a topic of several queues, the leader of the queue the fault names.
LEADER_KINDS: Final = tuple(k for k in FAULT_KINDS if k != "zk-restart")
#: Fault points each career reaches (the Spark career's batch windows and inauguration; any career's fence).
#: ``after_read`` is left out: it came after the seeded plans the drills rely on (tests/test_drill.py's seed 12),
#: which one more point would redraw; tests/test_redis_fleet.py places it itself.
CAREER_POINTS: Final = {"spark": tuple(p for p in FAULT_POINTS if p != "after_read"),
                        "counter": ("before_transaction",)}
_INJECT_ACTIONS: Final = ("pause", "kill")
_ZK_ROLES: Final = ("leader", "follower")
#: A planned fault lands at a uniform point of the middle of its slot: never two faults back to back.
_SLOT_MARGIN = 0.15


@dataclass(frozen=True)
class PlannedFault:
    """One fault of the plan: its kind, when (seconds from the production start) and its parameters; on a topic
    of several queues a leader's fault names the queue whose leader it hits (``queue``; None on a topic of one)."""

    index: int
    kind: str
    at_s: float
    point: str | None = None
    action: str | None = None
    zk_role: str | None = None
    queue: int | None = None

    @property
    def label(self) -> str:
        if self.kind == "inject":
            label = f"inject {self.point} {self.action}"
        elif self.kind == "zk-restart":
            label = f"zk-restart ({self.zk_role})"
        else:
            label = self.kind
        return label if self.queue is None else f"{label} (queue {self.queue})"


def plan_faults(seed: int, count: int, window_s: float, *, career: str, queues: int = 1) -> list[PlannedFault]:
    """The seeded plan: ``count`` faults over ``[0, window_s)``, one per equal slot, kinds drawn uniformly; on a
    topic of ``queues`` > 1 each leader's fault (``LEADER_KINDS``) also names a queue, drawn uniformly.

    The same seed, count, window, career and number of queues give the same plan wherever it runs: a kind that
    cannot run here (``partition`` without root) stays in the plan and is reported as skipped. The queues are
    drawn from a stream of their own (seeded ``"<seed>/queues"``), so a plan on several queues has the kinds and
    times of the same seed's plan on one, and a plan on one is the plan of before queues.
    """
    if count < 1:
        raise DrillError(f"--faults {count}: a chaos run needs at least one fault")
    if queues < 1:
        raise DrillError(f"--queues {queues}: a topic has at least one queue")
    rng = random.Random(seed)
    queue_rng = random.Random(f"{seed}/queues")
    points = CAREER_POINTS.get(career, CAREER_POINTS["counter"])
    slot = window_s / count
    plan = []
    for i in range(count):
        at_s = slot * (i + rng.uniform(_SLOT_MARGIN, 1 - _SLOT_MARGIN))
        kind = rng.choice(FAULT_KINDS)
        # Every parameter is drawn for every fault, so one fault's kind never shifts the next one's draws.
        point, action, role = rng.choice(points), rng.choice(_INJECT_ACTIONS), rng.choice(_ZK_ROLES)
        queue = queue_rng.randrange(queues) if queues > 1 else None  # drawn for every fault, as above
        plan.append(PlannedFault(i + 1, kind, round(at_s, 2), point=point if kind == "inject" else None,
                                 action=action if kind == "inject" else None,
                                 zk_role=role if kind == "zk-restart" else None,
                                 queue=queue if kind in LEADER_KINDS else None))
    return plan


@dataclass(frozen=True)
class ChaosSettings:
    """A chaos run: the drill timings (``drill``), the fault count, the seed, the production window and the
    topic's number of queues."""

    drill: DrillSettings
    faults: int
    seed: int
    #: faults are spread over [0, window_s) from the production start; the producer runs a little longer
    window_s: float
    queues: int = 1

    @classmethod
    def make(cls, *, career: str, records: int | None, faults: int, seed: int | None,
             short: bool, queues: int = 1) -> ChaosSettings:
        """Spark needs about 30 s per fault (a session timeout, an inauguration, a batch; a restarted replica's
        warm-up comes on top), the counter about 10 s."""
        base = DrillSettings.make(career=career, records=records, short=short)
        spacing = (30.0 if short else 40.0) if career == "spark" else (10.0 if short else 15.0)
        window = faults * spacing
        drill = replace(base, produce_s=window + spacing / 2)
        drawn = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
        return cls(drill=drill, faults=faults, seed=drawn, window_s=window, queues=queues)
