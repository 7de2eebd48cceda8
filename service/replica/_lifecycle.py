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
from collections.abc import Callable, Sequence

import structlog

from tenure.career import Career, Standby
from tenure.career.lifecycle import (
    BalanceSource,
    Leadership,
    ReplicaState,
    RequestSource,
    Runner,
    RunnerSettings,
    StallReason,
)
from tenure.election import ElectionEvent, TermHistory
from tenure.service._signals import on_signals
from tenure.service.replica._metrics import Metrics
from tenure.service.replica._proctree import tree_pids
from tenure.service.replica._progress import ProgressClock
from tenure.service.replica._term_record import TermRecorder
from tenure.service.replica._watchdog import Watchdog, WatchdogSettings, loop_live

__all__ = ["EXIT_HANDOVER_OVERRUN", "EXIT_STALLED", "ReplicaControl", "RunnerMetrics", "build_runner", "stop_budget_s"]

_log = structlog.get_logger("tenure.runner")

EXIT_HANDOVER_OVERRUN = 3
EXIT_STALLED = 4
"""The exit code of a replica that gave its lock up because its work stopped progressing (a supervisor restarts
it: `tenure up`, compose's ``restart: on-failure``)."""
#: Past the handover budget, time for the handover record and the node's release (two ZooKeeper writes).
_HANDOVER_GRACE_S = 2.0


def stop_budget_s(handover_timeout_s: float, queues_led: int) -> float:
    """The longest a SIGTERMed replica leading ``queues_led`` queues takes to exit by itself: the handover of each
    (one after another, each ``handover_timeout_s`` plus a grace), then closing its career (once more the same),
    past which it kills its tree and exits :data:`EXIT_HANDOVER_OVERRUN`. A launcher waits this long before
    SIGKILL."""
    return (max(1, queues_led) + 1) * (handover_timeout_s + _HANDOVER_GRACE_S)


