"""The runner: one control thread that drives a career from leadership events, stop requests and timers.

Every input — election events (posted from the election's thread), a stop request, operators' requests, the clock
— arrives on one bounded queue, and only the control thread changes the runner's state (the seeds' singular update
queue). One module past 400 lines on purpose: the loop and the handlers of every event — election, stop, operator
request, health — share the runner's state, and reading them side by side is how a reader checks that every state
answers every event. The states and their transitions are in ``_states.py``; the four policies the loop consults
(canary, drain, the health gate, pending handover requests) each in a module of its own; what the process does
(metrics, the watchdog, signals, killing the JVM) reaches the runner through ``_ports.py``.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import structlog
from kazoo.exceptions import KazooException

from tenure.career._deadline import call_within
from tenure.career._protocol import BatchFailed, Career, CareerContext, FailedBatch, HandoverRecord, Outcome
from tenure.career.lifecycle._canary import CANARY, CanarySchedule
from tenure.career.lifecycle._drain import DrainPolicy, DrainStep
from tenure.career.lifecycle._events import DrainChanged, HandoverRequested, RunnerEvent, StopRequested
from tenure.career.lifecycle._health_gate import HealthGate, HealthStep
from tenure.career.lifecycle._pending_handover import HandoverRequests, PendingHandover
from tenure.career.lifecycle._ports import (
    LoopProgress,
    ProcessControl,
    RequestSourceFactory,
    RunnerHealth,
    RunnerObserver,
    TermJournalFactory,
)
from tenure.career.lifecycle._stall import Stall, StallReason
from tenure.career.lifecycle._states import TRANSITIONS, RunnerSettings, RunnerState
from tenure.election import (
    CommitOutcomeUnknown,
    ConnectionChanged,
    DrainRequest,
    Elected,
    Election,
    ElectionError,
    ElectionEvent,
    Fenced,
    Following,
    HandoverRequest,
    NotLeader,
    Resumed,
    Revoked,
    Suspended,
    TenureError,
    Unresponsive,
)

__all__ = ["Runner"]  # and the log event names below, which the package exports

#: the runner's logger: its events carry ``logger="tenure.runner"``
RUNNER_LOGGER: Final = "tenure.runner"

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
# ``inaugurated`` and ``handed_over`` are the Spark career's too (its own logger): it imports them from here.
RUNNER_STARTING: Final = "runner_starting"
RUNNER_STATE: Final = "runner_state"  # fields old, new (RunnerState values), epoch
INAUGURATING: Final = "inaugurating"
INAUGURATED: Final = "inaugurated"
INAUGURATION_ABANDONED: Final = "inauguration_abandoned"
LEADERSHIP_SUSPENDED: Final = "leadership_suspended"
HANDING_OVER: Final = "handing_over"
HANDOVER_RECORDED: Final = "handover_recorded"
HANDOVER_RECORD_NOT_WRITTEN: Final = "handover_record_not_written"
HANDED_OVER: Final = "handed_over"
FENCED: Final = "fenced"
EXECUTE_NOT_LEADER: Final = "execute_not_leader"
COMMIT_OUTCOME_UNKNOWN: Final = "commit_outcome_unknown"
CAREER_FAILED: Final = "career_failed"
BACKING_OFF: Final = "backing_off"  # after a career failure, before rejoining
HANDOVER_REQUESTED: Final = "handover_requested"  # the leader acts on `tenure handover` (field to)
DEFERRED_TO_HANDOVER_TARGET: Final = "deferred_to_handover_target"  # one ahead of the target steps aside
STALLED: Final = "stalled"  # the replica gives its lock up and exits (fields reason, detail, batch, epoch)
STALE_ELECTED_IGNORED: Final = "stale_elected_ignored"
BATCH_ATTEMPT_FAILED: Final = "batch_attempt_failed"
LEFT_ELECTION: Final = "left_election"
HEALTHY_AGAIN: Final = "healthy_again"
DRAINED: Final = "drained"
CANARY_HANDOVER: Final = "canary_handover"
CANARY_SKIPPED: Final = "canary_skipped"

_log = structlog.get_logger(RUNNER_LOGGER)


class _GaveUp(Exception):
    """A term's end found the runner given up (``Runner.give_up``): whatever called it stops there, because the
    fail-stop thread records the term, holds the node until then and exits the process."""


class Runner:
    """Drives ``career`` while ``election`` says this replica leads.

    A progress watchdog on a thread of the process (``ProcessControl``) gives the lock up when the loop stops
    coming round or the leader stops finishing batches while input waits; so does the loop itself when Spark
    stops answering, and a full event queue: :meth:`give_up` records why, closes the ZooKeeper session (the node
    goes now) and has the process kill the JVM and exit.

    Example::

        runner = Runner(election_factory, career, RunnerSettings(replica_id="r1"), observer=observer,
                        progress=progress, process=process, requests=requests, terms=terms)
        exit_code = runner.run()     # blocks; request_stop() = graceful handover, then 0
    """

    def __init__(self, election_factory: Callable[[Callable[[ElectionEvent], None]], Election], career: Career,
                 settings: RunnerSettings, *, observer: RunnerObserver, progress: LoopProgress,
                 process: ProcessControl, requests: RequestSourceFactory, terms: TermJournalFactory,
                 clock: Callable[[], float] = time.monotonic, queue_size: int = 1024) -> None:
        self._events: queue.Queue[RunnerEvent] = queue.Queue(maxsize=queue_size)
        self._election = election_factory(self._post)
        self._career = career
        self._observer = observer
        self._settings = settings
        self._clock = clock
        self._state = RunnerState.STARTING
        self._epoch: int | None = None
        self._zk_connected = False
        self._term_started = 0.0
        self._failures = 0
        self._rejoin_at = 0.0
        self._progress = progress
        self._process = process
        self._stall_lock = threading.Lock()  # guards the two below: who records the term's end
        self._stalled: Stall | None = None
        self._term_open = False  # a term began in the history and its end is not recorded yet
        self._failed_batch: FailedBatch | None = None  # this term's view of the batch failing terms in a row
        self._stop_requested = False
        self._exit_code = 0
        self._log = _log.bind(replica_id=settings.replica_id, group=self._election.group)
        self._terms = terms(self._election)
        self._seen_leader: str | None = None
        self._requests = requests(self._election, self._post)
        self._drain = DrainPolicy()
        self._health = HealthGate(career, clock)
        self._canary = CanarySchedule(settings.canary_handover_every_s, clock)
        self._handovers = HandoverRequests(self._requests, settings.replica_id)

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
        reasons = []
        stalled = self._stalled
        live = self._process.loop_live() and stalled is None
        if stalled is not None:
            reasons.append(f"stalled: {stalled.describe()}")
        elif not live:
            reasons.append("control loop stalled")
        if not self._zk_connected:
            reasons.append("ZooKeeper disconnected")
        in_election = self._state in (RunnerState.FOLLOWING, RunnerState.LEADING, RunnerState.PAUSED)
        if self._drain.request is not None and self._state is RunnerState.DRAINED:
            reasons.append(self._drain.describe())
        elif self._state is RunnerState.UNHEALTHY:
            reasons.append(f"unhealthy: {self._health.reason}")
        elif not in_election:
            reasons.append(f"not in the election ({self._state.value})")
        career_ready = self._career.ready()
        if not career_ready:
            reasons.append("career not ready (warming up)")
        leader = (live and self._state is RunnerState.LEADING and self._election.is_leader()
                  and self._election.epoch == self._epoch)
        return RunnerHealth(live=live, ready=live and self._zk_connected and in_election and career_ready,
                            leader=leader, role=self._state.value, epoch=self._epoch, reasons=reasons)

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
            self._drain.request = self._requests.drain(self._election.op_timeout_s)
        except self._zookeeper_errors() as exc:  # the watch below tells the truth once ZooKeeper answers
            self._log.warning("drain_state_unknown", reason=f"{type(exc).__name__}: {exc}")
        self._election.start(join=self._drain.request is None)
        if self._drain.request is None:
            self._transition(RunnerState.FOLLOWING)
        else:
            self._log.info(DRAINED, reason=self._drain.request.reason, at_start=True)
            self._transition(RunnerState.DRAINED)
        self._requests.watch()
        self._progress.tick()
        self._process.loop_started()
        while self._state is not RunnerState.STOPPED:
            self._progress.tick()
            if self._stalled is not None:
                # Given up (here or on another thread): the fail-stop thread records the term, ends the session
                # and exits the process. No more work and no more events: they could only race it.
                time.sleep(self._settings.tick_s)
                continue
            with contextlib.suppress(_GaveUp):  # the next turn idles until the fail-stop exits the process
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
        if self._state is RunnerState.BACKING_OFF and self._clock() >= self._rejoin_at:
            self._log.info("rejoining", failures=self._failures)
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
        self._progress.working(leading, new_term=leading and old is RunnerState.FOLLOWING)
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

    def _zookeeper_errors(self) -> tuple[type[BaseException], ...]:
        """What a ZooKeeper call of the election can raise besides a bug: ``TenureError`` (``Fenced``,
        ``NotLeader``, ``ElectionError``), kazoo's own errors (connection loss, session expiry, NoAuth …,
        passed through by ``read_handover``/``write_handover``) and the handler's timeout."""
        return TenureError, KazooException, self._election.client.handler.timeout_exception

    def _still_leading(self, epoch: int) -> Callable[[], bool]:
        """True only while the election leads in the term of ``epoch`` (not in a later term of this replica)."""
        election = self._election

        def still_leading() -> bool:
            return election.is_leader() and election.epoch == epoch

        return still_leading

    def _inaugurate(self, epoch: int) -> None:
        # Starting Spark (cold standby, a cluster's application) may outlast the liveness timeout: it is bounded
        # by the first-batch allowance instead, past which the watchdog gives the lock up.
        with self._progress.inaugurating():
            self._begin_term(epoch)

    def _begin_term(self, epoch: int) -> None:
        started = self._clock()
        elected_at = time.time()
        current = self._election.epoch
        if current != epoch:
            # Queued before the election lost that term (and perhaps won another): its Revoked, and the new
            # term's own Elected, are behind it on the queue. Starting a term here would pair this epoch with
            # the newer term's fence.
            self._log.info(STALE_ELECTED_IGNORED, epoch=epoch, current_epoch=current)
            return
        step_aside, granted = self._pending_handover(epoch)
        if step_aside:
            self._log.info(DEFERRED_TO_HANDOVER_TARGET, epoch=epoch)
            self._release_and_rejoin()
            return
        self._epoch = epoch
        try:
            fence = self._election.fence()  # the fence carries the epoch of the term it was read in
            if fence.epoch != epoch:
                self._log.info(STALE_ELECTED_IGNORED, epoch=epoch, current_epoch=fence.epoch)
                return
            raw = self._election.read_handover()
            previous = None if raw is None else HandoverRecord.from_json(raw)
            self._failed_batch = None if previous is None else previous.failed_batch
            # Mark the term dirty at once: if this replica dies, its successor sees clean=False and recovers. The
            # count of a batch failing terms in a row carries over, so a crash does not reset it.
            self._election.write_handover(self._handover_record(clean=False, last_batch=None, reason="in progress"))
            ctx = CareerContext(epoch=epoch, fence=fence, still_leading=self._still_leading(epoch),
                                previous_handover=previous, set_aside=self._poison())
        except self._zookeeper_errors() as exc:
            # ZooKeeper failed (or the term ended) before the term began: nothing of the career ran, so this
            # is no career failure. Give the node up and stand in line again, rather than leave the
            # election leading a replica that does not work.
            self._log.warning(INAUGURATION_ABANDONED, epoch=epoch, reason=f"{type(exc).__name__}: {exc}")
            self._release_and_rejoin()
            return
        self._log.info(INAUGURATING, epoch=epoch,
                       path="fast" if ctx.after_clean_handover else "recovery",
                       previous=None if previous is None else previous.replica_id)
        try:
            self._career.inaugurate(ctx)
        except Unresponsive as exc:
            # Elected while Spark (or the storage) does not answer: give the lock back now and wait out of the
            # line until the health check passes again, rather than hold a term nobody works for.
            self._log.warning(INAUGURATION_ABANDONED, epoch=epoch, reason=str(exc))
            self._health.reason = str(exc)
            self._leave_election(RunnerState.UNHEALTHY, f"unhealthy: {exc}", term_ended=True)
            return
        except (ElectionError, Fenced, NotLeader, KazooException,
                self._election.client.handler.timeout_exception) as exc:
            # The term ended, or ZooKeeper failed, before the career's term began (the career checks its
            # leadership before any step a stale leader must not take): no career failure, no back-off.
            self._log.warning(INAUGURATION_ABANDONED, epoch=epoch, reason=f"{type(exc).__name__}: {exc}")
            self._release_and_rejoin()
            return
        except Exception as exc:
            self._career_failed("inaugurate", exc)
            return
        self._term_started = self._clock()
        self._canary.term_began()
        self._terms.began(fence, ctx.previous_handover, elected_at)
        with self._stall_lock:
            self._term_open = self._stalled is None
        if granted is not None:
            self._requests.delete_handover(granted, self._election.op_timeout_s)
        self._saw_leader(self._settings.replica_id)
        self._observer.inaugurated(self._clock() - started)
        self._transition(RunnerState.LEADING)
        self._log.info(INAUGURATED, epoch=epoch, seconds=round(self._clock() - started, 3))

    def _poison(self) -> FailedBatch | None:
        """The batch this term must set aside: one that failed ``max_batch_attempts`` terms in a row."""
        failed = self._failed_batch
        if failed is None or failed.attempts < self._settings.max_batch_attempts:
            return None
        self._log.warning("setting_aside", batch=failed.batch_id, attempts=failed.attempts, error=failed.error,
                          epoch=self._epoch)
        return failed

    def _count_attempt(self, batch_id: int, error: str) -> FailedBatch:
        """One more term failed on ``batch_id``: its count in a row, carried by the handover record."""
        self._failed_batch = (self._failed_batch or FailedBatch(batch_id, 0, "")).again(batch_id, error)
        return self._failed_batch

    def _handover_record(self, *, clean: bool, last_batch: int | None, reason: str | None) -> dict[str, Any]:
        """This term's handover record; the failing-batch count is dropped once the term committed past it."""
        failed = self._failed_batch
        if failed is not None and last_batch is not None and last_batch >= failed.batch_id:
            failed = self._failed_batch = None
        return HandoverRecord(self._epoch or 0, last_batch, clean, time.time(), self._settings.replica_id,
                              reason=reason, failed_batch=failed).to_json()

    def _execute_once(self) -> bool:
        try:
            worked = self._career.execute()
            self._terms.progressed()
            self._observer.lease_headroom(self._election.lease_headroom())
            return worked
        except NotLeader as exc:
            # Suspended between the check and the commit: the Suspended event follows on the queue.
            self._log.info(EXECUTE_NOT_LEADER, epoch=self._epoch, reason=str(exc))
            return False
        except Fenced as exc:
            self._log.warning(FENCED, epoch=self._epoch, reason=str(exc))
            self._end_term(Outcome.REVOKED, "fenced")
            self._release_and_rejoin()
            return False
        except CommitOutcomeUnknown as exc:
            # A commit's reply was lost and could not be read back (from the control thread or from a batch):
            # ZooKeeper, not the career, failed. End the term without a failure back-off; the next leader's
            # inauguration recovers from what is stored.
            self._log.warning(COMMIT_OUTCOME_UNKNOWN, epoch=self._epoch, reason=str(exc))
            self._end_term(Outcome.REVOKED, "commit outcome unknown")
            self._release_and_rejoin()
            return False
        except ElectionError as exc:
            # Another ZooKeeper failure of the election (a record node deleted under us): the same end.
            self._log.warning("execute_election_error", epoch=self._epoch, reason=str(exc))
            self._end_term(Outcome.REVOKED, f"election error: {exc}")
            self._release_and_rejoin()
            return False
        except Unresponsive as exc:
            # The leader's JVM stopped answering: nothing can hand over cleanly (stopping the query is a call
            # into that JVM too). Fail-stop: the lock goes now, the JVM is killed, a supervisor restarts us.
            self.give_up(Stall(StallReason.SPARK_UNRESPONSIVE, str(exc), self._progress.batch_in_flight()))
            return False
        except BatchFailed as exc:
            self._career_failed("execute", exc, batch_id=exc.batch_id)
            return False
        except Exception as exc:
            self._career_failed("execute", exc)
            return False

    def _end_term(self, outcome: Outcome, reason: str) -> int | None:
        """Hand the career's term over and record its end; returns the career's last committed batch.

        Raises:
            _GaveUp: the term's end failed stop (or a fail-stop came first): nothing after it may run on the
                control thread, whose loop catches this and idles until the process exits.
        """
        if self._stalled is not None:  # given up earlier in this turn of the loop, or on another thread
            raise _GaveUp
        started = self._clock()
        self._log.info(HANDING_OVER, outcome=outcome.value, reason=reason, epoch=self._epoch)
        last_batch = None
        try:
            last_batch = self._career.hand_over(outcome)
        except Unresponsive as exc:
            # Spark stopped answering while the term ended (a JVM frozen under a health-gated hand-over): nothing
            # of it can be trusted to stop, so fail-stop as from a stall, which records the term's end itself.
            self.give_up(Stall(StallReason.SPARK_UNRESPONSIVE, f"while handing over: {exc}"))
        except Exception:
            self._log.exception("hand_over_failed", outcome=outcome.value, epoch=self._epoch)
        if self._failures and self._clock() - self._term_started > self._settings.failure_backoff_max_s:
            self._failures = 0  # a long healthy term forgives earlier failures
        if outcome is not Outcome.CLEAN:  # a clean handover is timed by _stop, up to the node's release
            self._observer.handover_took(self._clock() - started)
        self._observer.term_ended()
        with self._stall_lock:
            gave_up, recording = self._stalled is not None, self._term_open
            self._term_open = False
        if gave_up:
            raise _GaveUp
        if recording:
            self._terms.ended(outcome, reason)
        return last_batch

    def _release_and_rejoin(self) -> None:
        # A release that times out (cut off from ZooKeeper) leaves the node to the election's background delete
        # or the session's end; rejoining must not depend on it, or the replica stays out of the election.
        try:
            self._election.release(self._settings.handover_timeout_s)
        except TenureError:
            self._log.exception("release_failed", epoch=self._epoch)
        try:
            self._election.join()
        except TenureError:
            self._log.exception("rejoin_failed", epoch=self._epoch)
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
        self._failures += 1
        self._observer.career_failed()
        self._log.error(CAREER_FAILED, phase=phase, epoch=self._epoch, failures=self._failures,
                        batch=batch_id, exc_info=exc)
        ended = f"{phase} raised {type(exc).__name__}"
        last_batch = self._end_term(Outcome.FAILED, ended)
        if batch_id is not None and self._zk_connected:
            failed = self._count_attempt(batch_id, f"{type(exc).__name__}: {exc}")
            self._log.warning(BATCH_ATTEMPT_FAILED, batch=batch_id, attempts=failed.attempts,
                              max_attempts=self._settings.max_batch_attempts, epoch=self._epoch)
            self._write_handover(clean=False, last_batch=last_batch, reason=f"{ended} on batch {batch_id}")
        delay = min(self._settings.failure_backoff_s * 2 ** (self._failures - 1), self._settings.failure_backoff_max_s)
        try:
            self._election.release(self._settings.handover_timeout_s)
        except TenureError:
            self._log.exception("release_failed", epoch=self._epoch)
        self._rejoin_at = self._clock() + delay
        self._log.warning(BACKING_OFF, seconds=delay, failures=self._failures)
        self._transition(RunnerState.BACKING_OFF)

    def _hand_over_cleanly(self, reason: str) -> None:
        """End the term CLEAN and leave the handover record saying so (the node's release follows)."""
        last_batch = self._end_term(Outcome.CLEAN, reason)
        self._write_handover(clean=True, last_batch=last_batch, reason=None)

    def _write_handover(self, *, clean: bool, last_batch: int | None, reason: str | None) -> None:
        """Write the term's handover record; a ZooKeeper error is logged and the term's end goes on (the
        successor then takes the recovery path: the record still says clean=False)."""
        try:
            self._election.write_handover(self._handover_record(clean=clean, last_batch=last_batch, reason=reason))
            self._log.info(HANDOVER_RECORDED, clean=clean, last_batch=last_batch, epoch=self._epoch)
        except self._zookeeper_errors() as exc:
            self._log.warning(HANDOVER_RECORD_NOT_WRITTEN, reason=f"{type(exc).__name__}: {exc}",
                              epoch=self._epoch)

    def _handover_requested(self, request: HandoverRequest) -> None:
        """An operator asked this term to hand over (to a named replica, or the next in line): hand over
        cleanly, then rejoin at the back of the line (``HandoverRequests.honour`` says which requests count)."""
        if not self._handovers.honour(request, self._state, self._epoch):
            return
        started = self._clock()
        self._log.info(HANDOVER_REQUESTED, to=request.to, epoch=self._epoch)
        self._hand_over_cleanly(f"handover requested to {request.to or 'the next in line'}")
        self._observer.handover_took(self._clock() - started)
        self._release_and_rejoin()

    def _canary_handover(self) -> None:
        """Hand over on schedule to the next follower in line, so its successor's first commit tests the
        standby (``CanarySchedule``)."""
        self._canary.fired()
        try:
            successor = CanarySchedule.successor(self._election.contenders())
        except self._zookeeper_errors() as exc:
            self._log.warning(CANARY_SKIPPED, reason=f"the line is unreadable: {type(exc).__name__}: {exc}")
            return
        if successor is None:
            self._log.info(CANARY_SKIPPED, reason="no follower in line")
            return
        started = self._clock()
        self._log.info(CANARY_HANDOVER, to=successor, epoch=self._epoch)
        self._hand_over_cleanly(CANARY)
        self._observer.handover_took(self._clock() - started)
        self._release_and_rejoin()

    def _pending_handover(self, epoch: int) -> PendingHandover:
        """Before a term of ``epoch`` begins: step aside for a handover request's target, or grant it
        (``HandoverRequests.before_term``); an unreadable request is none."""
        try:
            return self._handovers.before_term(epoch, self._election.contenders, self._election.op_timeout_s)
        except self._zookeeper_errors() as exc:
            self._log.warning("handover_request_unread", reason=f"{type(exc).__name__}: {exc}")
            return PendingHandover(False, None)

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
        self._hand_over_and_release(reason, was_leading)
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
        if not self._hand_over_and_release(reason, was_leading):
            self._exit_code = 1
        if was_leading:
            self._log.info(HANDED_OVER, epoch=self._epoch, seconds=round(self._clock() - started, 3))
        self._transition(RunnerState.STOPPED)

    def _hand_over_and_release(self, reason: str, was_leading: bool) -> bool:
        """Hand over cleanly when ``was_leading``, then release the election node (the observer is told how long
        both took); returns whether the release succeeded."""
        started = self._clock()
        if was_leading:
            self._hand_over_cleanly(reason)
        try:
            self._election.release(self._settings.handover_timeout_s)
            released = True
        except TenureError:
            self._log.exception("release_failed", epoch=self._epoch)
            released = False
        if was_leading:
            self._observer.handover_took(self._clock() - started)
        return released

    # -- fail-stop ---------------------------------------------------------------------------------------------

    def give_up(self, stall: Stall) -> None:
        """Give the lock up at once and have the process exit (``ProcessControl.exit_stalled``); from any thread,
        once.

        The work runs on a thread of its own, so a caller on the control thread, the watchdog or a kazoo thread
        returns at once, and the control loop, if it still runs, does no more work meanwhile.
        """
        with self._stall_lock:
            if self._stalled is not None:
                return
            self._stalled = stall
            recording, self._term_open = self._term_open, False  # the control thread no longer records it
        threading.Thread(target=self._fail_stop, args=(stall, recording), name="tenure-fail-stop",
                         daemon=True).start()

    def _fail_stop(self, stall: Stall, recording: bool) -> None:
        """1. Record why (the handover record and the term history, as far as ZooKeeper answers in time).
        2. Close the ZooKeeper session: the election node goes now, not a session timeout later, and the
           successor hears at once.
        3. The process kills the Spark JVM and its Python workers (on a cluster, the application's cores are
           freed with the driver) and exits non-zero, for the supervisor to restart the replica as a warm
           follower.

        Whatever the stalled work still does is harmless: a batch that wakes commits through the fence, which
        checks the election node that step 2 deleted; its staging and checkpoint are its own term's; and by
        step 3 no process of it is left.
        """
        self._observer.stalled(stall.reason)
        self._log.error(STALLED, reason=stall.reason.value, detail=stall.detail, batch=stall.batch_id,
                        epoch=self._epoch, state=self._state.value)
        if recording:
            try:
                call_within(lambda: self._record_stall(stall), 3 * self._election.op_timeout_s, "recording the stall")
            except Exception as exc:  # the session's close below is what matters
                self._log.warning("stall_not_recorded", reason=f"{type(exc).__name__}: {exc}", epoch=self._epoch)
        self._log.error("exiting_after_stall", reason=stall.reason.value)
        self.close_session()
        self._process.exit_stalled()

    def close_session(self) -> None:
        """Close the ZooKeeper session, under a deadline: the election node goes now, and the successor hears at
        once (from any thread; what follows, killing the JVM and exiting, is the process's)."""
        try:
            call_within(self._election.client.stop, self._election.op_timeout_s, "closing the ZooKeeper session")
        except Exception as exc:  # the node then goes when the session expires
            self._log.warning("session_not_closed", reason=f"{type(exc).__name__}: {exc}")

    def _record_stall(self, stall: Stall) -> None:
        """The stall in the handover record (a batch it blames counts one attempt) and in the term history."""
        if stall.reason.counts_against_batch and stall.batch_id is not None:
            self._count_attempt(stall.batch_id, stall.describe())
        self._election.write_handover(self._handover_record(clean=False, last_batch=None,
                                                            reason=f"stalled: {stall.describe()}"))
        self._terms.ended(Outcome.STALLED, stall.describe())
