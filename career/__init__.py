"""The leadership lifecycle: inaugurate, execute again and again, hand over; and the careers that live it.

The Spark consumer is ``tenure.career.spark`` (imported on its own, as it loads Spark); the queue's contract is
``tenure.career.queue``; ``CounterCareer`` is a small career for tests and drills.
"""

from tenure.career._counter import CounterCareer
from tenure.career._deadline import Probe, call_within
from tenure.career._health import StorageHealth
from tenure.career._protocol import (
    BatchFailed,
    Career,
    CareerContext,
    CareerObserver,
    FailedBatch,
    Fence,
    HandoverRecord,
    Outcome,
)

__all__ = [
    "BatchFailed",
    "Career",
    "CareerContext",
    "CareerObserver",
    "CounterCareer",
    "FailedBatch",
    "Fence",
    "HandoverRecord",
    "Outcome",
    "Probe",
    "StorageHealth",
    "call_within",
]