class RunnerMetrics:
    """The runner's ``RunnerObserver``: what it reports, as Prometheus metrics (each queue's on its series)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._led: set[int] = set()

    def role_changed(self, queue: int, leading: bool, epoch: int | None) -> None:
        series = self._metrics.queue(queue)
        series.is_leader.set(1 if leading else 0)
        series.leader_epoch.set(epoch if leading and epoch is not None else 0)
        if leading:
            self._led.add(queue)
        else:
            self._led.discard(queue)
        self._metrics.queues_led.set(len(self._led))

    def connection_changed(self, connected: bool) -> None:
        self._metrics.zk_connected.set(1 if connected else 0)

    def leader_changed(self, queue: int) -> None:
        self._metrics.queue(queue).leader_changes.inc()

    def lease_headroom(self, queue: int, seconds: float) -> None:
        self._metrics.queue(queue).lease_headroom.set(seconds)

    def inaugurated(self, queue: int, seconds: float) -> None:
        self._metrics.queue(queue).inauguration_seconds.observe(seconds)
        self._metrics.queue(queue).leadership_changes.inc()

    def term_ended(self, queue: int) -> None:
        self._metrics.queue(queue).lease_headroom.set(0)
        self._metrics.queue(queue).leadership_changes.inc()

    def handover_took(self, queue: int, seconds: float) -> None:
        self._metrics.queue(queue).handover_seconds.observe(seconds)

    def career_failed(self, queue: int) -> None:
        self._metrics.queue(queue).career_failures.inc()

    def stalled(self, reason: StallReason) -> None:
        self._metrics.stalls.labels(reason.value).inc()

    def balanced(self, balanced: bool) -> None:
        self._metrics.group_balanced.set(1 if balanced else 0)

    def move_started(self, queue: int) -> None:
        self._metrics.queue(queue).queue_moves.inc()


class ReplicaControl:
    """The runner's ``ProcessControl``, and the process's signal handling.

    SIGTERM and SIGINT ask the runner to hand over gracefully, within ``handover_timeout_s`` plus a grace for each
    queue it leads (they hand over one after another); past it the session is closed and the process exits with
    :data:`EXIT_HANDOVER_OVERRUN`. Closing the career after
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
        # In a group of several queues a queue's stall is revoked alone; in a group of one it is the fail-stop.
        revoke = runner.revoke_stalled if self._progress.queues > 1 else None
        self._watchdog = Watchdog(self._progress, self._watchdog_settings, runner.give_up, revoke)

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
            self._overrun = self._budget(self._close_overrun, 1)

    def closed(self) -> None:
        if self._overrun is not None:
            self._overrun.cancel()

    def exit_stalled(self) -> None:
        _log.error("exiting_after_stall", exit_code=EXIT_STALLED)
        self._kill_and_exit(EXIT_STALLED)

    # -- signals -----------------------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT hand over gracefully; a second one exits at once (main thread only). They are
        reacted to on a thread of their own (:func:`on_signals`): the handler may interrupt the control loop
        while it holds the event queue's lock, which posting the stop takes too.

        Then both are unblocked: a launcher may start the process with them blocked (``tenure up`` and the drills
        do), so that a stop sent before this point waits here instead of killing the process with the signal's
        default action; it is delivered now, to :meth:`_on_signal`, and exits 0.
        """
        on_signals(self._on_signal, signal.SIGTERM, signal.SIGINT)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})

    def _on_signal(self, signum: signal.Signals) -> None:
        runner = self._runner
        assert runner is not None
        self._signals += 1
        name = signum.name
        if runner.state is ReplicaState.STARTING:
            # Still warming up, not in the election: nothing to hand over, and prepare() cannot be interrupted.
            # Spark's JVM exits with us (its gateway watches our stdin).
            _log.info("stopped_while_starting", signal=name)
            os._exit(0)
        if self._signals > 1:  # the career's processes go too: a frozen JVM would not notice our exit
            _log.warning("second_signal_exit", signal=name)
            self._kill_and_exit(128 + signum)
        # The budget covers finishing the execute() in flight and the whole handover of each queue led, one after
        # another. Each career may spend all of handover_timeout_s waiting for its batch; the grace is for what
        # follows it (record, release).
        self._overrun = self._budget(self._handover_overrun, max(1, len(runner.queues_led())))
        runner.request_stop(name)

    def _budget(self, overrun: Callable[[], None], queues: int) -> threading.Timer:
        """Call ``overrun`` once the stop's budget (``handover_timeout_s`` + the grace, for each of ``queues``) has
        passed (in this thread's context: its log events keep the replica and group bound here)."""
        context = contextvars.copy_context()
        timer = threading.Timer(queues * (self._settings.handover_timeout_s + _HANDOVER_GRACE_S), context.run,
                                (overrun,))
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


def build_runner(leadership_factory: Callable[[int, Callable[[ElectionEvent], None]], Leadership],
                 standby: Standby, careers: Sequence[Career], metrics: Metrics, settings: RunnerSettings, *,
                 watchdog: WatchdogSettings, progress: ProgressClock, requests: RequestSource,
                 histories: Sequence[TermHistory],
                 balance: BalanceSource | None = None) -> tuple[Runner, ReplicaControl]:
    """The runner of one replica, its ports implemented by this process (``control`` installs the signals):
    operators' ``requests`` are its group's, each queue's term history one of ``histories`` (by queue), and
    ``balance`` its members and lines, in ZooKeeper."""
    control = ReplicaControl(progress, settings, watchdog)
    log = _log.bind(replica_id=settings.replica_id, group=histories[0].group)
    terms = [TermRecorder(history, metrics.queue(q), settings.replica_id, log.bind(queue=q))
             for q, history in enumerate(histories)]
    runner = Runner(leadership_factory, standby, careers, settings, observer=RunnerMetrics(metrics),
                    progress=progress, process=control, requests=requests, terms=terms,
                    balance=balance)
    control.attach(runner)
    return runner, control
