"""The leadership lifecycle: inaugurate, execute again and again, hand over; and the careers that live it.

The Spark consumer is ``tenure.career.spark`` (imported on its own, as it loads Spark); the queue's contract is
``tenure.career.queue``; ``CounterCareer`` is a small career for tests and drills.

The names below are imported when first used (``tenure.career._lazy`` says why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tenure.career._lazy import lazy_exports

if TYPE_CHECKING:
    from tenure.career._counter import CounterCareer, CounterSettings, CounterStandby, counter_careers, counter_path
    from tenure.career._deadline import Probe, call_within
    from tenure.career._health import HealthSettings, StorageHealth
    from tenure.career._protocol import (
        BatchFailed,
        Career,
        CareerContext,
        CareerObserver,
        Careers,
        FailedBatch,
        FencedCommit,
        HandoverRecord,
        Outcome,
        SoloCareer,
        Standby,
    )

__all__ = [
    "BatchFailed",
    "Career",
    "CareerContext",
    "CareerObserver",
    "Careers",
    "CounterCareer",
    "CounterSettings",
    "CounterStandby",
    "FailedBatch",
    "FencedCommit",
    "HandoverRecord",
    "HealthSettings",
    "Outcome",
    "Probe",
    "SoloCareer",
    "Standby",
    "StorageHealth",
    "call_within",
    "counter_careers",
    "counter_path",
]

_HOMES = {
    "CounterCareer": "_counter",
    "CounterSettings": "_counter",
    "CounterStandby": "_counter",
    "counter_careers": "_counter",
    "counter_path": "_counter",
    "Probe": "_deadline",
    "call_within": "_deadline",
    "HealthSettings": "_health",
    "StorageHealth": "_health",
    **dict.fromkeys(["BatchFailed", "Career", "CareerContext", "CareerObserver", "Careers", "FailedBatch",
                     "FencedCommit", "HandoverRecord", "Outcome", "SoloCareer", "Standby"], "_protocol"),
}


__getattr__ = lazy_exports(__name__, _HOMES)
