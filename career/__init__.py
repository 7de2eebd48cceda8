"""The leadership lifecycle: inaugurate, execute again and again, hand over."""

from career._protocol import Career, CareerContext, CareerObserver, Fence, HandoverRecord, Outcome

__all__ = ["Career", "CareerContext", "CareerObserver", "Fence", "HandoverRecord", "Outcome"]
