"""The replica process's side of the runner (``tenure.career.lifecycle``): its ports implemented with Prometheus
metrics, the progress watchdog, signals and the process tree, and ``build_runner`` that wires them.

What is about the process stays here: a signal's graceful handover and its budget, the watchdog thread, killing
the JVM and exiting with :data:`EXIT_STALLED` for a supervisor to restart the replica.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

import structlog

from tenure.career import Career
from tenure.career.lifecycle import Leadership, RequestSource, Runner, RunnerSettings, RunnerState, StallReason
from tenure.election import ElectionEvent, TermHistory
from tenure.service.replica._metrics import Metrics
from tenure.service.replica._proctree import tree_pids
from tenure.service.replica._progress import ProgressClock
from tenure.service.replica._term_record import TermRecorder
from tenure.service.replica._watchdog import Watchdog, WatchdogSettings, loop_live

__all__ = ["EXIT_HANDOVER_OVERRUN", "EXIT_STALLED", "ReplicaControl", "RunnerMetrics", "build_runner"]

_log = structlog.get_logger("tenure.runner")

EXIT_HANDOVER_OVERRUN = 3
EXIT_STALLED = 4
"""The exit code of a replica that gave its lock up because its work stopped progressing (a supervisor restarts
it: `tenure up`, compose's ``restart: on-failure``)."""
#: Past the handover budget, time for the handover record and the node's release (two ZooKeeper writes).
_HANDOVER_GRACE_S = 2.0


class RunnerMetrics:
    """The runner's ``RunnerObserver``: what it reports, as Prometheus metrics."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def role_changed(self, leading: bool, epoch: int | None) -> None:
        self._metrics.is_leader.set(1 if leading else 0)
        self._metrics.leader_epoch.set(epoch if leading and epoch is not None else 0)

    def connection_changed(self, connected: bool) -> None:
        self._metrics.zk_connected.set(1 if connected else 0)

    def leader_changed(self) -> None:
        self._metrics.leader_changes.inc()

    def lease_headroom(self, seconds: float) -> None:
        self._metrics.lease_headroom.set(seconds)

    def inaugurated(self, seconds: float) -> None:
        self._metrics.inauguration_seconds.observe(seconds)
        self._metrics.leadership_changes.inc()

    def term_ended(self) -> None:
        self._metrics.lease_headroom.set(0)
        self._metrics.leadership_changes.inc()

    def handover_took(self, seconds: float) -> None:
        self._metrics.handover_seconds.observe(seconds)

    def career_failed(self) -> None:
        self._metrics.career_failures.inc()

    def stalled(self, reason: StallReason) -> None:
        self._metrics.stalls.labels(reason.value).inc()


class ReplicaControl:
    """The runner's ``ProcessControl``, and the process's signal handling.

    SIGTERM and SIGINT ask the runner to hand over gracefully, within ``handover_timeout_s`` plus a grace; past
    it the session is closed and the process exits with :data:`EXIT_HANDOVER_OVERRUN`. Closing the career after
    the loop (stopping Spark) gets the same budget again, past which the process exits the same way: a JVM that
    does not answer (frozen) would otherwise hold the process for ever. A second signal exits at once. Each of
    these exits kills the career's process tree first: a frozen JVM would not notice the exit and stay behind. A
    signal while the career still warms up exits 0 (nothing to hand over). The progress watchdog runs while the
    control loop does.
    """

    def __init__(self, progress: ProgressClock, settings: RunnerSettings, watchdog: WatchdogSettings) -> None:
        self._progress = progress
        self._settings = settings
        self._watchdog_settings = watchdog
        self._runner: Runner | None = None
        self._watchdog: Watchdog | None = None
        self._overrun: threading.Timer | None = None
        self._signals = 0

    def attach(self, runner: Runner) -> None:
        self._runner = runner
        self._watchdog = Watchdog(self._progress, self._watchdog_settings, runner.give_up)

    # -- ProcessControl ----------------------------------------------------------------------------------------

    def loop_started(self) -> None:
        assert self._watchdog is not None, "attach() the runner first"
        self._watchdog.start()

    def loop_live(self) -> bool:
        return loop_live(self._progress.view(), self._watchdog_settings)

    def loop_ended(self) -> None:
        if self._watchdog is not None:
            self._watchdog.stop()
        if self._overrun is not None:  # a signal's stop: closing the career is timed too
            self._overrun.cancel()
            self._overrun = self._budget(self._close_overrun)

    def closed(self) -> None:
        if self._overrun is not None:
            self._overrun.cancel()

    def exit_stalled(self) -> None:
        _log.error("exiting_after_stall", exit_code=EXIT_STALLED)
        self._kill_and_exit(EXIT_STALLED)

    # -- signals -----------------------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT hand over gracefully; a second one exits at once (main thread only).

        Then both are unblocked: a launcher may start the process with them blocked (``tenure up`` and the drills
        do), so that a stop sent before this point waits here instead of killing the process with the signal's
        default action; it is delivered now, to :meth:`_on_signal`, and exits 0.
        """
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        runner = self._runner
        assert runner is not None
        self._signals += 1
        name = signal.Signals(signum).name
        if runner.state is RunnerState.STARTING:
            # Still warming up, not in the election: nothing to hand over, and prepare() cannot be interrupted.
            # Spark's JVM exits with us (its gateway watches our stdin).
            _log.info("stopped_while_starting", signal=name)
            os._exit(0)
        if self._signals > 1:  # the career's processes go too: a frozen JVM would not notice our exit
            _log.warning("second_signal_exit", signal=name)
            self._kill_and_exit(128 + signum)
        # The budget covers finishing the execute() in flight and the whole handover. The career may spend all
        # of handover_timeout_s waiting for its batch; the grace is for what follows it (record, release).
        self._overrun = self._budget(self._handover_overrun)
        runner.request_stop(name)

    def _budget(self, overrun: Callable[[], None]) -> threading.Timer:
        """Call ``overrun`` once the stop's budget (``handover_timeout_s`` + the grace) has passed (in this thread's
        context: its log events keep the replica and group bound here)."""
        context = contextvars.copy_context()
        timer = threading.Timer(self._settings.handover_timeout_s + _HANDOVER_GRACE_S, context.run, (overrun,))
        timer.daemon = True
        timer.start()
        return timer

    def _handover_overrun(self) -> None:
        """The graceful handover ran past its budget: close the session so the successor hears now, not a session
        timeout later, and exit (the supervisor's restart brings the replica back as a follower)."""
        runner = self._runner
        assert runner is not None
        _log.error("handover_overrun", timeout_s=self._settings.handover_timeout_s, state=runner.state.value)
        runner.close_session()
        self._kill_and_exit(EXIT_HANDOVER_OVERRUN)

    def _close_overrun(self) -> None:
        """Closing the career ran past its budget (the election is closed already): exit."""
        _log.error("close_overrun", timeout_s=self._settings.handover_timeout_s + _HANDOVER_GRACE_S)
        self._kill_and_exit(EXIT_HANDOVER_OVERRUN)

    @staticmethod
    def _kill_and_exit(code: int) -> None:
        """SIGKILL the Spark JVM and its Python workers (children first; on a cluster the application's cores go
        with the driver), and exit with ``code``."""
        for pid in reversed(tree_pids(os.getpid())[1:]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        sys.stderr.flush()
        os._exit(code)


def build_runner(leadership_factory: Callable[[Callable[[ElectionEvent], None]], Leadership], career: Career,
                 metrics: Metrics, settings: RunnerSettings, *, watchdog: WatchdogSettings, progress: ProgressClock,
                 requests: RequestSource, history: TermHistory) -> tuple[Runner, ReplicaControl]:
    """The runner of one replica, its ports implemented by this process (``control`` installs the signals):
    operators' ``requests`` and the term ``history`` are its group's, in ZooKeeper."""
    control = ReplicaControl(progress, settings, watchdog)
    log = _log.bind(replica_id=settings.replica_id, group=history.group)
    terms = TermRecorder(history, metrics, settings.replica_id, log)
    runner = Runner(leadership_factory, career, settings, observer=RunnerMetrics(metrics), progress=progress,
                    process=control, requests=requests, terms=terms)
    control.attach(runner)
    return runner, control
