"""The progress watchdog: a leader keeps its lock only while it makes progress (STYLE habit 17).

kazoo heartbeats the ZooKeeper session from a thread of its own, so a leader whose work hangs — a frozen JVM, a
row function waiting on a socket, a batch that never ends — keeps its lock for ever unless something that does
not share the work's thread notices. This thread reads only the monotonic times the control loop and each queue's
batches publish (``_progress``) and declares a stall; the runner then gives the lock up at once and exits (HDFS
ZKFC's HealthMonitor, Kafka's ``max.poll.interval.ms``).

In a group of several queues, a queue that stops progressing is revoked alone: the runner ends its term, its
career's work stopped under a deadline, and the replica's other queues go on. Only a stall that cannot be contained
so — the control loop stuck, or the queue's term still stalled a liveness timeout after it was asked to end (the
JVM not answering) — is the replica's fail-stop.
"""

from __future__ import annotations

import threading
import time
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


def find_stall(view: ProgressView, settings: WatchdogSettings, queue: int = 0) -> Stall | None:
    """The stall ``view`` (of ``queue``) shows, if any: the control loop past its deadline (the liveness timeout
    after its last round, or an inauguration's allowance after the inauguration began: the replica's stall, its
    ``queue`` None), or a leader that owes progress on ``queue`` longer than the stall timeout (plus the first-batch
    allowance until its term's first batch finished)."""
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
                     f"retries waited (stall timeout {limit:g} s)", view.in_flight, queue)
    return None


class Watchdog:
    """Checks ``progress`` every ``interval_s`` on a daemon thread: calls ``on_stall`` once, at the first stall of the
    replica; with ``revoke``, a queue's stall is first handed to it (once per stall), and is the replica's only when
    the queue still owes progress a liveness timeout later.

    Example::

        watchdog = Watchdog(progress, WatchdogSettings(), on_stall=runner.give_up, revoke=runner.revoke_stalled)
        watchdog.start()
    """

    def __init__(self, progress: ProgressClock, settings: WatchdogSettings, on_stall: Callable[[Stall], None],
                 revoke: Callable[[Stall], None] | None = None, *, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._progress = progress
        self._settings = settings
        self._on_stall = on_stall
        self._revoke = revoke
        self._interval_s = interval_s
        self._clock = clock
        self._revoking: dict[int, float] = {}  # queue → when its stall was handed to ``revoke`` (monotonic)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenure-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            stall = self.check()
            if stall is not None and not self._stop.is_set():
                _log.error("stall_detected", reason=stall.reason.value, detail=stall.detail, batch=stall.batch_id,
                           queue=stall.queue)
                self._on_stall(stall)
                return

    def check(self) -> Stall | None:
        """One look at every queue: the replica's stall, if any (a queue's stall handed to ``revoke`` is not, until
        it has lasted a liveness timeout more)."""
        for queue in range(self._progress.queues):
            stall = find_stall(self._progress.view(queue), self._settings, queue)
            if stall is None:
                self._revoking.pop(queue, None)  # revoked (or progressing again): a later stall is a new one
                continue
            if stall.queue is None or self._revoke is None:
                return stall
            if queue not in self._revoking:
                self._revoking[queue] = self._clock()
                _log.error("queue_stall_detected", reason=stall.reason.value, detail=stall.detail,
                           batch=stall.batch_id, queue=queue)
                self._revoke(stall)
            elif self._clock() - self._revoking[queue] > self._settings.liveness_timeout_s:
                return Stall(stall.reason, f"{stall.detail}; not revoked within the liveness timeout "
                             f"({self._settings.liveness_timeout_s:g} s) after it was found", stall.batch_id, queue)
        return None
