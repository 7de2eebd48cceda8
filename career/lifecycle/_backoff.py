"""The failure back-off: after the career raised, the replica stays out of the line for a while before rejoining."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["FailureBackoff"]


class FailureBackoff:
    """Doubles from ``first_s`` up to ``max_s`` with each failure in a row; a term that lasted longer than ``max_s``
    forgives the failures before it.

    Example::

        backoff = FailureBackoff(1.0, 60.0, time.monotonic)
        backoff.term_began()
        backoff.failed()               # the career raised: one failure more in a row
        delay = backoff.wait()         # once its term ended: 1 s, then 2, 4 … up to 60
        if backoff.due():              # the delay has passed: rejoin
            ...
    """

    def __init__(self, first_s: float, max_s: float, clock: Callable[[], float]) -> None:
        self._first_s = first_s
        self._max_s = max_s
        self._clock = clock
        self.failures = 0
        self._term_started = 0.0
        self._rejoin_at = 0.0

    def term_began(self) -> None:
        self._term_started = self._clock()

    def term_ended(self) -> None:
        """A term ended: a long healthy one forgives earlier failures."""
        if self.failures and self._clock() - self._term_started > self._max_s:
            self.failures = 0

    def failed(self) -> None:
        """The career failed once more."""
        self.failures += 1

    def wait(self) -> float:
        """Start the wait before rejoining, now that the failed term is over; returns its seconds."""
        delay = min(self._first_s * 2.0 ** (self.failures - 1), self._max_s)
        self._rejoin_at = self._clock() + delay
        return delay

    def due(self) -> bool:
        """The wait after the last failure is over."""
        return self._clock() >= self._rejoin_at
