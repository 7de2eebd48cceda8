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
from tenure.errors import ConfigError
from tenure.service.replica._progress import ProgressClock, ProgressView
from tenure.settings import setting

__all__ = ["Watchdog", "WatchdogSettings", "find_stall", "loop_live"]

_log = structlog.get_logger("tenure.watchdog")


@dataclass(frozen=True, kw_only=True)
class WatchdogSettings:
    """The watchdog's limits, each declared with its default, unit and hazard (``tenure run``'s flags of the same
    names): all of them are read here, from the progress the control loop and the batches publish.

    Example::

        WatchdogSettings(stall_timeout_s=20.0)
    """

    liveness_timeout_s: float = setting(
        30.0, unit="s", help="The control loop must come round this often: past it /livez fails and the replica "
        "gives its lock up and exits.",
        hazard="A step on the control thread bounded by more than this (starting Spark at an inauguration) has "
        "its own allowance, first_batch_allowance_s; every other deadline on that thread (probe_timeout_s) must "
        "stay below it.")
    stall_timeout_s: float = setting(
        120.0, unit="s", help="A leader with input waiting (queue files or due retries) that finishes no batch "
        "this long gives its lock up at once, records why, and exits non-zero (restarted by its supervisor as a "
        "follower). A steady batch takes well under 2 s here, the heaviest measured about 10 s.",
        hazard="Below the longest batch the input can make, a healthy leader is replaced mid-batch.")
    first_batch_allowance_s: float = setting(
        60.0, unit="s", help="Added to the stall timeout for a term's first batch and to the liveness timeout for "
        "an inauguration (starting Spark, a cluster's executors, loading state).",
        hazard="Too short, a leader that starts Spark cold gives its lock up before its first batch.")

    def __post_init__(self) -> None:
        for name in ("liveness_timeout_s", "stall_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)!r} must be a positive number of seconds")
        if self.first_batch_allowance_s < 0:
            raise ConfigError(f"first_batch_allowance_s={self.first_batch_allowance_s:g} is negative: use 0 for "
                              "no allowance")


def loop_live(view: ProgressView, settings: WatchdogSettings) -> bool:
    """Whether the control loop came round within the liveness timeout (``/livez``; an inauguration's allowance
    does not count here)."""
    return view.now - view.last_tick < settings.liveness_timeout_s


def find_stall(view: ProgressView, settings: WatchdogSettings) -> Stall | None:
    """The stall ``view`` shows, if any: the control loop past its deadline (the liveness timeout after its last
    round, or an inauguration's allowance after the inauguration began), or a leader that owes progress longer than
    the stall timeout (plus the first-batch allowance until its term's first batch finished)."""
    loop_deadline = view.last_tick + settings.liveness_timeout_s
    if view.inaugurating_since is not None:
        loop_deadline = max(loop_deadline, view.inaugurating_since + settings.first_batch_allowance_s)
    if view.now > loop_deadline:
        return Stall(StallReason.CONTROL_LOOP,
                     f"the control loop has not come round for {view.now - view.last_tick:.0f} s (allowed "
                     f"{loop_deadline - view.last_tick:.0f} s: the liveness timeout, or an inauguration's "
                     "allowance)", view.in_flight)
    owed = view.stalled_for()
    limit = settings.stall_timeout_s + (0.0 if view.first_batch_done else settings.first_batch_allowance_s)
    if owed > limit:
        first = "" if view.first_batch_done else " (the term's first batch)"
        return Stall(StallReason.NO_PROGRESS,
                     f"no batch finished for {owed:.0f} s{first} while {view.backlog_files} queue file(s) or due "
                     f"retries waited (stall timeout {limit:g} s)", view.in_flight)
    return None


class Watchdog:
    """Checks ``progress`` every ``interval_s`` on a daemon thread; calls ``on_stall`` once, at the first stall.

    Example::

        watchdog = Watchdog(progress, WatchdogSettings(), on_stall=runner.give_up)
        watchdog.start()
    """

    def __init__(self, progress: ProgressClock, settings: WatchdogSettings, on_stall: Callable[[Stall], None], *,
                 interval_s: float = 1.0) -> None:
        self._progress = progress
        self._settings = settings
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
            stall = find_stall(self._progress.view(), self._settings)
            if stall is not None and not self._stop.is_set():
                _log.error("stall_detected", reason=stall.reason.value, detail=stall.detail, batch=stall.batch_id)
                self._on_stall(stall)
                return
