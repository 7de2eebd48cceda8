"""The runner: one control thread that drives a career from leadership events, stop requests and timers.

Every input — election events (posted from the election's thread), a stop request, operators' requests, the clock
— arrives on one bounded queue, and only the control thread changes the runner's state (the seeds' singular update
queue). The loop and the handlers of every event are here, sharing the runner's state, so a reader checks side by
side that every state answers every event. What a term's steps mean lives beside it: its beginning
(``_inauguration.py``), a unit of its work (``_execution.py``) and its end (``_term_end.py``) each answer with the
step to take; the states and their transitions are in ``_states.py``; the policies the loop consults (canary,
drain, the health gate, handover requests, the failure back-off), the fail-stop and the poison-batch count each in
a module of their own. The election reaches the runner through the ``Leadership`` port, and what the process does
(metrics, the watchdog, signals, killing the JVM) through the others (``_ports.py``).
"""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable

import structlog

from tenure.career._protocol import Career, Outcome
from tenure.career.lifecycle._attempts import BatchAttempts
from tenure.career.lifecycle._backoff import FailureBackoff
from tenure.career.lifecycle._canary import CANARY, CanarySchedule
from tenure.career.lifecycle._drain import DrainPolicy, DrainStep
from tenure.career.lifecycle._events import DrainChanged, HandoverRequested, RunnerEvent, StopRequested
from tenure.career.lifecycle._execution import Execution, Work
from tenure.career.lifecycle._fail_stop import FailStop, GaveUp
from tenure.career.lifecycle._health_gate import HealthGate, HealthStep
from tenure.career.lifecycle._inauguration import Inauguration, Start
from tenure.career.lifecycle._log_events import (
    BACKING_OFF,
    BATCH_ATTEMPT_FAILED,
    CANARY_HANDOVER,
    CANARY_SKIPPED,
    CAREER_FAILED,
    DRAINED,
    HANDED_OVER,
    HANDOVER_REQUESTED,
    HEALTHY_AGAIN,
    INAUGURATED,
    LEADERSHIP_SUSPENDED,
    LEFT_ELECTION,
    RUNNER_LOGGER,
    RUNNER_STARTING,
    RUNNER_STATE,
)
from tenure.career.lifecycle._pending_handover import HandoverRequests
from tenure.career.lifecycle._ports import (
    Leadership,
    LoopProgress,
    ProcessControl,
    RequestSource,
    RunnerHealth,
    RunnerObserver,
    TermJournal,
)
from tenure.career.lifecycle._stall import Stall, StallReason
from tenure.career.lifecycle._states import TRANSITIONS, RunnerSettings, RunnerState
from tenure.career.lifecycle._term_end import TermEnd
from tenure.election import (
    ConnectionChanged,
    DrainRequest,
    Elected,
    ElectionEvent,
    Following,
    HandoverRequest,
    Resumed,
    Revoked,
    Suspended,
)
from tenure.errors import TenureError

__all__ = ["Runner"]

_log = structlog.get_logger(RUNNER_LOGGER)


