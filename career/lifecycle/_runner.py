"""The runner: one control thread that drives the careers of a replica's queues from leadership events, stop requests
and timers.

Every input — each queue's election events (posted from its election's thread, each carrying its queue), a stop
request, operators' requests, a queue's stall, the clock — arrives on one bounded queue, and only the control thread
changes the runner's state (the seeds' singular update queue): the replica's (in or out of every line) and each
seat's (its place in one queue's line, ``_seat.py``). One turn of the loop executes each leading seat's career once.
The loop and the handlers of every event are here, sharing that state, so a reader checks side by side that every
state answers every event. What a term's steps mean lives beside it: its beginning (``_inauguration.py``), a unit of
its work (``_execution.py``) and its end (``_term_end.py``) each answer with the step to take; the states and their
transitions are in ``_states.py``; the policies the loop consults (canary, drain, the health gate, handover
requests, the failure back-off), the fail-stop and the poison-batch count each in a module of their own. The
elections reach the runner through the ``Leadership`` port, and what the process does (metrics, the watchdog,
signals, killing the JVM) through the others (``_ports.py``).
"""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable, Sequence

import structlog

from tenure.career._protocol import Career, Outcome, Standby
from tenure.career.lifecycle._attempts import BatchAttempts
from tenure.career.lifecycle._balance import Balance
from tenure.career.lifecycle._canary import CANARY, CanarySchedule
from tenure.career.lifecycle._drain import DrainPolicy, DrainStep
from tenure.career.lifecycle._events import (
    BalanceChanged,
    DrainChanged,
    HandoverRequested,
    QueueStalled,
    RunnerEvent,
    StopRequested,
)
from tenure.career.lifecycle._execution import Work
from tenure.career.lifecycle._fail_stop import FailStop, GaveUp, QueueRecords
from tenure.career.lifecycle._health_gate import HealthGate, HealthStep
from tenure.career.lifecycle._inauguration import Start
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
    LEFT_LINE_AT_CAP,
    QUEUE_STALLED,
    RUNNER_LOGGER,
    RUNNER_STARTING,
    RUNNER_STATE,
)
from tenure.career.lifecycle._ports import (
    BalanceSource,
    Leadership,
    LoopProgress,
    ProcessControl,
    RequestSource,
    RunnerHealth,
    RunnerObserver,
    SeatHealth,
    TermJournal,
)
from tenure.career.lifecycle._seat import Seat
from tenure.career.lifecycle._stall import Stall, StallReason
from tenure.career.lifecycle._states import (
    REPLICA_TRANSITIONS,
    SEAT_TRANSITIONS,
    ReplicaState,
    Role,
    RunnerSettings,
    SeatState,
    role_of,
)
from tenure.election import (
    ConnectionChanged,
    DrainRequest,
    Elected,
    ElectionEvent,
    Following,
    HandoverRequest,
    Member,
    Resumed,
    Revoked,
    Suspended,
)
from tenure.errors import TenureError

__all__ = ["Runner"]

_log = structlog.get_logger(RUNNER_LOGGER)


