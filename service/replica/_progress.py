"""The monotonic times that tell a leader's progress, published by the control loop and each queue's career.

The progress watchdog (``_watchdog``) and the ``/metrics`` scrape read them from threads of their own, so a
control loop or a batch that hangs cannot hide its own hang (STYLE habit 17). Progress owed is measured per queue,
on a work clock of that queue's own that runs only while the replica leads the queue and is not paused: a suspension
pauses it rather than resetting it, so a leader whose ZooKeeper link flaps faster than the stall timeout still owes
its progress, and a paused leader is never declared stalled for time it could not work.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tenure.service.replica._metrics import Metrics, QueueMetrics

__all__ = ["ProgressClock", "ProgressView", "QueueProgress"]


@dataclass(frozen=True)
class ProgressView:
    """One consistent reading of :class:`ProgressClock` for one queue, at ``now`` (monotonic seconds).

    The control loop's times (``now``, ``last_tick``, ``inaugurating_since``) are monotonic seconds, the replica's. The
    times of the leader's progress are on the queue's work clock (``worked``): seconds this replica has led the queue
    without being paused, which stands still while the term is suspended, so that a pause neither restarts the progress
    owed nor counts towards it.

    Attributes:
        now: when it was read.
        last_tick: when the control loop last came round.
        inaugurating_since: when the inauguration the control loop is inside began (it may outlast the liveness
            timeout by the watchdog's allowance); None outside one.
        worked: the work clock when it was read.
        working_since: the work clock when the current term began; None when no term is open (a paused term is
            open).
        first_batch_done: whether a batch has finished in this term.
        waiting_since: the work clock when input began to wait (queue files or due retries); None when none waits.
        last_progress: the work clock when a batch last finished and moved records on.
        in_flight: the batch running now, if any.
        backlog_files: queue files not yet consumed, as last reported.
    """

    now: float
    last_tick: float
    inaugurating_since: float | None
    worked: float
    working_since: float | None
    first_batch_done: bool
    waiting_since: float | None
    last_progress: float
    in_flight: int | None
    backlog_files: int

    def stalled_for(self) -> float:
        """Seconds of work the leader has owed progress: input waiting, leading (pauses not counted), and no batch
        finished since; 0 if none."""
        if self.working_since is None or self.waiting_since is None:
            return 0.0
        return max(0.0, self.worked - max(self.working_since, self.waiting_since, self.last_progress))


class QueueProgress:
    """One queue's progress: the times of its terms on its own work clock, and its batches (the observer of the
    queue's career, forwarding every call to the queue's ``metrics``).

    Example::

        progress = ProgressClock(metrics, queues=2)
        career = SparkCareer(config, progress.queue(1), replica_id="r1")   # queue 1's batches report here
    """

    def __init__(self, metrics: QueueMetrics, clock: Callable[[], float], lock: threading.Lock) -> None:
        self._metrics = metrics
        self._clock = clock
        self._lock = lock  # the clock's: one consistent view of the loop and every queue
        # The work clock: seconds led without a pause, ``_worked`` up to the stretch running since
        # ``_stretch_since`` (monotonic; None while not leading or paused).
        self._worked = 0.0
        self._stretch_since: float | None = None
        self._working_since: float | None = None  # on the work clock, like the two below
        self._first_batch_done = False
        self._input_waiting = False
        self._stuck = False  # the last batch made no progress although it ran (the row function is stuck)
        self._waiting_since: float | None = None
        self._last_progress = 0.0
        self._in_flight: int | None = None
        self._backlog_files = 0

    # -- the control loop -------------------------------------------------------------------------------------

    def working(self, leading: bool, *, new_term: bool = False, paused: bool = False) -> None:
        """The runner began a term (``new_term``), resumed leading, was paused (``paused``: the term goes on, its
        work clock stands still), or stopped leading (the term is over); a new term's first batch gets its own
        allowance."""
        with self._lock:
            now = self._clock()
            if self._stretch_since is not None:
                self._worked += now - self._stretch_since
            self._stretch_since = now if leading else None
            if new_term:
                self._working_since = self._worked
                self._first_batch_done = False
                self._in_flight = None
            elif not leading and not paused:
                self._working_since = None

    def _work_clock(self) -> float:
        """The work clock now. Called under the lock."""
        running = self._clock() - self._stretch_since if self._stretch_since is not None else 0.0
        return self._worked + running

    def read(self, now: float, last_tick: float, inaugurating_since: float | None) -> ProgressView:
        """The queue's view, with the loop's times. Called under the lock."""
        return ProgressView(
            now=now, last_tick=last_tick, inaugurating_since=inaugurating_since, worked=self._work_clock(),
            working_since=self._working_since, first_batch_done=self._first_batch_done,
            waiting_since=self._waiting_since, last_progress=self._last_progress, in_flight=self._in_flight,
            backlog_files=self._backlog_files)

    def batch_in_flight(self) -> int | None:
        """The batch running now, if any."""
        with self._lock:
            return self._in_flight

    # -- CareerObserver ---------------------------------------------------------------------------------------

    def batch_started(self, batch_id: int) -> None:
        with self._lock:
            self._in_flight = batch_id

    def batch_finished(self, outcome: str, duration_s: float, records: dict[str, int], *,
                       progressed: bool = True) -> None:
        with self._lock:
            self._in_flight = None
            if outcome in ("committed", "skipped", "set_aside"):
                self._first_batch_done = True
                self._stuck = not progressed
                if progressed:
                    self._last_progress = self._work_clock()
                self._update_waiting()
        self._metrics.batch_finished(outcome, duration_s, records, progressed=progressed)

    def commit_finished(self, duration_s: float, committed_at: float) -> None:
        self._metrics.commit_finished(duration_s, committed_at)

    def backlog(self, files: int, *, retry_due: bool = False) -> None:
        with self._lock:
            self._backlog_files = files
            self._input_waiting = files > 0 or retry_due
            self._update_waiting()
        self._metrics.backlog(files, retry_due=retry_due)

    def _update_waiting(self) -> None:
        """Work is owed while input waits, or while the batches run without moving records on (their records wait
        in the retry store, due later): both keep the stall clock running. Called under the lock."""
        if not (self._input_waiting or self._stuck):
            self._waiting_since = None
        elif self._waiting_since is None:
            self._waiting_since = self._work_clock()

    def retry_waiting(self, records: int) -> None:
        self._metrics.retry_waiting(records)

    def queue_lost(self, lost: bool) -> None:
        self._metrics.queue_lost(lost)


class ProgressClock:
    """The progress clock of one replica (the runner's ``LoopProgress``): the control loop's times, and each queue's
    progress (:meth:`queue`, the observer of that queue's career).

    Example::

        progress = ProgressClock(metrics, queues=2)
        career = SparkCareer(config, progress.queue(0), replica_id="r1")   # queue 0's batches report here
        progress.tick()                                                    # the control loop, each round
        progress.view(0).stalled_for()                                     # the watchdog, from its own thread
    """

    def __init__(self, metrics: Metrics, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tick = clock()
        self._inaugurating_since: float | None = None
        self._queues = [QueueProgress(metrics.queue(q), clock, self._lock) for q in range(metrics.queues)]
        metrics.control_loop_age.set_function(lambda: self._clock() - self._tick)
        for q in range(metrics.queues):
            metrics.queue(q).progress_age.set_function(functools.partial(self._stalled_for, q))

    @property
    def queues(self) -> int:
        return len(self._queues)

    def queue(self, queue: int) -> QueueProgress:
        """Queue ``queue``'s progress: the observer of its career."""
        return self._queues[queue]

    # -- the control loop -------------------------------------------------------------------------------------

    def tick(self) -> None:
        """The control loop came round."""
        with self._lock:
            self._tick = self._clock()

    @contextlib.contextmanager
    def inaugurating(self) -> Iterator[None]:
        """The loop is inside an inauguration, which may outlast the liveness timeout (starting Spark): the
        watchdog allows it the first-batch allowance; after it the liveness timeout counts from its end."""
        with self._lock:
            self._inaugurating_since = self._clock()
        try:
            yield
        finally:
            with self._lock:
                self._tick = self._clock()
                self._inaugurating_since = None

    def working(self, leading: bool, *, new_term: bool = False, paused: bool = False, queue: int = 0) -> None:
        """Queue ``queue``'s term began, resumed, was paused or ended (``QueueProgress.working``)."""
        self._queues[queue].working(leading, new_term=new_term, paused=paused)

    def batch_in_flight(self, queue: int = 0) -> int | None:
        """The batch of ``queue`` running now, if any."""
        return self._queues[queue].batch_in_flight()

    def _stalled_for(self, queue: int) -> float:
        return self.view(queue).stalled_for()

    def view(self, queue: int = 0) -> ProgressView:
        """Queue ``queue``'s progress and the control loop's times, read at once."""
        with self._lock:
            return self._queues[queue].read(self._clock(), self._tick, self._inaugurating_since)