class Runner:
    """Drives ``career`` while the election (``Leadership``) says this replica leads.

    A progress watchdog on a thread of the process (``ProcessControl``) gives the lock up when the loop stops
    coming round or the leader stops finishing batches while input waits; so does the loop itself when Spark
    stops answering, and a full event queue: :meth:`give_up` records why, closes the ZooKeeper session (the node
    goes now) and has the process kill the JVM and exit (``FailStop``).

    Example::

        runner = Runner(lambda post: Election(client, group="orders", identity=identity, on_event=post), career,
                        RunnerSettings(replica_id="r1"), observer=observer, progress=progress, process=process,
                        requests=OperatorRequests(client, "orders"), terms=terms)
        exit_code = runner.run()     # blocks; request_stop() = graceful handover, then 0

    Args:
        leadership_factory: builds the election, given the function its events are posted with.
    """

    def __init__(self, leadership_factory: Callable[[Callable[[ElectionEvent], None]], Leadership], career: Career,
                 settings: RunnerSettings, *, observer: RunnerObserver, progress: LoopProgress,
                 process: ProcessControl, requests: RequestSource, terms: TermJournal,
                 clock: Callable[[], float] = time.monotonic, queue_size: int = 1024) -> None:
        self._events: queue.Queue[RunnerEvent] = queue.Queue(maxsize=queue_size)
        self._election = leadership_factory(self._post)
        self._career = career
        self._observer = observer
        self._settings = settings
        self._clock = clock
        self._state = RunnerState.STARTING
        self._epoch: int | None = None
        self._zk_connected = False
        self._progress = progress
        self._process = process
        self._stop_requested = False
        self._exit_code = 0
        self._log = _log.bind(replica_id=settings.replica_id, group=self._election.group)
        self._terms = terms
        self._seen_leader: str | None = None
        self._requests = requests
        self._drain = DrainPolicy()
        self._health = HealthGate(career, clock)
        self._canary = CanarySchedule(settings.canary_handover_every_s, clock)
        self._handovers = HandoverRequests(requests, settings.replica_id, clock)
        self._attempts = BatchAttempts(settings.replica_id, settings.max_batch_attempts, settings.set_aside_after_s,
                                       clock)
        self._inauguration = Inauguration(self._election, career, self._attempts, self._handovers, self._log)
        self._backoff = FailureBackoff(settings.failure_backoff_s, settings.failure_backoff_max_s, clock)
        self._fail_stop = FailStop(self._election, self._attempts, terms, process, observer, self._log,
                                   where=lambda: (self._epoch, self._state.value))
        self._execution = Execution(self._election, career, terms, progress, observer, self._log)
        self._term_end = TermEnd(self._election, career, self._attempts, terms, self._fail_stop, observer, self._log,
                                 clock, settings.handover_timeout_s)

    @property
    def state(self) -> RunnerState:
        return self._state

    @property
    def epoch(self) -> int | None:
        """The epoch of the current (or last) term, if any."""
        return self._epoch

    # -- inputs: these run on other threads and only post --------------------------------------------------

    def _post(self, event: RunnerEvent) -> None:
        try:
            self._events.put_nowait(event)
        except queue.Full:
            # Dropping an event (a Revoked, an Elected) would leave the runner and the election out of step for
            # good, and a full queue means the control thread is not reading it: fail-stop instead.
            self.give_up(Stall(StallReason.EVENT_QUEUE_FULL,
                               f"the event queue is full ({self._events.maxsize} events); "
                               f"{type(event).__name__} could not be queued"))

    def request_stop(self, reason: str) -> None:
        """Hand over gracefully and stop (from any thread; a signal handler calls it): ``reason`` names why."""
        self._stop_requested = True
        self._post(StopRequested(reason))

    # -- health ------------------------------------------------------------------------------------------------

    def health(self) -> RunnerHealth:
        """A snapshot for /livez, /readyz and /leader (safe to call from the HTTP threads)."""
        return RunnerHealth.of(
            self._state, self._epoch, loop_on_time=self._process.loop_live(),
            stalled=self._fail_stop.stalled, zk_connected=self._zk_connected,
            drained=None if self._drain.request is None else self._drain.describe(), unhealthy=self._health.reason,
            career_ready=self._career.ready(), leads=self._election.leads(self._epoch))

    # -- the control loop --------------------------------------------------------------------------------------

    def run(self) -> int:
        """Prepare, join, lead when elected, and return the exit code once stopped."""
        self._log.info(RUNNER_STARTING)
        self._career.prepare()
        if self._stop_requested:
            self._transition(RunnerState.STOPPING)
            self._transition(RunnerState.STOPPED)
            return 0
        try:
            self._drain.request = self._requests.drain(self._settings.replica_id)
        except TenureError as exc:  # the watch below tells the truth once ZooKeeper answers
            self._log.warning("drain_state_unknown", reason=f"{type(exc).__name__}: {exc}")
        self._election.start(join=self._drain.request is None)
        if self._drain.request is None:
            self._transition(RunnerState.FOLLOWING)
        else:
            self._log.info(DRAINED, reason=self._drain.request.reason, at_start=True)
            self._transition(RunnerState.DRAINED)
        self._requests.watch(self._settings.replica_id, lambda request: self._post(DrainChanged(request)),
                             lambda request: self._post(HandoverRequested(request)))
        self._progress.tick()
        self._process.loop_started()
        while self._state is not RunnerState.STOPPED:
            self._progress.tick()
            if self._fail_stop.stalled is not None:
                # Given up (here or on another thread): the fail-stop thread records the term, ends the session
                # and exits the process. No more work and no more events: they could only race it.
                time.sleep(self._settings.tick_s)
                continue
            with contextlib.suppress(GaveUp):  # the next turn idles until the fail-stop exits the process
                self._step()
        self._process.loop_ended()
        self._election.close()
        closing = self._clock()
        self._career.close()
        self._log.info("career_closed", seconds=round(self._clock() - closing, 3))
        self._process.closed()
        return self._exit_code

    def _step(self) -> None:
        """One turn of the control loop: the health check when due, then lead (one ``execute``) or wait for an
        event."""
        if self._health.due():
            self._check_career_health()
        if self._state is RunnerState.LEADING:
            self._drain_queue()
            if self._state is RunnerState.LEADING and self._canary.due():
                self._canary_handover()
            elif self._state is RunnerState.LEADING and not self._execute_once():
                self._wait(self._settings.idle_backoff_s)
        else:
            self._wait(self._settings.tick_s)
        if self._state is RunnerState.BACKING_OFF and self._backoff.due():
            self._log.info("rejoining", failures=self._backoff.failures)
            self._election.join()
            self._transition(RunnerState.FOLLOWING)

    def _wait(self, timeout_s: float) -> None:
        try:
            event = self._events.get(timeout=timeout_s)
        except queue.Empty:
            return
        self._handle(event)
        self._drain_queue()

    def _drain_queue(self) -> None:
        while self._state is not RunnerState.STOPPED:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            self._handle(event)

    def _transition(self, new: RunnerState) -> None:
        if new not in TRANSITIONS[self._state]:
            raise TenureError(f"runner cannot go from {self._state.value} to {new.value}: this is a bug, "
                              "please report it with the log")
        self._log.info(RUNNER_STATE, old=self._state.value, new=new.value, epoch=self._epoch)
        old, self._state = self._state, new
        leading = new is RunnerState.LEADING
        self._progress.working(leading, new_term=leading and old is RunnerState.FOLLOWING,
                               paused=new is RunnerState.PAUSED)
        self._observer.role_changed(leading, self._epoch)

    def _handle(self, event: RunnerEvent) -> None:
        match event:
            case StopRequested(reason=reason):
                self._stop(reason)
            case ConnectionChanged(connected=connected):
                self._zk_connected = connected
                self._observer.connection_changed(connected)
            case Elected(epoch=epoch):
                if self._state is RunnerState.FOLLOWING:
                    self._inaugurate(epoch)
            case Suspended(reason=reason):
                if self._state is RunnerState.LEADING:
                    self._log.warning(LEADERSHIP_SUSPENDED, reason=reason, epoch=self._epoch)
                    self._transition(RunnerState.PAUSED)
            case Resumed():
                if self._state is RunnerState.PAUSED:
                    self._transition(RunnerState.LEADING)
            case Revoked(reason=reason):
                if self._state in (RunnerState.LEADING, RunnerState.PAUSED):
                    self._end_term(Outcome.REVOKED, reason)
                    self._transition(RunnerState.FOLLOWING)
            case DrainChanged(request=request):
                self._drain_changed(request)
            case HandoverRequested(request=request):
                if request is not None:
                    self._handover_requested(request)
            case Following(leader_replica=leader):
                if leader is not None:
                    self._saw_leader(leader)

    def _saw_leader(self, replica_id: str) -> None:
        if replica_id != self._seen_leader:
            if self._seen_leader is not None:
                self._observer.leader_changed()
            self._seen_leader = replica_id

    # -- the lifecycle -----------------------------------------------------------------------------------------

    def _inaugurate(self, epoch: int) -> None:
        # Starting Spark (cold standby, a cluster's application) may outlast the liveness timeout: it is bounded
        # by the first-batch allowance instead, past which the watchdog gives the lock up.
        with self._progress.inaugurating():
            self._begin_term(epoch)

    def _begin_term(self, epoch: int) -> None:
        started = self._clock()
        elected_at = time.time()
        begun = self._inauguration.admit(epoch)
        if begun.start is Start.LEAD:
            self._epoch = epoch
            begun = self._inauguration.begin(epoch, begun.granted)
        if begun.start is Start.STALE:
            return
        if begun.start in (Start.STEP_ASIDE, Start.REJOIN):
            self._release_and_rejoin()
            return
        if begun.start is Start.UNHEALTHY:
            self._health.reason = str(begun.error)
            self._leave_election(RunnerState.UNHEALTHY, f"unhealthy: {begun.error}", term_ended=True)
            return
        if begun.start is Start.FAILED:
            assert begun.error is not None
            self._career_failed("inaugurate", begun.error)
            return
        ctx, fence = begun.ctx, begun.fence
        assert ctx is not None and fence is not None, "a term that began has its context and fence"
        self._backoff.term_began()
        self._canary.term_began()
        self._terms.began(fence, ctx.previous_handover, elected_at)
        self._fail_stop.term_began()
        if begun.granted is not None:
            try:
                self._requests.remove_handover(begun.granted)
            except TenureError as exc:  # it then lives out its timeout, as a request whose target died does
                self._log.warning("handover_request_not_removed", reason=f"{type(exc).__name__}: {exc}")
        self._saw_leader(self._settings.replica_id)
        self._observer.inaugurated(self._clock() - started)
        self._transition(RunnerState.LEADING)
        self._log.info(INAUGURATED, epoch=epoch, seconds=round(self._clock() - started, 3))

    def _execute_once(self) -> bool:
        """One unit of work (``Execution.once``) and the step its outcome calls for; whether there was work."""
        done = self._execution.once(self._epoch)
        if done.work is Work.REVOKED:
            self._end_term(Outcome.REVOKED, done.reason)
            self._release_and_rejoin()
        elif done.work is Work.STALLED:
            assert done.stall is not None
            self.give_up(done.stall)
        elif done.work is Work.FAILED:
            assert done.error is not None
            self._career_failed("execute", done.error, batch_id=done.batch_id)
        return done.worked

    def _end_term(self, outcome: Outcome, reason: str) -> int | None:
        """End the term (``TermEnd.end``: raises ``GaveUp`` once given up); returns the last committed batch."""
        last_batch = self._term_end.end(outcome, reason, self._epoch)
        self._backoff.term_ended()
        return last_batch

    def _release_and_rejoin(self) -> None:
        self._term_end.rejoin(self._epoch)
        if self._state is not RunnerState.FOLLOWING:
            self._transition(RunnerState.FOLLOWING)

    def _career_failed(self, phase: str, exc: Exception, *, batch_id: int | None = None) -> None:
        """End the term after the career raised and back off; a batch that failed on its own, while storage, Spark
        and ZooKeeper were well, counts one attempt against it in the handover record."""
        reason = self._health.probe()
        if reason is not None:
            # The career failed because its storage (or Spark) did: no fault of the career, so no back-off
            # counting towards it; out of the election until it heals (the successor recovers the term).
            self._health.reason = reason
            self._log.warning("career_failed_unhealthy", phase=phase, reason=reason,
                              error=f"{type(exc).__name__}: {exc}", epoch=self._epoch)
            self._end_term(Outcome.FAILED, f"{phase} raised {type(exc).__name__} while unhealthy: {reason}")
            self._leave_election(RunnerState.UNHEALTHY, f"unhealthy: {reason}", term_ended=True)
            return
        self._backoff.failed()
        self._observer.career_failed()
        self._log.error(CAREER_FAILED, phase=phase, epoch=self._epoch, failures=self._backoff.failures,
                        batch=batch_id, exc_info=exc)
        ended = f"{phase} raised {type(exc).__name__}"
        last_batch = self._end_term(Outcome.FAILED, ended)
        if batch_id is not None and self._zk_connected:
            failed = self._attempts.failed(batch_id, f"{type(exc).__name__}: {exc}")
            self._log.warning(BATCH_ATTEMPT_FAILED, batch=batch_id, attempts=failed.attempts,
                              max_attempts=self._settings.max_batch_attempts, failing_s=round(failed.failing_s, 3),
                              set_aside_after_s=self._settings.set_aside_after_s, epoch=self._epoch)
            self._term_end.record(self._epoch, clean=False, last_batch=last_batch,
                                  reason=f"{ended} on batch {batch_id}")
        self._term_end.release(self._epoch)
        delay = self._backoff.wait()
        self._log.warning(BACKING_OFF, seconds=delay, failures=self._backoff.failures)
        self._transition(RunnerState.BACKING_OFF)

    def _handover_requested(self, request: HandoverRequest) -> None:
        """An operator asked this term to hand over (to a named replica, or the next in line): hand over
        cleanly, then rejoin at the back of the line (``HandoverRequests.honour`` says which requests count)."""
        if not self._handovers.honour(request, self._state, self._epoch):
            return
        self._log.info(HANDOVER_REQUESTED, to=request.to, epoch=self._epoch)
        self._hand_over_and_rejoin(f"handover requested to {request.to or 'the next in line'}")

    def _canary_handover(self) -> None:
        """Hand over on schedule to the next follower in line, so its successor's first commit tests the
        standby (``CanarySchedule``)."""
        self._canary.fired()
        try:
            successor = CanarySchedule.successor(self._election.contenders())
        except TenureError as exc:
            self._log.warning(CANARY_SKIPPED, reason=f"the line is unreadable: {type(exc).__name__}: {exc}")
            return
        if successor is None:
            self._log.info(CANARY_SKIPPED, reason="no follower in line")
            return
        self._log.info(CANARY_HANDOVER, to=successor, epoch=self._epoch)
        self._hand_over_and_rejoin(CANARY)

    def _hand_over_and_rejoin(self, reason: str) -> None:
        """Hand over cleanly (timed for the observer), then stand in line again at the back."""
        started = self._clock()
        self._term_end.clean(self._epoch, reason)
        self._observer.handover_took(self._clock() - started)
        self._release_and_rejoin()

    def _check_career_health(self) -> None:
        """Leave the election while the career cannot work (handing over first when leading), rather than fail
        its batches; rejoin once it can. A drained replica stays drained (``HealthGate``)."""
        match self._health.check(self._state):
            case HealthStep.LEAVE:
                self._leave_election(RunnerState.UNHEALTHY, f"unhealthy: {self._health.reason}")
            case HealthStep.REJOIN:
                self._log.info(HEALTHY_AGAIN)
                self._election.join()
                self._transition(RunnerState.FOLLOWING)
            case HealthStep.NOTHING:
                pass

    def _leave_election(self, to: RunnerState, reason: str, *, term_ended: bool = False) -> None:
        """Hand over cleanly when leading (unless the term already ended), release the node, and wait out of the
        election in state ``to``."""
        was_leading = self._state in (RunnerState.LEADING, RunnerState.PAUSED) and not term_ended
        self._term_end.clean_and_release(self._epoch, reason, leading=was_leading)
        self._log.warning(LEFT_ELECTION, reason=reason, state=to.value, was_leading=was_leading,
                          epoch=self._epoch)
        self._transition(to)

    def _drain_changed(self, request: DrainRequest | None) -> None:
        """Leave the election when drained (handing over first when leading); join again when undrained
        (``DrainPolicy``)."""
        was_leading = self._state in (RunnerState.LEADING, RunnerState.PAUSED)
        match self._drain.changed(request, self._state, unhealthy=self._health.reason is not None):
            case DrainStep.LEAVE | DrainStep.PARK as step:
                assert request is not None
                self._log.info(DRAINED, reason=request.reason, was_leading=was_leading, epoch=self._epoch)
                if step is DrainStep.PARK:
                    self._transition(RunnerState.DRAINED)
                else:
                    self._leave_election(RunnerState.DRAINED, f"drained: {request.reason}")
            case DrainStep.TO_UNHEALTHY:
                self._log.info("undrained")
                self._transition(RunnerState.UNHEALTHY)
            case DrainStep.REJOIN:
                self._log.info("undrained")
                self._election.join()
                self._transition(RunnerState.FOLLOWING)
            case DrainStep.NOTHING:
                pass

    def _stop(self, reason: str) -> None:
        started = self._clock()
        was_leading = self._state in (RunnerState.LEADING, RunnerState.PAUSED)
        self._transition(RunnerState.STOPPING)
        if not self._term_end.clean_and_release(self._epoch, reason, leading=was_leading):
            self._exit_code = 1
        if was_leading:
            self._log.info(HANDED_OVER, epoch=self._epoch, seconds=round(self._clock() - started, 3))
        self._transition(RunnerState.STOPPED)

    # -- fail-stop ---------------------------------------------------------------------------------------------

    def give_up(self, stall: Stall) -> None:
        """Give the lock up at once and have the process exit (``FailStop.give_up``); from any thread, once."""
        self._fail_stop.give_up(stall)

    def close_session(self) -> None:
        """Close the ZooKeeper session, under a deadline: the node goes now (``FailStop.close_session``)."""
        self._fail_stop.close_session()