class Runner:
    """Drives each queue's career while that queue's election (``Leadership``) says this replica leads it.

    The replica's standby is prepared once, before any line is joined; each queue has a seat (``Seat``): its
    election, its career, its state. Drain and the health gate act on the replica, every seat at once; handover
    requests, the canary, the failure back-off and the poison-batch count act on one seat. With
    ``max_queues_led``, a replica leading that many queues leaves the lines of the others and joins them again once
    it leads fewer. With ``balance`` (the group's members and lines, ``tenure.election.Membership``), the replica
    keeps a member node while it is active and moves the queues it leads that the balance's plan gives to another
    member, one at a time (``Balance``).

    A progress watchdog on a thread of the process (``ProcessControl``) revokes the term of a queue that stops
    finishing batches while input waits (:meth:`revoke_stalled`; in a group of one queue it gives the lock up as
    below), and gives every lock up when the loop stops coming round; so does the loop itself when Spark stops
    answering, and a full event queue: :meth:`give_up` records why, closes the ZooKeeper session (every node goes
    now) and has the process kill the JVM and exit (``FailStop``).

    Example::

        runner = Runner(lambda queue, post: Election(client, group="orders", queue=queue, queues=2,
                                                     identity=identity, on_event=post),
                        standby, [career_0, career_1], RunnerSettings(replica_id="r1"), observer=observer,
                        progress=progress, process=process, requests=OperatorRequests(client, "orders", queues=2),
                        terms=[terms_0, terms_1])
        exit_code = runner.run()     # blocks; request_stop() = graceful handover of every led queue, then 0

    Args:
        leadership_factory: builds a queue's election, given the queue and the function its events are posted with.
        standby: the replica's standby, shared by the careers.
        careers: each queue's career, by queue (their number is the group's number of queues).
        terms: each queue's term history, by queue.
        balance: the balance's members and lines; None for no balance (no member node, no moves).
    """

    def __init__(self, leadership_factory: Callable[[int, Callable[[ElectionEvent], None]], Leadership],
                 standby: Standby, careers: Sequence[Career], settings: RunnerSettings, *, observer: RunnerObserver,
                 progress: LoopProgress, process: ProcessControl, requests: RequestSource,
                 terms: Sequence[TermJournal], balance: BalanceSource | None = None,
                 clock: Callable[[], float] = time.monotonic, queue_size: int = 1024) -> None:
        if not careers or len(careers) != len(terms):
            raise ValueError(f"one career and one term history per queue: {len(careers)} careers, {len(terms)} "
                             "term histories")
        self._events: queue.Queue[RunnerEvent] = queue.Queue(maxsize=queue_size)
        elections = [leadership_factory(q, self._post) for q in range(len(careers))]
        self._standby = standby
        self._observer = observer
        self._settings = settings
        self._clock = clock
        self._state = ReplicaState.STARTING
        self._zk_connected = False
        self._progress = progress
        self._process = process
        self._stop_requested = False
        self._exit_code = 0
        self._log = _log.bind(replica_id=settings.replica_id, group=elections[0].group)
        self._requests = requests
        self._drain = DrainPolicy()
        self._health = HealthGate(standby, clock)
        attempts = [BatchAttempts(settings.replica_id, settings.max_batch_attempts, settings.set_aside_after_s,
                                  clock) for _ in careers]
        self._fail_stop = FailStop([QueueRecords(*parts) for parts in zip(elections, attempts, terms, strict=True)],
                                   process, observer, self._log, where=self._where)
        self._balance = None if balance is None else Balance(
            balance, requests, observer, replica_id=settings.replica_id, settle_s=settings.balance_settle_s,
            clock=clock, log=self._log)
        self._seats = [Seat(q, elections[q], careers[q], attempts[q], terms[q], settings, requests=requests,
                            fail_stop=self._fail_stop, progress=progress, observer=observer, clock=clock,
                            log=self._log.bind(queue=q)) for q in range(len(careers))]

    @property
    def state(self) -> ReplicaState:
        """The replica's state."""
        return self._state

    def seat_state(self, queue: int = 0) -> SeatState:
        """Where the replica is in queue ``queue``'s line."""
        return self._seats[queue].state

    def role(self, queue: int = 0) -> Role:
        """What queue ``queue``'s seat shows (``runner_state``'s values)."""
        return role_of(self._state, self._seats[queue].state)

    def queues_led(self) -> list[int]:
        """The queues whose term is open now (leading, or paused in it)."""
        return [seat.queue for seat in self._seats if seat.leading]

    # -- inputs: these run on other threads and only post --------------------------------------------------

    def _post(self, event: RunnerEvent) -> None:
        try:
            self._events.put_nowait(event)
        except queue.Full:
            # Dropping an event (a Revoked, an Elected) would leave the runner and an election out of step for
            # good, and a full queue means the control thread is not reading it: fail-stop instead.
            self.give_up(Stall(StallReason.EVENT_QUEUE_FULL,
                               f"the event queue is full ({self._events.maxsize} events); "
                               f"{type(event).__name__} could not be queued"))

    def request_stop(self, reason: str) -> None:
        """Hand over gracefully and stop (from any thread; a signal handler calls it): ``reason`` names why."""
        self._stop_requested = True
        self._post(StopRequested(reason))

    def revoke_stalled(self, stall: Stall) -> None:
        """End the term of ``stall.queue`` alone, as stalled, and back that seat off (from any thread: the
        progress watchdog calls it in a group of several queues)."""
        self._post(QueueStalled(stall))

    # -- health ------------------------------------------------------------------------------------------------

    def health(self) -> RunnerHealth:
        """A snapshot for /livez, /readyz and /leader (safe to call from the HTTP threads)."""
        return RunnerHealth.of(
            self._state, [SeatHealth(seat.queue, seat.state, seat.epoch, seat.election.leads(seat.epoch))
                          for seat in self._seats],
            loop_on_time=self._process.loop_live(), stalled=self._fail_stop.stalled, zk_connected=self._zk_connected,
            drained=None if self._drain.request is None else self._drain.describe(), unhealthy=self._health.reason,
            career_ready=self._standby.ready())

    # -- the control loop --------------------------------------------------------------------------------------

    def run(self) -> int:
        """Prepare, join every queue's line, lead when elected, and return the exit code once stopped."""
        self._log.info(RUNNER_STARTING, queues=len(self._seats))
        self._standby.prepare()
        if self._stop_requested:
            self._change(ReplicaState.STOPPING)
            self._change(ReplicaState.STOPPED)
            return 0
        try:
            self._drain.request = self._requests.drain(self._settings.replica_id)
        except TenureError as exc:  # the watch below tells the truth once ZooKeeper answers
            self._log.warning("drain_state_unknown", reason=f"{type(exc).__name__}: {exc}")
        for seat in self._seats:
            seat.election.start(join=self._drain.request is None)
        if self._drain.request is None:
            self._change(ReplicaState.ACTIVE, dict.fromkeys(self._seats, SeatState.FOLLOWING))
        else:
            self._log.info(DRAINED, reason=self._drain.request.reason, at_start=True)
            self._change(ReplicaState.DRAINED)
        self._requests.watch(self._settings.replica_id, lambda request: self._post(DrainChanged(request)),
                             lambda q, request: self._post(HandoverRequested(request, q)))
        self._watch_balance()
        self._progress.tick()
        self._process.loop_started()
        while self._state is not ReplicaState.STOPPED:
            self._progress.tick()
            if self._fail_stop.stalled is not None:
                # Given up (here or on another thread): the fail-stop thread records the terms, ends the session
                # and exits the process. No more work and no more events: they could only race it.
                time.sleep(self._settings.tick_s)
                continue
            with contextlib.suppress(GaveUp):  # the next turn idles until the fail-stop exits the process
                self._step()
        self._process.loop_ended()
        for seat in self._seats:
            seat.election.close()
        closing = self._clock()
        self._standby.close()
        self._log.info("career_closed", seconds=round(self._clock() - closing, 3))
        self._process.closed()
        return self._exit_code

    def _step(self) -> None:
        """One turn of the control loop: the health check when due, then one ``execute`` of each leading seat (or
        a wait for an event when none leads), then the seats whose back-off is over, and the cap."""
        if self._health.due():
            self._check_career_health()
        if any(seat.state is SeatState.LEADING for seat in self._seats):
            self._drain_queue()
            worked = False
            for seat in self._seats:
                if seat.state is not SeatState.LEADING:  # an event handled since may have ended its term
                    continue
                if seat.canary.due():
                    self._canary_handover(seat)
                else:
                    worked = self._execute_once(seat) or worked
                self._drain_queue()
            if not worked:
                self._wait(self._settings.idle_backoff_s)
        else:
            self._wait(self._settings.tick_s)
        for seat in self._seats:
            if seat.state is SeatState.BACKING_OFF and seat.backoff.due():
                self._rejoin_after_backoff(seat)
        self._keep_cap()
        self._balance_turn()

    def _wait(self, timeout_s: float) -> None:
        if self._state is ReplicaState.STOPPED:  # stopped within this turn (a seat's events): nothing more to act on
            return
        try:
            event = self._events.get(timeout=timeout_s)
        except queue.Empty:
            return
        self._handle(event)
        self._drain_queue()

    def _drain_queue(self) -> None:
        while self._state is not ReplicaState.STOPPED:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            self._handle(event)

    def _change(self, replica: ReplicaState | None = None, seats: dict[Seat, SeatState] | None = None) -> None:
        """Move the replica to ``replica`` and each seat to its state in ``seats`` (a seat already there stays),
        every step checked against its table before any is taken; then tell of each seat whose role changed."""
        if replica is not None and replica not in REPLICA_TRANSITIONS[self._state]:
            raise TenureError(f"runner cannot go from {self._state.value} to {replica.value}: this is a bug, "
                              "please report it with the log")
        moves = {seat: new for seat, new in (seats or {}).items() if new is not seat.state}
        for seat, new in moves.items():
            if new not in SEAT_TRANSITIONS[seat.state]:
                raise TenureError(f"the seat of queue {seat.queue} cannot go from {seat.state.value} to {new.value}: "
                                  "this is a bug, please report it with the log")
        before = [role_of(self._state, seat.state) for seat in self._seats]
        if replica is not None:
            self._state = replica
            if self._balance is not None:
                self._balance.changed()  # a member only while active: say so at the next turn
        for seat, new in moves.items():
            seat.state = new
        for seat, old in zip(self._seats, before, strict=True):
            new_role = role_of(self._state, seat.state)
            if new_role is not old:
                seat.log.info(RUNNER_STATE, old=old.value, new=new_role.value, epoch=seat.epoch)
                leading = new_role is Role.LEADING
                self._progress.working(leading, new_term=leading and old is Role.FOLLOWING,
                                       paused=new_role is Role.PAUSED, queue=seat.queue)
                self._observer.role_changed(seat.queue, leading, seat.epoch)

    def _handle(self, event: RunnerEvent) -> None:
        match event:
            case StopRequested(reason=reason):
                self._stop(reason)
            case ConnectionChanged(connected=connected):
                self._zk_connected = connected
                self._observer.connection_changed(connected)
            case Elected(epoch=epoch, queue=q):
                if self._seats[q].state is SeatState.FOLLOWING:
                    self._elected(self._seats[q], epoch)
            case Suspended(reason=reason, queue=q):
                seat = self._seats[q]
                if seat.state is SeatState.LEADING:
                    seat.log.warning(LEADERSHIP_SUSPENDED, reason=reason, epoch=seat.epoch)
                    self._change(seats={seat: SeatState.PAUSED})
            case Resumed(queue=q):
                if self._seats[q].state is SeatState.PAUSED:
                    self._change(seats={self._seats[q]: SeatState.LEADING})
            case Revoked(reason=reason, queue=q):
                seat = self._seats[q]
                if seat.leading:
                    self._end_term(seat, Outcome.REVOKED, reason)
                    self._change(seats={seat: SeatState.FOLLOWING})
            case DrainChanged(request=request):
                self._drain_changed(request)
            case HandoverRequested(request=request, queue=q):
                if request is not None:
                    self._handover_requested(self._seats[q], request)
            case Following(leader_replica=leader, queue=q):
                if leader is not None:
                    self._saw_leader(self._seats[q], leader)
            case QueueStalled(stall=stall):
                self._queue_stalled(stall)
            case BalanceChanged():
                if self._balance is not None:
                    self._balance.changed()

    def _saw_leader(self, seat: Seat, replica_id: str) -> None:
        if replica_id != seat.seen_leader:
            if seat.seen_leader is not None:
                self._observer.leader_changed(seat.queue)
            seat.seen_leader = replica_id

    # -- the lifecycle -----------------------------------------------------------------------------------------

    def _elected(self, seat: Seat, epoch: int) -> None:
        """Begin the term of ``epoch`` in ``seat``'s queue, unless the replica leads its cap of queues already."""
        if self._at_cap():
            self._leave_line(seat)
            return
        # Starting Spark (cold standby, a cluster's application) may outlast the liveness timeout: it is bounded
        # by the first-batch allowance instead, past which the watchdog gives the lock up.
        with self._progress.inaugurating():
            self._begin_term(seat, epoch)

    def _begin_term(self, seat: Seat, epoch: int) -> None:
        started = self._clock()
        elected_at = time.time()
        begun = seat.inauguration.admit(epoch)
        if begun.start is Start.LEAD:
            seat.epoch = epoch
            begun = seat.inauguration.begin(epoch, begun.granted)
        if begun.start is Start.STALE:
            return
        if begun.start in (Start.STEP_ASIDE, Start.REJOIN):
            self._release_and_rejoin(seat)
            return
        if begun.start is Start.UNHEALTHY:
            self._health.reason = str(begun.error)
            self._leave_election(ReplicaState.UNHEALTHY, f"unhealthy: {begun.error}")
            return
        if begun.start is Start.FAILED:
            assert begun.error is not None
            self._career_failed(seat, "inaugurate", begun.error)
            return
        ctx, fence = begun.ctx, begun.fence
        assert ctx is not None and fence is not None, "a term that began has its context and fence"
        seat.backoff.term_began()
        seat.canary.term_began()
        seat.terms.began(fence, ctx.previous_handover, elected_at)
        self._fail_stop.term_began(seat.queue)
        if begun.granted is not None:
            try:
                self._requests.remove_handover(begun.granted, seat.queue)
            except TenureError as exc:  # it then lives out its timeout, as a request whose target died does
                seat.log.warning("handover_request_not_removed", reason=f"{type(exc).__name__}: {exc}")
        self._saw_leader(seat, self._settings.replica_id)
        self._observer.inaugurated(seat.queue, self._clock() - started)
        self._change(seats={seat: SeatState.LEADING})
        seat.log.info(INAUGURATED, epoch=epoch, seconds=round(self._clock() - started, 3))

    def _execute_once(self, seat: Seat) -> bool:
        """One unit of ``seat``'s work (``Execution.once``) and the step its outcome calls for; whether there was
        work."""
        done = seat.execution.once(seat.epoch)
        if done.work is Work.REVOKED:
            self._end_term(seat, Outcome.REVOKED, done.reason)
            self._release_and_rejoin(seat)
        elif done.work is Work.STALLED:
            assert done.stall is not None
            self.give_up(done.stall)
        elif done.work is Work.FAILED:
            assert done.error is not None
            self._career_failed(seat, "execute", done.error, batch_id=done.batch_id)
        return done.worked

    def _end_term(self, seat: Seat, outcome: Outcome, reason: str) -> int | None:
        """End ``seat``'s term (``TermEnd.end``: raises ``GaveUp`` once given up); returns the last committed
        batch."""
        last_batch = seat.term_end.end(outcome, reason, seat.epoch)
        seat.backoff.term_ended()
        return last_batch

    def _release_and_rejoin(self, seat: Seat) -> None:
        seat.term_end.rejoin(seat.epoch)
        if seat.state is not SeatState.FOLLOWING:
            self._change(seats={seat: SeatState.FOLLOWING})

    def _career_failed(self, seat: Seat, phase: str, exc: Exception, *, batch_id: int | None = None) -> None:
        """End the term after the career raised and back the seat off; a batch that failed on its own, while
        storage, Spark and ZooKeeper were well, counts one attempt against it in the handover record."""
        reason = self._health.probe()
        if reason is not None:
            # The career failed because its storage (or Spark) did: no fault of the career, so no back-off
            # counting towards it; out of every line until it heals (each successor recovers its term).
            self._health.reason = reason
            seat.log.warning("career_failed_unhealthy", phase=phase, reason=reason,
                             error=f"{type(exc).__name__}: {exc}", epoch=seat.epoch)
            self._end_term(seat, Outcome.FAILED, f"{phase} raised {type(exc).__name__} while unhealthy: {reason}")
            self._leave_election(ReplicaState.UNHEALTHY, f"unhealthy: {reason}", ended=seat)
            return
        seat.backoff.failed()
        self._observer.career_failed(seat.queue)
        seat.log.error(CAREER_FAILED, phase=phase, epoch=seat.epoch, failures=seat.backoff.failures,
                       batch=batch_id, exc_info=exc)
        self._back_off(seat, Outcome.FAILED, f"{phase} raised {type(exc).__name__}", batch_id,
                       f"{type(exc).__name__}: {exc}")

    def _queue_stalled(self, stall: Stall) -> None:
        """The watchdog found the term of ``stall.queue`` stalled: end that term alone, as stalled, its career's
        work stopped under its deadline (a JVM that does not answer makes it the replica's fail-stop, ``GaveUp``),
        and back the seat off, as after a failure; the replica's other queues go on.

        A stall is posted only while its term is open, and the events of the term's end are queued after it, so a
        seat that is not leading when this is handled has ended that term already (and begun no other: its next
        ``Elected`` is queued behind this)."""
        assert stall.queue is not None, "a queue's stall names its queue"
        seat = self._seats[stall.queue]
        if not seat.leading:
            return
        seat.log.error(QUEUE_STALLED, reason=stall.reason.value, detail=stall.detail, batch=stall.batch_id,
                       epoch=seat.epoch)
        self._observer.stalled(stall.reason)
        seat.backoff.failed()
        self._back_off(seat, Outcome.STALLED, f"stalled: {stall.describe()}",
                       stall.batch_id if stall.reason.counts_against_batch else None, stall.describe())

    def _back_off(self, seat: Seat, outcome: Outcome, ended: str, batch_id: int | None, error: str) -> None:
        """End ``seat``'s term as ``outcome`` (``ended`` says why), count an attempt against ``batch_id`` in the
        handover record, release the node, and back off before rejoining."""
        last_batch = self._end_term(seat, outcome, ended)
        if batch_id is not None and self._zk_connected:
            failed = seat.attempts.failed(batch_id, error)
            seat.log.warning(BATCH_ATTEMPT_FAILED, batch=batch_id, attempts=failed.attempts,
                             max_attempts=self._settings.max_batch_attempts, failing_s=round(failed.failing_s, 3),
                             set_aside_after_s=self._settings.set_aside_after_s, epoch=seat.epoch)
            seat.term_end.record(seat.epoch, clean=False, last_batch=last_batch, reason=f"{ended} on batch {batch_id}")
        seat.term_end.release(seat.epoch)
        delay = seat.backoff.wait()
        seat.log.warning(BACKING_OFF, seconds=delay, failures=seat.backoff.failures)
        self._change(seats={seat: SeatState.BACKING_OFF})

    def _rejoin_after_backoff(self, seat: Seat) -> None:
        """The seat's back-off is over: stand in its queue's line again (or stay out of it at the cap)."""
        if self._at_cap():
            self._change(seats={seat: SeatState.OUT})
            return
        seat.log.info("rejoining", failures=seat.backoff.failures)
        seat.election.join()
        self._change(seats={seat: SeatState.FOLLOWING})

    def _handover_requested(self, seat: Seat, request: HandoverRequest) -> None:
        """An operator asked this term to hand over (to a named replica, or the next in line): hand over
        cleanly, then rejoin at the back of the line (``HandoverRequests.honour`` says which requests count)."""
        if not seat.handovers.honour(request, seat.state, seat.epoch):
            return
        seat.log.info(HANDOVER_REQUESTED, to=request.to, epoch=seat.epoch)
        self._hand_over_and_rejoin(seat, f"handover requested to {request.to or 'the next in line'}")

    def _canary_handover(self, seat: Seat) -> None:
        """Hand over on schedule to the next follower in line, so its successor's first commit tests the
        standby (``CanarySchedule``)."""
        seat.canary.fired()
        try:
            successor = CanarySchedule.successor(seat.election.contenders())
        except TenureError as exc:
            seat.log.warning(CANARY_SKIPPED, reason=f"the line is unreadable: {type(exc).__name__}: {exc}")
            return
        if successor is None:
            seat.log.info(CANARY_SKIPPED, reason="no follower in line")
            return
        seat.log.info(CANARY_HANDOVER, to=successor, epoch=seat.epoch)
        self._hand_over_and_rejoin(seat, CANARY)

    def _hand_over_and_rejoin(self, seat: Seat, reason: str) -> None:
        """Hand over cleanly (timed for the observer), then stand in line again at the back."""
        started = self._clock()
        seat.term_end.clean(seat.epoch, reason)
        self._observer.handover_took(seat.queue, self._clock() - started)
        self._release_and_rejoin(seat)

    # -- the cap on queues led ---------------------------------------------------------------------------------

    def _at_cap(self) -> bool:
        cap = self._settings.max_queues_led
        return cap is not None and len(self.queues_led()) >= cap

    def _leave_line(self, seat: Seat) -> None:
        """Out of ``seat``'s queue's line while the replica leads its cap of queues (``max_queues_led``)."""
        seat.log.info(LEFT_LINE_AT_CAP, leading=self.queues_led(), cap=self._settings.max_queues_led)
        seat.term_end.release(seat.epoch)
        self._change(seats={seat: SeatState.OUT})

    def _keep_cap(self) -> None:
        """At the cap, leave the lines of the queues not led; below it, join them again."""
        if self._state is not ReplicaState.ACTIVE or self._settings.max_queues_led is None:
            return
        at_cap = self._at_cap()
        for seat in self._seats:
            if at_cap and seat.state is SeatState.FOLLOWING:
                self._leave_line(seat)
            elif not at_cap and seat.state is SeatState.OUT:
                seat.log.info("rejoining_below_cap", leading=self.queues_led(), cap=self._settings.max_queues_led)
                seat.election.join()
                self._change(seats={seat: SeatState.FOLLOWING})

    # -- the balance ---------------------------------------------------------------------------------------------

    def _watch_balance(self) -> None:
        """Watch the members and every line: each change posts one ``BalanceChanged`` (coalesced)."""
        if self._balance is None:
            return
        try:
            self._balance.watch(lambda: self._post(BalanceChanged()))
        except TenureError as exc:  # the turns still look again every settle time
            self._log.warning("balance_unwatched", reason=f"{type(exc).__name__}: {exc}")

    def _member(self) -> Member | None:
        """What this replica's member node says: the queues whose line it stands in while its standby is ready (none
        while a cluster's standby application starts again after a term: the node stays, so the members do not
        change, and settle again, at every term's end), or None while it is not active, stops or is unhealthy."""
        if self._state is not ReplicaState.ACTIVE or self._stop_requested or self._health.reason is not None:
            return None
        in_line = (SeatState.FOLLOWING, SeatState.LEADING, SeatState.PAUSED)
        ready = self._standby.ready()
        return Member(self._settings.max_queues_led,
                      frozenset(seat.queue for seat in self._seats if ready and seat.state in in_line))

    def _balance_turn(self) -> None:
        """When due, keep the member node true and start the move the balance's plan asks of this replica, if any:
        its targeted handover request written, then honoured here at once."""
        balance = self._balance
        if balance is None or self._state is ReplicaState.STOPPED or not balance.due():
            return
        leading = {seat.queue: seat.epoch for seat in self._seats
                   if seat.state is SeatState.LEADING and seat.epoch is not None}
        try:
            move = balance.turn(self._member(), leading)
            if move is None:
                return
            request = balance.start(move)
        except TenureError as exc:  # advisory: the next turn looks again; the queues' fences keep them safe
            self._log.warning("balance_turn_failed", reason=f"{type(exc).__name__}: {exc}")
            return
        self._handover_requested(self._seats[move.queue], request)

    def _leave_balance(self) -> None:
        """No longer a member (drained, unhealthy, stopping): its node goes before its queues are handed over, so
        that no plan gives it more."""
        if self._balance is None:
            return
        try:
            self._balance.leave()
        except TenureError as exc:  # the node goes with the session at the latest
            self._log.warning("balance_member_not_removed", reason=f"{type(exc).__name__}: {exc}")

    # -- the replica: health, drain, stop ----------------------------------------------------------------------

    def _check_career_health(self) -> None:
        """Leave every line while the careers cannot work (handing over first what it leads), rather than fail
        their batches; rejoin once they can. A drained replica stays drained (``HealthGate``)."""
        match self._health.check(self._state):
            case HealthStep.LEAVE:
                self._leave_election(ReplicaState.UNHEALTHY, f"unhealthy: {self._health.reason}")
            case HealthStep.REJOIN:
                self._log.info(HEALTHY_AGAIN)
                self._join_every_line()
            case HealthStep.NOTHING:
                pass

    def _join_every_line(self) -> None:
        for seat in self._seats:
            seat.election.join()
        self._change(ReplicaState.ACTIVE, dict.fromkeys(self._seats, SeatState.FOLLOWING))

    def _leave_election(self, to: ReplicaState, reason: str, *, ended: Seat | None = None) -> None:
        """Hand over cleanly each queue it leads (but ``ended``, whose term already ended), release every node, and
        wait out of every line in state ``to``."""
        self._leave_balance()
        for seat in self._seats:
            was_leading = seat.leading and seat is not ended
            seat.term_end.clean_and_release(seat.epoch, reason, leading=was_leading)
            seat.log.warning(LEFT_ELECTION, reason=reason, state=to.value, was_leading=was_leading, epoch=seat.epoch)
        self._change(to, dict.fromkeys(self._seats, SeatState.OUT))

    def _drain_changed(self, request: DrainRequest | None) -> None:
        """Leave every line when drained (handing over first what it leads); join them again when undrained
        (``DrainPolicy``)."""
        led = self.queues_led()
        match self._drain.changed(request, self._state, unhealthy=self._health.reason is not None):
            case DrainStep.LEAVE | DrainStep.PARK as step:
                assert request is not None
                self._log.info(DRAINED, reason=request.reason, was_leading=bool(led), epoch=self._epoch_shown(),
                               leading=led)
                if step is DrainStep.PARK:
                    self._change(ReplicaState.DRAINED)
                else:
                    self._leave_election(ReplicaState.DRAINED, f"drained: {request.reason}")
            case DrainStep.TO_UNHEALTHY:
                self._log.info("undrained")
                self._change(ReplicaState.UNHEALTHY)
            case DrainStep.REJOIN:
                self._log.info("undrained")
                self._join_every_line()
            case DrainStep.NOTHING:
                pass

    def _stop(self, reason: str) -> None:
        """Hand over every queue it leads, one after another, release every node, and stop."""
        started = self._clock()
        led = [seat for seat in self._seats if seat.leading]
        self._leave_balance()
        self._change(ReplicaState.STOPPING)
        for seat in self._seats:
            if not seat.term_end.clean_and_release(seat.epoch, reason, leading=seat in led):
                self._exit_code = 1
            if seat in led:
                seat.log.info(HANDED_OVER, epoch=seat.epoch, seconds=round(self._clock() - started, 3))
        self._change(ReplicaState.STOPPED, dict.fromkeys(self._seats, SeatState.OUT))

    def _epoch_shown(self) -> int | None:
        """The epoch the replica's own log events name: its one seat's in a group of one queue, else the first led
        queue's."""
        if len(self._seats) == 1:
            return self._seats[0].epoch
        return next((seat.epoch for seat in self._seats if seat.leading), None)

    def _where(self, queue: int | None) -> tuple[int | None, str]:
        """The epoch and role of ``queue``'s seat (of the replica, for None), read by the fail-stop's log."""
        if queue is None and len(self._seats) == 1:
            queue = 0
        if queue is None:
            return self._epoch_shown(), self._state.value
        seat = self._seats[queue]
        return seat.epoch, role_of(self._state, seat.state).value

    # -- fail-stop ---------------------------------------------------------------------------------------------

    def give_up(self, stall: Stall) -> None:
        """Give every lock up at once and have the process exit (``FailStop.give_up``); from any thread, once."""
        self._fail_stop.give_up(stall)

    def close_session(self) -> None:
        """Close the ZooKeeper session, under a deadline: every node goes now (``FailStop.close_session``)."""
        self._fail_stop.close_session()
