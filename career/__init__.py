"""The leadership lifecycle: inaugurate, execute again and again, hand over; and the careers that live it.

The Spark consumer is ``career.spark`` (imported on its own, as it loads Spark); the queue's contract is
``career.queue``; ``CounterCareer`` is a small career for tests and drills.
"""

from career._counter import CounterCareer
from career._protocol import Career, CareerContext, CareerObserver, Fence, HandoverRecord, Outcome

__all__ = ["Career", "CareerContext", "CareerObserver", "CounterCareer", "Fence", "HandoverRecord", "Outcome"]
