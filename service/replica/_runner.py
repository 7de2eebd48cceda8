"""The runner: one control thread that drives a career from leadership events, signals and timers.

Every input — election events (posted from the election's thread), signals, the clock — arrives on one
bounded queue, and only the control thread changes the runner's state (the seeds' singular update queue).
One module past 400 lines on purpose: the loop and the handlers of every event — election, signal, operator
request, health — share the runner's state, and reading them side by side is how a reader checks that every state
answers every event (the states and their transitions are in ``_runner_states.py``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import structlog
from kazoo.exceptions import KazooException

from career import BatchFailed, Career, CareerContext, FailedBatch, HandoverRecord, Outcome, call_within
from election import (
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
from service.replica._health import Health
from service.replica._metrics import Metrics
from service.replica._proctree import tree_pids
from service.replica._progress import Progress
from service.replica._requests import DrainChanged, HandoverRequested, OperatorRequests
from service.replica._runner_states import TRANSITIONS, RunnerSettings, RunnerState
from service.replica._stall import Stall, StallReason
from service.replica._term_record import CANARY, TermRecorder
from service.replica._watchdog import StallLimits, Watchdog

__all__ = ["EXIT_HANDOVER_OVERRUN", "EXIT_STALLED", "Runner"]

_log = structlog.get_logger("tenure.runner")

EXIT_HANDOVER_OVERRUN = 3
EXIT_STALLED = 4
"""The exit code of a replica that gave its lock up because its work stopped progressing (a supervisor restarts
it: `tenure up`, compose's ``restart: on-failure``)."""
#: Past the handover budget, time for the handover record and the node's release (two ZooKeeper writes).
_HANDOVER_GRACE_S = 2.0
#: How often the runner asks the career whether it can work (``Career.unhealthy``).
_HEALTH_EVERY_S = 2.0


@dataclass(frozen=True)
class _Signal:
    signum: int


_Event = ElectionEvent | _Signal | DrainChanged | HandoverRequested


class Runner:
    """Drives ``career`` while ``election`` says this replica leads.

    A progress watchdog on a thread of its own (``_watchdog``) gives the lock up when the loop stops coming
    round or the leader stops finishing batches while input waits; so does the loop itself when Spark stops
    answering, and a full event queue: :meth:`give_up` closes the ZooKeeper session (the node goes now), kills
    the JVM and exits with :data:`EXIT_STALLED`.

    Example::

        progress = Progress(metrics, liveness_timeout_s=30)     # the career's observer
        runner = Runner(election_factory, career, metrics, RunnerSettings(replica_id="r1"), progress=progress)
        exit_code = runner.run()     # blocks; SIGTERM = graceful handover, then 0
    """

    def __init__(self, election_factory: Callable[[Callable[[ElectionEvent], None]], Election], career: Career,
                 metrics: Metrics, settings: RunnerSettings, *, progress: Progress,
                 clock: Callable[[], float] = time.monotonic, queue_size: int = 1024) -> None:
        self._events: queue.Queue[_Event] = queue.Queue(maxsize=queue_size)
        self._election = election_factory(self._post)
        self._career = career
        self._metrics = metrics
        self._settings = settings
        self._clock = clock
        self._state = RunnerState.STARTING
        self._epoch: int | None = None
        self._zk_connected = False
        self._term_started = 0.0
        self._failures = 0
        self._rejoin_at = 0.0
        self._progress = progress
        self._stall_lock = threading.Lock()
        self._stalled: Stall | None = None
        self._failed_batch: FailedBatch | None = None  # this term's view of the batch failing terms in a row
        self._stop_signals = 0
        self._exit_code = 0
        self._watchdog: threading.Timer | None = None
        self._log = _log.bind(replica_id=settings.replica_id, group=self._election.group)
        self._terms = TermRecorder(self._election.history, metrics, settings.replica_id, self._log,
                                   (self._election.client.handler.timeout_exception,))
        self._seen_leader: str | None = None
        self._requests = OperatorRequests(self._election.client, self._election.paths, settings.replica_id,
                                          self._post, clock)
        self._drain_request: DrainRequest | None = None
        self._unhealthy_reason: str | None = None
        self._next_health_check = 0.0
        self._next_canary = 0.0

    @property
    def state(self) -> RunnerState:
        return self._state

    # -- inputs: these run on other threads and only post --------------------------------------------------

    def _post(self, event: _Event) -> None:
        try:
            self._events.put_nowait(event)
        except queue.Full:
            # Dropping an event (a Revoked, an Elected) would leave the runner and the election out of step for
            # good, and a full queue means the control thread is not reading it: fail-stop instead.
            self.give_up(Stall(StallReason.EVENT_QUEUE_FULL,
                               f"the event queue is full ({self._events.maxsize} events); "
                               f"{type(event).__name__} could not be queued"))

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._stop_signals += 1
        if self._state is RunnerState.STARTING:
            # Still warming up, not in the election: nothing to hand over, and prepare() cannot be interrupted.
            # Spark's JVM exits with us (its gateway watches our stdin).
            self._log.info("stopped_while_starting", signal=signal.Signals(signum).name)
            os._exit(0)
        if self._stop_signals > 1:
            self._log.warning("second_signal_exit", signal=signal.Signals(signum).name)
            os._exit(128 + signum)
        # The budget covers finishing the execute() in flight and the whole handover. The career may spend all
        # of handover_timeout_s waiting for its batch; the grace is for what follows it (record, release).
        self._watchdog = threading.Timer(self._settings.handover_timeout_s + _HANDOVER_GRACE_S,
                                         self._handover_overrun)
        self._watchdog.daemon = True
        self._watchdog.start()
        self._post(_Signal(signum))

    def _handover_overrun(self) -> None:
        """The graceful handover ran past its budget: close the session so the successor hears now, not a session
        timeout later, and exit (the supervisor's restart brings the replica back as a follower)."""
        self._log.error("handover_overrun", timeout_s=self._settings.handover_timeout_s, state=self._state.value)
        self._close_and_exit(EXIT_HANDOVER_OVERRUN)

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT hand over gracefully; a second one exits at once (main thread only)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    # -- health ------------------------------------------------------------------------------------------------

    def health(self) -> Health:
        """A snapshot for /livez, /readyz and /leader (safe to call from the HTTP threads)."""
        reasons = []
        stalled = self._stalled
        live = self._progress.loop_age() < self._settings.liveness_timeout_s and stalled is None
        if stalled is not None:
            reasons.append(f"stalled: {stalled.describe()}")
        elif not live:
            reasons.append("control loop stalled")
        if not self._zk_connected:
            reasons.append("ZooKeeper disconnected")
        in_election = self._state in (RunnerState.FOLLOWING, RunnerState.LEADING, RunnerState.PAUSED)
        drained = self._drain_request
        if drained is not None and self._state is RunnerState.DRAINED:
            reasons.append(f"drained: {drained.reason or 'no reason given'} (since "
                           f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(drained.since))})")
        elif self._state is RunnerState.UNHEALTHY:
            reasons.append(f"unhealthy: {self._unhealthy_reason}")
        elif not in_election:
            reasons.append(f"not in the election ({self._state.value})")
        career_ready = self._career.ready()
        if not career_ready:
            reasons.append("career not ready (warming up)")
        leader = (live and self._state is RunnerState.LEADING and self._election.is_leader()
                  and self._election.epoch == self._epoch)
        return Health(live=live, ready=live and self._zk_connected and in_election and career_ready,
                      leader=leader, role=self._state.value, epoch=self._epoch, reasons=reasons)

    # -- the control loop --------------------------------------------------------------------------------------

    def run(self) -> int:
        """Prepare, join, lead when elected, and return the exit code once stopped."""
        self._log.info("runner_starting")
        self._career.prepare()
        if self._stop_signals:
            self._transition(RunnerState.STOPPING)
            self._transition(RunnerState.STOPPED)
            return 0
        try:
            self._drain_request = self._requests.drain(self._election.op_timeout_s)
        except self._zookeeper_errors() as exc:  # the watch below tells the truth once ZooKeeper answers
            self._log.warning("drain_state_unknown", reason=f"{type(exc).__name__}: {exc}")
        self._election.start(join=self._drain_request is None)
        if self._drain_request is None:
            self._transition(RunnerState.FOLLOWING)
        else:
            self._log.info("drained", reason=self._drain_request.reason, at_start=True)
            self._transition(RunnerState.DRAINED)
        self._requests.watch()
        self._progress.tick()
        watchdog = Watchdog(self._progress, StallLimits(self._settings.stall_timeout_s,
                                                        self._settings.first_batch_allowance_s), self.give_up)
        watchdog.start()
        while self._state is not RunnerState.STOPPED:
            self._progress.tick()
            now = self._clock()
            if self._stalled is not None:  # giving up on another thread: no more work, the process exits
                self._wait(self._settings.tick_s)
                continue
            if now >= self._next_health_check:
                self._next_health_check = now + _HEALTH_EVERY_S
                self._check_career_health()
            if self._state is RunnerState.LEADING:
                self._drain()
                if self._state is RunnerState.LEADING and self._canary_due():
                    self._canary_handover()
                elif self._state is RunnerState.LEADING and not self._execute_once():
                    self._wait(self._settings.idle_backoff_s)
            else:
                self._wait(self._settings.tick_s)
            if self._state is RunnerState.BACKING_OFF and self._clock() >= self._rejoin_at:
                self._log.info("rejoining", failures=self._failures)
                self._election.join()
                self._transition(RunnerState.FOLLOWING)
        watchdog.stop()
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._election.close()
        self._career.close()
        return self._exit_code

    def _wait(self, timeout_s: float) -> None:
        try:
            event = self._events.get(timeout=timeout_s)
        except queue.Empty:
            return
        self._handle(event)
        self._drain()

    def _drain(self) -> None:
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
        self._log.info("runner_state", old=self._state.value, new=new.value, epoch=self._epoch)
        old, self._state = self._state, new
        leading = new is RunnerState.LEADING
        self._progress.working(leading, new_term=leading and old is RunnerState.FOLLOWING)
        self._metrics.is_leader.set(1 if leading else 0)
        self._metrics.leader_epoch.set(self._epoch if leading and self._epoch is not None else 0)

    def _handle(self, event: _Event) -> None:
        match event:
            case _Signal(signum=signum):
                self._stop(signal.Signals(signum).name)
            case ConnectionChanged(connected=connected):
                self._zk_connected = connected
                self._metrics.zk_connected.set(1 if connected else 0)
            case Elected(epoch=epoch):
                if self._state is RunnerState.FOLLOWING:
                    self._inaugurate(epoch)
            case Suspended(reason=reason):
                if self._state is RunnerState.LEADING:
                    self._log.warning("leadership_suspended", reason=reason, epoch=self._epoch)
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
                self._metrics.leader_changes.inc()
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
        with self._progress.allowing(self._settings.first_batch_allowance_s):
            self._begin_term(epoch)

    def _begin_term(self, epoch: int) -> None:
        started = self._clock()
        elected_at = time.time()
        current = self._election.epoch
        if current != epoch:
            # Queued before the election lost that term (and perhaps won another): its Revoked, and the new
            # term's own Elected, are behind it on the queue. Starting a term here would pair this epoch with
            # the newer term's fence.
            self._log.info("stale_elected_ignored", epoch=epoch, current_epoch=current)
            return
        step_aside, granted = self._pending_handover(epoch)
        if step_aside:
            self._log.info("deferred_to_handover_target", epoch=epoch)
            self._release_and_rejoin()
            return
        self._epoch = epoch
        try:
            fence = self._election.fence()  # the fence carries the epoch of the term it was read in
            if fence.epoch != epoch:
                self._log.info("stale_elected_ignored", epoch=epoch, current_epoch=fence.epoch)
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
            self._log.warning("inauguration_abandoned", epoch=epoch, reason=f"{type(exc).__name__}: {exc}")
            self._release_and_rejoin()
            return
        self._log.info("inaugurating", epoch=epoch,
                       path="fast" if ctx.after_clean_handover else "recovery",
                       previous=None if previous is None else previous.replica_id)
        try:
            self._career.inaugurate(ctx)
        except Unresponsive as exc:
            # Elected while Spark (or the storage) does not answer: give the lock back now and wait out of the
            # line until the health check passes again, rather than hold a term nobody works for.
            self._log.warning("inauguration_abandoned", epoch=epoch, reason=str(exc))
            self._unhealthy_reason = str(exc)
            self._leave_election(RunnerState.UNHEALTHY, f"unhealthy: {exc}", term_ended=True)
            return
        except (ElectionError, Fenced, NotLeader, KazooException,
                self._election.client.handler.timeout_exception) as exc:
            # The term ended, or ZooKeeper failed, before the career's term began (the career checks its
            # leadership before any step a stale leader must not take): no career failure, no back-off.
            self._log.warning("inauguration_abandoned", epoch=epoch, reason=f"{type(exc).__name__}: {exc}")
            self._release_and_rejoin()
            return
        except Exception as exc:
            self._career_failed("inaugurate", exc)
            return
        self._term_started = self._clock()
        if self._settings.canary_handover_every_s is not None:
            self._next_canary = self._term_started + self._settings.canary_handover_every_s
        self._terms.began(fence, ctx.previous_handover, elected_at)
        if granted is not None:
            self._requests.delete_handover(granted, self._election.op_timeout_s)
        self._saw_leader(self._settings.replica_id)
        self._metrics.inauguration_seconds.observe(self._clock() - started)
        self._metrics.leadership_changes.inc()
        self._transition(RunnerState.LEADING)
        self._log.info("inaugurated", epoch=epoch, seconds=round(self._clock() - started, 3))

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
            self._metrics.lease_headroom.set(self._election.lease_headroom())
            return worked
        except NotLeader as exc:
            # Suspended between the check and the commit: the Suspended event follows on the queue.
            self._log.info("execute_not_leader", epoch=self._epoch, reason=str(exc))
            return False
        except Fenced as exc:
            self._log.warning("fenced", epoch=self._epoch, reason=str(exc))
            self._end_term(Outcome.REVOKED, "fenced")
            self._release_and_rejoin()
            return False
        except CommitOutcomeUnknown as exc:
            # A commit's reply was lost and could not be read back (from the control thread or from a batch):
            # ZooKeeper, not the career, failed. End the term without a failure back-off; the next leader's
            # inauguration recovers from what is stored.
            self._log.warning("commit_outcome_unknown", epoch=self._epoch, reason=str(exc))
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
            self.give_up(Stall(StallReason.SPARK_UNRESPONSIVE, str(exc), self._progress.view().in_flight))
            return False
        except BatchFailed as exc:
            self._career_failed("execute", exc, batch_id=exc.batch_id)
            return False
        except Exception as exc:
            self._career_failed("execute", exc)
            return False

    def _end_term(self, outcome: Outcome, reason: str) -> int | None:
        started = self._clock()
        self._log.info("handing_over", outcome=outcome.value, reason=reason, epoch=self._epoch)
        last_batch = None
        try:
            last_batch = self._career.hand_over(outcome)
        except Unresponsive as exc:
            # Spark stopped answering while the term ended (a JVM frozen under a health-gated hand-over): nothing
            # of it can be trusted to stop, so fail-stop as from a stall; the term's end below still goes on.
            self.give_up(Stall(StallReason.SPARK_UNRESPONSIVE, f"while handing over: {exc}"))
        except Exception:
            self._log.exception("hand_over_failed", outcome=outcome.value, epoch=self._epoch)
        if self._failures and self._clock() - self._term_started > self._settings.failure_backoff_max_s:
            self._failures = 0  # a long healthy term forgives earlier failures
        if outcome is not Outcome.CLEAN:  # a clean handover is timed by _stop, up to the node's release
            self._metrics.handover_seconds.observe(self._clock() - started)
        self._terms.ended(outcome, reason)
        self._metrics.lease_headroom.set(0)
        self._metrics.leadership_changes.inc()
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
        reason = self._career_health()
        if reason is not None:
            # The career failed because its storage (or Spark) did: no fault of the career, so no back-off
            # counting towards it; out of the election until it heals (the successor recovers the term).
            self._unhealthy_reason = reason
            self._log.warning("career_failed_unhealthy", phase=phase, reason=reason,
                              error=f"{type(exc).__name__}: {exc}", epoch=self._epoch)
            self._end_term(Outcome.FAILED, f"{phase} raised {type(exc).__name__} while unhealthy: {reason}")
            self._leave_election(RunnerState.UNHEALTHY, f"unhealthy: {reason}", term_ended=True)
            return
        self._failures += 1
        self._metrics.career_failures.inc()
        self._log.error("career_failed", phase=phase, epoch=self._epoch, failures=self._failures,
                        batch=batch_id, exc_info=exc)
        ended = f"{phase} raised {type(exc).__name__}"
        last_batch = self._end_term(Outcome.FAILED, ended)
        if batch_id is not None and self._zk_connected:
            failed = self._count_attempt(batch_id, f"{type(exc).__name__}: {exc}")
            self._log.warning("batch_attempt_failed", batch=batch_id, attempts=failed.attempts,
                              max_attempts=self._settings.max_batch_attempts, epoch=self._epoch)
            self._write_handover(clean=False, last_batch=last_batch, reason=f"{ended} on batch {batch_id}")
        delay = min(self._settings.failure_backoff_s * 2 ** (self._failures - 1), self._settings.failure_backoff_max_s)
        try:
            self._election.release(self._settings.handover_timeout_s)
        except TenureError:
            self._log.exception("release_failed", epoch=self._epoch)
        self._rejoin_at = self._clock() + delay
        self._log.warning("backing_off", seconds=delay, failures=self._failures)
        self._transition(RunnerState.BACKING_OFF)

    def _hand_over_cleanly(self, reason: str) -> None:
        """End the term CLEAN and leave the handover record saying so (the node's release follows)."""
        last_batch = self._end_term(Outcome.CLEAN, reason)
        if self._stalled is None:  # a fail-stop records the term's end itself
            self._write_handover(clean=True, last_batch=last_batch, reason=None)

    def _write_handover(self, *, clean: bool, last_batch: int | None, reason: str | None) -> None:
        """Write the term's handover record; a ZooKeeper error is logged and the term's end goes on (the
        successor then takes the recovery path: the record still says clean=False)."""
        try:
            self._election.write_handover(self._handover_record(clean=clean, last_batch=last_batch, reason=reason))
            self._log.info("handover_recorded", clean=clean, last_batch=last_batch, epoch=self._epoch)
        except self._zookeeper_errors() as exc:
            self._log.warning("handover_record_not_written", reason=f"{type(exc).__name__}: {exc}",
                              epoch=self._epoch)

    def _handover_requested(self, request: HandoverRequest) -> None:
        """An operator asked this term to hand over (to a named replica, or the next in line): hand over
        cleanly, then rejoin at the back of the line. Requests for other terms, or expired, are ignored."""
        if (self._state not in (RunnerState.LEADING, RunnerState.PAUSED) or request.epoch != self._epoch
                or not self._requests.live(request) or request.to == self._settings.replica_id):
            return
        started = self._clock()
        self._log.info("handover_requested", to=request.to, epoch=self._epoch)
        self._hand_over_cleanly(f"handover requested to {request.to or 'the next in line'}")
        self._metrics.handover_seconds.observe(self._clock() - started)
        self._release_and_rejoin()

    def _canary_due(self) -> bool:
        every = self._settings.canary_handover_every_s
        return every is not None and self._clock() >= self._next_canary

    def _canary_handover(self) -> None:
        """Hand over on schedule to the next follower in line (every follower in line is warm and healthy: it
        joined after warming up and leaves when unhealthy), so its successor's first commit tests the standby."""
        every = self._settings.canary_handover_every_s
        assert every is not None
        self._next_canary = self._clock() + every
        try:
            followers = [c.identity.replica_id for c in self._election.contenders()[1:] if c.identity is not None]
        except self._zookeeper_errors() as exc:
            self._log.warning("canary_skipped", reason=f"the line is unreadable: {type(exc).__name__}: {exc}")
            return
        if not followers:
            self._log.info("canary_skipped", reason="no follower in line")
            return
        started = self._clock()
        self._log.info("canary_handover", to=followers[0], epoch=self._epoch)
        self._hand_over_cleanly(CANARY)
        self._metrics.handover_seconds.observe(self._clock() - started)
        self._release_and_rejoin()

    def _pending_handover(self, epoch: int) -> tuple[bool, HandoverRequest | None]:
        """Before a term of ``epoch`` begins, the live handover request made to an earlier term: (step aside,
        request granted). Step aside when it names another replica that is in the election; otherwise this term
        grants it and deletes it once inaugurated."""
        try:
            request = self._requests.handover(self._election.op_timeout_s)
            if request is None or request.epoch >= epoch or not self._requests.live(request):
                return False, None
            if request.to in (None, self._settings.replica_id):
                return False, request
            in_line = {c.identity.replica_id for c in self._election.contenders() if c.identity is not None}
        except self._zookeeper_errors() as exc:
            self._log.warning("handover_request_unread", reason=f"{type(exc).__name__}: {exc}")
            return False, None
        return request.to in in_line, None

    def _check_career_health(self) -> None:
        """Leave the election while the career cannot work (handing over first when leading), rather than fail
        its batches; rejoin once it can. A drained replica stays drained."""
        reason = self._career_health()
        self._unhealthy_reason = reason
        if reason is not None and self._state in (RunnerState.FOLLOWING, RunnerState.LEADING, RunnerState.PAUSED,
                                                  RunnerState.BACKING_OFF):
            self._leave_election(RunnerState.UNHEALTHY, f"unhealthy: {reason}")
        elif reason is None and self._state is RunnerState.UNHEALTHY:
            self._log.info("healthy_again")
            self._election.join()
            self._transition(RunnerState.FOLLOWING)

    def _career_health(self) -> str | None:
        """``Career.unhealthy()``: why the career cannot work now, or None."""
        check = getattr(self._career, "unhealthy", None)  # a career of one's own from before the check: healthy
        try:
            return check() if check is not None else None
        except Exception as exc:  # a health check that raises says the career is not well
            return f"the health check raised {type(exc).__name__}: {exc}"

    def _leave_election(self, to: RunnerState, reason: str, *, term_ended: bool = False) -> None:
        """Hand over cleanly when leading (unless the term already ended), release the node, and wait out of the
        election in state ``to``."""
        started = self._clock()
        was_leading = self._state in (RunnerState.LEADING, RunnerState.PAUSED) and not term_ended
        if was_leading:
            self._hand_over_cleanly(reason)
        try:
            self._election.release(self._settings.handover_timeout_s)
        except TenureError:
            self._log.exception("release_failed", epoch=self._epoch)
        if was_leading:
            self._metrics.handover_seconds.observe(self._clock() - started)
        self._log.warning("left_election", reason=reason, state=to.value, was_leading=was_leading,
                          epoch=self._epoch)
        self._transition(to)

    def _drain_changed(self, request: DrainRequest | None) -> None:
        """Leave the election when drained (handing over first when leading); join again when undrained."""
        self._drain_request = request
        if request is not None and self._state in (RunnerState.FOLLOWING, RunnerState.LEADING, RunnerState.PAUSED,
                                                   RunnerState.BACKING_OFF, RunnerState.UNHEALTHY):
            was_leading = self._state in (RunnerState.LEADING, RunnerState.PAUSED)
            self._log.info("drained", reason=request.reason, was_leading=was_leading, epoch=self._epoch)
            if self._state is RunnerState.UNHEALTHY:
                self._transition(RunnerState.DRAINED)
            else:
                self._leave_election(RunnerState.DRAINED, f"drained: {request.reason}")
        elif request is None and self._state is RunnerState.DRAINED:
            self._log.info("undrained")
            if self._unhealthy_reason is not None:
                self._transition(RunnerState.UNHEALTHY)
            else:
                self._election.join()
                self._transition(RunnerState.FOLLOWING)

    def _stop(self, reason: str) -> None:
        started = self._clock()
        was_leading = self._state in (RunnerState.LEADING, RunnerState.PAUSED)
        self._transition(RunnerState.STOPPING)
        if was_leading:
            self._hand_over_cleanly(reason)
        try:
            self._election.release(self._settings.handover_timeout_s)
        except TenureError:
            self._log.exception("release_failed", epoch=self._epoch)
            self._exit_code = 1
        if was_leading:
            self._metrics.handover_seconds.observe(self._clock() - started)
            self._log.info("handed_over", epoch=self._epoch, seconds=round(self._clock() - started, 3))
        self._transition(RunnerState.STOPPED)

    # -- fail-stop ---------------------------------------------------------------------------------------------

    def give_up(self, stall: Stall) -> None:
        """Give the lock up at once and exit with :data:`EXIT_STALLED`; from any thread, once.

        The work runs on a thread of its own, so a caller on the control thread, the watchdog or a kazoo thread
        returns at once, and the control loop, if it still runs, does no more work meanwhile.
        """
        with self._stall_lock:
            if self._stalled is not None:
                return
            self._stalled = stall
        threading.Thread(target=self._fail_stop, args=(stall,), name="tenure-fail-stop", daemon=True).start()

    def _fail_stop(self, stall: Stall) -> None:
        """1. Record why (the handover record and the term history, as far as ZooKeeper answers in time).
        2. Close the ZooKeeper session: the election node goes now, not a session timeout later, and the
           successor hears at once.
        3. Kill the Spark JVM and its Python workers (on a cluster, the application's cores are freed with the
           driver).
        4. Exit non-zero, for the supervisor to restart the replica as a warm follower.

        Whatever the stalled work still does is harmless: a batch that wakes commits through the fence, which
        checks the election node that step 2 deleted; its staging and checkpoint are its own term's; and by
        step 4 no process of it is left.
        """
        self._metrics.stalls.labels(stall.reason.value).inc()
        self._log.error("stalled", reason=stall.reason.value, detail=stall.detail, batch=stall.batch_id,
                        epoch=self._epoch, state=self._state.value)
        if self._state in (RunnerState.LEADING, RunnerState.PAUSED) and self._epoch is not None:
            try:
                call_within(lambda: self._record_stall(stall), 3 * self._election.op_timeout_s, "recording the stall")
            except Exception as exc:  # the session's close below is what matters
                self._log.warning("stall_not_recorded", reason=f"{type(exc).__name__}: {exc}", epoch=self._epoch)
        self._log.error("exiting_after_stall", exit_code=EXIT_STALLED, reason=stall.reason.value)
        self._close_and_exit(EXIT_STALLED)

    def _close_and_exit(self, code: int) -> None:
        """Close the ZooKeeper session (the election node goes now), SIGKILL the Spark JVM and its Python workers
        (children first; on a cluster the application's cores go with the driver), and exit with ``code``."""
        try:
            call_within(self._election.client.stop, self._election.op_timeout_s, "closing the ZooKeeper session")
        except Exception as exc:  # the node then goes when the session expires
            self._log.warning("session_not_closed", reason=f"{type(exc).__name__}: {exc}")
        for pid in reversed(tree_pids(os.getpid())[1:]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        sys.stderr.flush()
        os._exit(code)

    def _record_stall(self, stall: Stall) -> None:
        """The stall in the handover record (a batch it blames counts one attempt) and in the term history."""
        if stall.reason.counts_against_batch and stall.batch_id is not None:
            self._count_attempt(stall.batch_id, stall.describe())
        self._election.write_handover(self._handover_record(clean=False, last_batch=None,
                                                            reason=f"stalled: {stall.describe()}"))
        self._terms.ended(Outcome.STALLED, stall.describe())
