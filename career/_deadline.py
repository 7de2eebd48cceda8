"""Calls that may hang — into Spark's JVM, onto a file system — run where a deadline can abandon them.

STYLE habit 18: nothing on the control thread waits without a deadline. Python cannot stop a thread blocked in a
socket read or a system call, so a call that misses its deadline is abandoned on its helper thread, and the
caller gets :class:`~election.Unresponsive` at the deadline (HDFS ZKFC's HealthMonitor does the same with its
RPC timeout).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from tenure.errors import Unresponsive

__all__ = ["Probe", "call_within"]

T = TypeVar("T")


@dataclass
class _Box(Generic[T]):
    """One call's outcome, filled on the helper thread; ``done`` once it returned or raised."""

    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None

    def fill(self, fn: Callable[[], T], finished: Callable[[], None] = lambda: None) -> None:
        """Run ``fn`` here and keep what it returned or raised; ``finished`` runs before ``done`` is set."""
        try:
            self.value = fn()
        except BaseException as exc:  # handed to the caller as is
            self.error = exc
        finally:
            finished()
            self.done.set()

    def wait(self, timeout_s: float, what: str) -> T:
        if not self.done.wait(timeout_s):
            raise Unresponsive(f"{what} did not answer within {timeout_s:g} s")
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[no-any-return]


def call_within(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """``fn()`` on a thread of its own; its result, or what it raised, within ``timeout_s``.

    For rare, slow calls (starting or stopping Spark): each call gets a new thread. Frequent calls go through a
    :class:`Probe`, which reuses one.

    Raises:
        Unresponsive: ``fn`` did not return within ``timeout_s`` (it goes on, abandoned, on its thread).
    """
    box: _Box[T] = _Box()
    threading.Thread(target=box.fill, args=(fn,), name=f"tenure-call-{what[:24]}", daemon=True).start()
    return box.wait(timeout_s, what)


class Probe:
    """Runs one kind of call — say, into one JVM — with a deadline, never more than one at a time.

    One helper thread serves every call (py4j gives each Python thread a connection and a JVM thread of its
    own, so a thread per call would cost a connection per call). A call that misses its deadline keeps that
    thread; until it returns, every later call fails at once with how long the stuck one has waited, so a
    frozen JVM costs one thread, not one per probe.

    Example::

        jvm = Probe("Spark's JVM", timeout_s=10)
        active = jvm(lambda: query.isActive)      # Unresponsive after 10 s, or at once while one is stuck

    Args:
        what: names the callee in messages (``"Spark's JVM"``, ``"the data root"``).
        timeout_s: the default deadline of each call.
        clock: monotonic clock in seconds (injectable).
    """

    def __init__(self, what: str, timeout_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._busy_since: float | None = None
        self._requests: queue.SimpleQueue[tuple[Callable[[], Any], _Box[Any]]] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None

    @property
    def stuck_for(self) -> float | None:
        """Seconds the call in flight has been waiting, or None when none is."""
        with self._lock:
            return None if self._busy_since is None else self._clock() - self._busy_since

    def __call__(self, fn: Callable[[], T], timeout_s: float | None = None) -> T:
        """``fn()``'s result, or what it raised, within ``timeout_s`` (default: the probe's).

        Raises:
            Unresponsive: ``fn`` did not return in time, or an earlier call has still not returned.
        """
        limit = self.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            if self._busy_since is not None:
                waited = self._clock() - self._busy_since
                raise Unresponsive(f"{self.what} has not answered for {waited:.0f} s (a call is still waiting)")
            self._busy_since = self._clock()
            if self._worker is None:
                self._worker = threading.Thread(target=self._serve, name=f"tenure-probe-{self.what[:24]}",
                                                daemon=True)
                self._worker.start()
        box: _Box[T] = _Box()
        self._requests.put((fn, box))
        return box.wait(limit, self.what)

    def _serve(self) -> None:
        while True:
            fn, box = self._requests.get()
            box.fill(fn, finished=self._idle)

    def _idle(self) -> None:
        with self._lock:
            self._busy_since = None
