"""The progress watchdog: a leader keeps its lock only while it makes progress (STYLE habit 17).

kazoo heartbeats the ZooKeeper session from a thread of its own, so a leader whose work hangs — a frozen JVM, a
row function waiting on a socket, a batch that never ends — keeps its lock for ever unless something that does
not share the work's thread notices. This thread reads only the monotonic times the control loop and the batches
publish (``_progress``) and declares a stall; the runner then gives the lock up at once and exits (HDFS ZKFC's
HealthMonitor, Kafka's ``max.poll.interval.ms``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from tenure.career.lifecycle import Stall, StallReason
from tenure.service.replica._progress import ProgressClock, ProgressView

__all__ = ["StallLimits", "Watchdog", "find_stall"]

_log = structlog.get_logger("tenure.watchdog")


@dataclass(frozen=True)
class StallLimits:
    """The watchdog's limits (``RunnerSettings`` holds and validates them)."""

    stall_timeout_s: float
    first_batch_allowance_s: float


def find_stall(view: ProgressView, limits: StallLimits) -> Stall | None:
    """The stall ``view`` shows, if any: the control loop past its deadline, or a leader that owes progress
    longer than the stall timeout (plus the first-batch allowance until its term's first batch finished)."""
    if view.now > view.loop_deadline:
        return Stall(StallReason.CONTROL_LOOP,
                     f"the control loop has not come round for {view.now - view.last_tick:.0f} s (allowed "
                     f"{view.loop_deadline - view.last_tick:.0f} s: the liveness timeout, or an inauguration's "
                     "allowance)", view.in_flight)
    owed = view.stalled_for()
    limit = limits.stall_timeout_s + (0.0 if view.first_batch_done else limits.first_batch_allowance_s)
    if owed > limit:
        first = "" if view.first_batch_done else " (the term's first batch)"
        return Stall(StallReason.NO_PROGRESS,
                     f"no batch finished for {owed:.0f} s{first} while {view.backlog_files} queue file(s) or due "
                     f"retries waited (stall timeout {limit:g} s)", view.in_flight)
    return None


class Watchdog:
    """Checks ``progress`` every ``interval_s`` on a daemon thread; calls ``on_stall`` once, at the first stall.

    Example::

        watchdog = Watchdog(progress, StallLimits(120, 60), on_stall=runner.give_up)
        watchdog.start()
    """

    def __init__(self, progress: ProgressClock, limits: StallLimits, on_stall: Callable[[Stall], None], *,
                 interval_s: float = 1.0) -> None:
        self._progress = progress
        self._limits = limits
        self._on_stall = on_stall
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenure-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            stall = find_stall(self._progress.view(), self._limits)
            if stall is not None and not self._stop.is_set():
                _log.error("stall_detected", reason=stall.reason.value, detail=stall.detail, batch=stall.batch_id)
                self._on_stall(stall)
                return
