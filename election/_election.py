"""The election's control loop: one thread per ``Election`` makes every state change; kazoo only enqueues.

One cohesive thing, so longer than the other modules: the public calls (any thread) and the handlers of the
control thread share one lock-guarded state — leadership state, own node, term, safe-until clock — and
splitting them would spread that state over modules. The line's ZooKeeper steps are in ``_line``, the fenced
writes in ``_fence`` and ``_transaction``. See ARCHITECTURE.md "One term's lifecycle".
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from queue import Empty, Queue
from typing import Any, Final

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NoNodeError, SessionExpiredError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from tenure.election._acl import DigestCredential
from tenure.election._boundary import zookeeper_errors
from tenure.election._events import (
    ConnectionChanged,
    Elected,
    ElectionEvent,
    Following,
    Resumed,
    Revoked,
    Suspended,
)
from tenure.election._fence import CommitTally, Fence
from tenure.election._handover import HandoverRecord, read_handover
from tenure.election._identity import Identity
from tenure.election._layout import GroupPaths
from tenure.election._line import Line, OwnNode, Place, Verdict
from tenure.election._settings import ElectionSettings
from tenure.election._states import LeadershipState, check_transition
from tenure.election._status import Contender, read_contenders
from tenure.errors import ElectionError, NotLeader

__all__ = ["ELECTED", "RESUMED", "REVOKED", "SUSPENDED", "Election"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
ELECTED: Final = "elected"
SUSPENDED: Final = "suspended"
RESUMED: Final = "resumed"
REVOKED: Final = "revoked"

_S = LeadershipState
_log = structlog.get_logger("tenure.election")
_MAX_RELIST = 64  # bounded re-list loop: a view that never settles is a bug or an attack, not churn


# Messages on the control queue. Only the control thread reads them; everything else only puts.
@dataclass(frozen=True)
class _Join:
    pass


@dataclass(frozen=True)
class _Conn:
    state: str  # KazooState
    session_id: int | None


@dataclass(frozen=True)
class _Watch:
    token: int
    kind: str  # "predecessor" | "own"


@dataclass(frozen=True)
class _Pong:
    node: str
    sent_at: float
    result: Any  # kazoo IAsyncResult, already completed


@dataclass
class _Release:
    deadline: float
    done: threading.Event = field(default_factory=threading.Event)
    error: ElectionError | None = None


@dataclass(frozen=True)
class _Stop:
    pass


_Msg = _Join | _Conn | _Watch | _Pong | _Release | _Stop


class Election:
    """Leader election for one consumer group, with a fencing epoch per term.

    Every contender creates an ephemeral-sequential node ``/tenure/<group>/election/<guid>-n_<seq>`` holding
    its ``Identity``. It leads iff its node is the lowest AND the node's ``ephemeralOwner`` is its current
    session; otherwise it watches only the next-lower node and re-lists when that one goes (no herd).

    Example::

        election = Election(client, group="orders", identity=Identity.local("r1"), on_event=events.put)
        election.start()                       # joins on the control thread; returns at once
        ...                                    # on Elected(epoch): fence = election.fence()
        record, version = fence.read_commit()
        fence.commit({"batch": 7}, expected_version=version)
        election.release(timeout_s=5.0)        # successor is notified at once
        election.close()

    Args:
        client: a kazoo client, started or not, owned by the caller (``close`` does not stop it). With a
            ``credential`` it must be built with ``auth_data=credential.auth_data()``.
        group: the consumer group (letters, digits, ``_.-``).
        queue, queues: the queue of the group this line is for, and the group's number of queues. Default: queue 0
            of 1, a group's one line (``/tenure/<group>/election``); with several, each queue has a line of its
            own (``GroupPaths``), and one replica runs one ``Election`` per queue, all on one client: the session's
            loss ends every term at once, and each epoch is its own node's ``czxid``, unique across the queues.
        identity: stored as the node's data, shown by ``tenure status``.
        on_event: called with each ``ElectionEvent``, in order, from the control thread only. It must not
            block and must not call ``release``/``close`` (enqueue and act on your own thread). Default: none.
        safe_fraction: the safe-until deadline is the send time of the last answered request plus
            ``safe_fraction * session_timeout_s``; past it the leader is suspended. Default 0.5. Hazard:
            near 1.0 a paused leader may still commit after its session has expired on the server (the
            fence still rejects it); too small suspends on ordinary latency.
        credential: digest credential; when given, the group's znodes get its ACL. Default: open ACLs.
        clock: monotonic clock in seconds (injectable for tests). Default ``time.monotonic``.
        session_timeout_s: the session timeout the deadline is computed from. Default: the client's
            requested timeout. Hazard: if the servers clamp the session to a *shorter* timeout
            (``maxSessionTimeout``), pass the negotiated value, or the deadline is too late.
        tick_s: period of the liveness round-trip and deadline check. Default ``session_timeout_s / 10``.
        op_timeout_s: bound on each ZooKeeper call made by the recipe. Default ``session_timeout_s``.
        faults: a fault-injection hook for tests and drills, called with a point name (``before_transaction``:
            a commit passed its local checks and is about to send its transaction). Default: none.
    """

    def __init__(
        self,
        client: KazooClient,
        *,
        group: str,
        identity: Identity,
        queue: int = 0,
        queues: int = 1,
        on_event: Callable[[ElectionEvent], None] | None = None,
        safe_fraction: float = 0.5,
        credential: DigestCredential | None = None,
        clock: Callable[[], float] = time.monotonic,
        session_timeout_s: float | None = None,
        tick_s: float | None = None,
        op_timeout_s: float | None = None,
        faults: Callable[[str], None] | None = None,
    ) -> None:
        settings = ElectionSettings.resolve(
            session_timeout_s=session_timeout_s if session_timeout_s is not None
            else client._session_timeout / 1000.0,
            safe_fraction=safe_fraction, tick_s=tick_s, op_timeout_s=op_timeout_s)
        self.client = client
        self.group = group
        self.queue = queue
        self.paths = GroupPaths(group, queue, queues)
        self.identity = identity
        self.credential = credential
        self.acl = credential.acls() if credential else None
        self.safe_fraction = settings.safe_fraction
        self.session_timeout_s = settings.session_timeout_s
        self.tick_s = settings.tick_s
        self.op_timeout_s = settings.op_timeout_s
        self.faults = faults
        self.log = _log.bind(group=group, replica=identity.replica_id, queue=queue)
        self._on_event = on_event
        self._clock = clock
        self._line = Line(client, self.paths, identity, acl=self.acl, op_timeout_s=self.op_timeout_s, clock=clock,
                          log=self.log)
        self._queue: Queue[_Msg] = Queue()
        self._lock = threading.Lock()  # guards what other threads read: state, own node, term, counters
        self._thread: threading.Thread | None = None
        self._started = False
        # Fields below are written by the control thread only.
        self._state = _S.IDLE
        self._own: OwnNode | None = None
        self._term = False  # Elected sent and Revoked not yet
        self._fence: Fence | None = None
        self._token = 0  # generation of watches and ticks; stale deliveries are dropped
        self._predecessor: str | None = None
        self._last_heard = -math.inf
        self._connected = False
        self._tick_in_flight: float | None = None
        self._retry_at: float | None = None
        self._retry_backoff_s = 0.0
        # Counters (read by the service for metrics).
        self.watch_deliveries = 0  # predecessor-watch wake-ups acted upon (herd check)
        self._commits = CommitTally()  # every term's fence adds to it
        self.control_errors: list[BaseException] = []  # unexpected errors caught by the control loop
        self._before_create: Callable[[str], None] | None = None  # test seam: runs just before the create

    # ---------------------------------------------------------------- public API (any thread)

    @property
    def state(self) -> LeadershipState:
        """The current state (see ``LeadershipState``)."""
        with self._lock:
            return self._state

    @property
    def epoch(self) -> int | None:
        """The fencing token of the current term (``czxid`` of own node), ``None`` when no term runs.

        Why czxid, not the sequence number: sequences come from the parent's child counter and restart at
        0 when ``/tenure/<group>/election`` is deleted and re-created; the zxid rises for the ensemble's life.
        """
        with self._lock:
            return self._own.epoch if self._term and self._own is not None else None

    @property
    def node(self) -> str | None:
        """The full path of own election node, if any."""
        with self._lock:
            return self._own.path if self._own is not None else None

    @property
    def session_id(self) -> int | None:
        """The session that owns own election node."""
        with self._lock:
            return self._own.session_id if self._own is not None else None

    @property
    def commits_attempted(self) -> int:
        """Calls to ``Fence.commit``, over every term."""
        return self._commits["attempted"]

    @property
    def commits_fenced(self) -> int:
        """Commits the fence rejected (``Fenced``), over every term."""
        return self._commits["fenced"]

    @property
    def commits_refused(self) -> int:
        """Commits refused before sending (``NotLeader``), over every term."""
        return self._commits["refused"]

    def safe_until(self) -> float:
        """The clock value after which the leader must not commit (last answered send + fraction*timeout)."""
        with self._lock:
            return self._last_heard + self.safe_fraction * self.session_timeout_s

    def lease_headroom(self) -> float:
        """Seconds until the safe-until deadline while leading (0 otherwise): how near commits came to stopping."""
        return max(0.0, self.safe_until() - self._clock()) if self.is_leader() else 0.0

    def is_leader(self) -> bool:
        """True iff LEADING, before the safe-until deadline, kazoo connected, and on the node's own session.

        Computed afresh on each call (never a cached flag alone), so it turns False at the deadline even
        when the control thread is busy.
        """
        with self._lock:
            if self._state is not _S.LEADING or not self._term or self._own is None:
                return False
            session, deadline = self._own.session_id, self._last_heard + self.safe_fraction * self.session_timeout_s
        if self._clock() >= deadline or self.client.state != KazooState.CONNECTED:
            return False
        return self._current_session() == session

    def leads(self, epoch: int | None) -> bool:
        """True iff leading now (``is_leader``) in the term of ``epoch``, not in another term of this replica."""
        return self.is_leader() and self.epoch == epoch
    def start(self, *, join: bool = True) -> None:
        """Start the control thread and, unless ``join`` is False, join the election (creates the node there);
        returns at once. A replica drained before it starts starts without joining, and joins when undrained."""
        with self._lock:
            if self._started:
                raise ElectionError(f"Election for {self.paths.label} cannot be started more than once: "
                                    "use join() after release(), or a new Election after close()")
            self._started = True
        self.client.add_listener(self._on_kazoo_state)
        self._thread = threading.Thread(target=self._run, name=f"tenure-election-{self.group}-{self.queue}",
                                        daemon=True)
        self._thread.start()
        if join:
            self._queue.put(_Join())

    def join(self) -> None:
        """Rejoin after ``release`` with a new node at the back of the line; returns at once."""
        with self._lock:
            if not self._started or self._state is _S.CLOSED:
                raise ElectionError(f"Election for {self.paths.label}: join() needs a started, unclosed "
                                    f"election (state {self._state.name}); call start() first")
        self._queue.put(_Join())

    def release(self, timeout_s: float = 10.0) -> None:
        """Leave the election: delete own node at once (the successor is notified), then state IDLE.

        Errors are retried with back-off and logged; a running term ends with ``Revoked(reason="released")``.

        Raises:
            ElectionError: the node could not be deleted within ``timeout_s`` (it is retried in the
                background and goes anyway when the session ends; stopping the client ends it).
        """
        self._not_on_control_thread("release")
        if not self._started or self.state in (_S.IDLE, _S.CLOSED):
            return
        msg = _Release(deadline=self._clock() + timeout_s)
        self._queue.put(msg)
        if not msg.done.wait(timeout_s + self.op_timeout_s):
            raise ElectionError(f"release of {self.paths.label} did not finish within {timeout_s} s "
                                f"(state {self.state.name}): the control thread is blocked on ZooKeeper")
        if msg.error is not None:
            raise msg.error

    def close(self, timeout_s: float = 10.0) -> None:
        """Release if needed, stop the control thread and remove the listener (the client stays open)."""
        self._not_on_control_thread("close")
        error: ElectionError | None = None
        if self._thread is not None and self._thread.is_alive():
            try:
                self.release(timeout_s)
            except ElectionError as exc:
                error = exc
            self._queue.put(_Stop())
            self._thread.join(timeout_s)
            self.client.remove_listener(self._on_kazoo_state)
        with self._lock:
            if self._state is not _S.CLOSED:
                if self._state is not _S.IDLE:  # release could not even run: say so, then close anyway
                    self.log.warning("closed_while_not_idle", state=self._state.name)
                    self._state = _S.IDLE
                self._state = check_transition(self._state, _S.CLOSED)
        self.log.info("election_closed")
        if error is not None:
            raise error


    def fence(self) -> Fence:
        """The fenced-commit primitive of the current term.

        Raises:
            NotLeader: not leading now (following, suspended, past the safe-until deadline).
        """
        if not self.is_leader():
            raise NotLeader(f"{self.paths.label}: not leading (state {self.state.name}); no fence to give")
        with self._lock:
            own = self._own
            if own is None:
                raise NotLeader(f"{self.paths.label}: the term ended while the fence was requested")
            if self._fence is None or self._fence.epoch != own.epoch:
                self._fence = Fence(self, epoch=own.epoch, node=own.path, node_version=own.version,
                                    tally=self._commits)
            return self._fence

    def read_handover(self) -> HandoverRecord | None:
        """The queue's handover record (``None`` if none was written); no leadership needed.

        Raises:
            ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed, or the node holds no record.
        """
        return read_handover(self.client, self.group, queue=self.queue, queues=self.paths.queues,
                             timeout_s=self.op_timeout_s)

    def write_handover(self, record: HandoverRecord) -> None:
        """Write the handover record through the current term's fence (``Fence.write_handover``).

        Raises:
            NotLeader: not leading now. Fenced: own node gone, record moved, or a higher epoch stored there.
            CommitOutcomeUnknown: the reply was lost, so the outcome is unknown (re-read with ``read_handover``).
            ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed otherwise.
        """
        self.fence().write_handover(record)

    def contenders(self) -> list[Contender]:
        """All contenders in line order (leader first), read from ZooKeeper now.

        Raises:
            ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed.
        """
        return read_contenders(self.client, self.group, queue=self.queue, queues=self.paths.queues,
                               timeout_s=self.op_timeout_s)

    def close_session(self) -> None:
        """End the ZooKeeper session now, stopping the client: the node goes at once and the successor hears, not a
        session timeout later. For a replica that gives its lock up and exits; the client is useless after it, and
        every other ``Election`` on it (the replica's other queues) loses its term with the session.

        Raises:
            ZooKeeperUnavailable, ElectionError: the client could not be stopped (the session then expires).
        """
        with zookeeper_errors(f"{self.paths.label}: closing the session"):
            self.client.stop()

    def __repr__(self) -> str:
        return (f"Election(group={self.group!r}, queue={self.queue}, replica={self.identity.replica_id!r}, "
                f"state={self.state.name})")

    # ---------------------------------------------------------------- kazoo threads: enqueue only

    def _on_kazoo_state(self, state: str) -> None:
        self._queue.put(_Conn(state, self._current_session()))

    def _watch(self, token: int, kind: str) -> Callable[[WatchedEvent], None]:
        def deliver(event: WatchedEvent) -> None:
            # kazoo fires every watch with type NONE when the connection drops (and forgets them); the
            # CONNECTED state event re-lists and re-arms instead, so these are not wake-ups.
            if event.type != EventType.NONE:
                self._queue.put(_Watch(token, kind))

        return deliver

    # ---------------------------------------------------------------- control thread

    def _not_on_control_thread(self, what: str) -> None:
        if threading.current_thread() is self._thread:
            raise ElectionError(f"{what}() called from the election's control thread (from on_event?): "
                                "callbacks must not block; enqueue the event and call it from your own thread")

    def _run(self) -> None:
        next_tick = self._clock()
        while True:
            try:
                msg: _Msg | None = self._queue.get(timeout=max(0.0, next_tick - self._clock()))
            except Empty:
                msg = None
            if isinstance(msg, _Stop):
                return
            try:
                if msg is not None:
                    self._handle(msg)
                if self._clock() >= next_tick:
                    next_tick = self._clock() + self.tick_s
                    self._tick()
            except Exception as exc:  # a bug or an unforeseen ZooKeeper answer: log, keep the loop, retry
                self.control_errors.append(exc)
                self.log.exception("control_error", state=self._state.name, message=type(msg).__name__)
                self._schedule_retry()
            finally:
                if isinstance(msg, _Release):  # never leave a caller of release() hanging
                    msg.done.set()

    def _handle(self, msg: _Msg) -> None:
        if isinstance(msg, _Join):
            self._on_join()
        elif isinstance(msg, _Conn):
            self._on_connection(msg.state, msg.session_id)
        elif isinstance(msg, _Watch):
            self._on_watch(msg.token, msg.kind)
        elif isinstance(msg, _Pong):
            self._on_pong(msg)
        elif isinstance(msg, _Release):
            self._on_release(msg)

    def _transition(self, target: LeadershipState) -> None:
        with self._lock:
            previous = self._state
            self._state = check_transition(previous, target)
        self.log.debug("state_changed", previous=previous.name, state=target.name)

    def _emit(self, event: ElectionEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:
            self.log.exception("on_event_failed", event=type(event).__name__)

    def _current_session(self) -> int | None:
        client_id = self.client.client_id
        return int(client_id[0]) if client_id else None

    def _connected_now(self) -> bool:
        return bool(self.client.state == KazooState.CONNECTED)

    def _transient(self) -> tuple[type[BaseException], ...]:
        return (ConnectionLoss, SessionExpiredError, ConnectionClosedError, self.client.handler.timeout_exception)

    def _heard(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` was answered: the session was alive then (conservative)."""
        with self._lock:
            self._last_heard = max(self._last_heard, sent_at)

    def _next_token(self) -> int:
        self._token += 1
        return self._token

    def _arm(self, kind: str) -> Callable[[WatchedEvent], None]:
        """A watch of ``kind`` under a new token: every watch armed before it is superseded."""
        return self._watch(self._next_token(), kind)

    def _set_connected(self, connected: bool) -> None:
        if connected != self._connected:
            self._connected = connected
            self._emit(ConnectionChanged(connected, self.queue))

    def _schedule_retry(self) -> None:
        self._retry_backoff_s = min(max(self._retry_backoff_s * 2, 0.1), 2.0)
        self._retry_at = self._clock() + self._retry_backoff_s
        self.log.debug("recheck_scheduled", in_s=self._retry_backoff_s)

    # -- joining and following ---------------------------------------------------------------

    def _on_join(self) -> None:
        if self._state is not _S.IDLE:
            self.log.info("join_ignored", state=self._state.name)
            return
        self._transition(_S.JOINING)
        self._set_connected(self._connected_now())
        self._advance()

    def _advance(self) -> None:
        """The recipe, from JOINING or FOLLOWING (kazoo's Lock, with its gaps closed; the steps are ``Line``'s).

        1. Have a node: create ``<guid>-n_`` (or find it by guid after a lost reply).
        2. List the children and sort them by sequence.
        3. Own node missing: it died with a session or was deleted; forget it and go to 1.
        4. Lowest: verify ``ephemeralOwner`` is this session, arm a watch on own node, lead.
        5. Otherwise watch only the next-lower node; if it is gone, go to 2; else follow.
        """
        if self._state not in (_S.JOINING, _S.FOLLOWING) or not self._connected_now():
            return  # the CONNECTED event brings us back
        session = self._current_session()
        try:
            for _ in range(_MAX_RELIST):
                if self._own is not None and self._own.session_id != session:
                    self._forget_node()  # the old session's node went (or goes) with it
                own = self._own
                if own is None:
                    own = self._line.create(session, self._before_create)
                    if own is None:
                        self._schedule_retry()
                        return
                    with self._lock:
                        self._own = own
                sent = self._clock()
                look = self._line.look(own, session, self._arm)
                if look.place is Place.LOST:
                    self._forget_node()
                    continue
                if look.place is Place.RELIST:
                    continue  # gone between list and watch: re-list, never assume
                self._heard(sent)
                self._retry_backoff_s = 0.0
                if look.place is Place.LOWEST:
                    self._lead(own)
                elif look.predecessor is not None and look.leader is not None:
                    self._follow(look.predecessor, look.position, look.leader)
                return
            raise ElectionError(f"{self.paths.label}: no stable view of the line after {_MAX_RELIST} re-lists")
        except NoNodeError:  # the election parent vanished under us: start over with a new node
            self.log.info("election_parent_missing", path=self.paths.election)
            self._forget_node()
            self._schedule_retry()
        except self._transient() as exc:
            self.log.debug("advance_interrupted", error=type(exc).__name__)
            self._schedule_retry()

    def _lead(self, own: OwnNode) -> None:
        """Step 4 passed: own node is the lowest and this session's; a term begins."""
        self._transition(_S.LEADING)
        with self._lock:
            self._term = True
        self._predecessor = None
        self.log.info(ELECTED, epoch=own.epoch, node=own.path)
        self._emit(Elected(own.epoch, self.queue))

    def _follow(self, predecessor: str, position: int, leader_node: str) -> None:
        """Step 5 passed: the next-lower node is watched; tell the consumer when the predecessor changed."""
        if self._state is _S.JOINING:
            self._transition(_S.FOLLOWING)
        if predecessor != self._predecessor:
            self._predecessor = predecessor
            leader = self._line.replica_of(leader_node)
            self.log.info("following", predecessor=predecessor, position=position, leader=leader)
            self._emit(Following(leader, position, self.queue))

    def _forget_node(self) -> None:
        with self._lock:
            self._own = None
            self._fence = None
        self._line.abandon()
        self._predecessor = None
        self._next_token()

    # -- terms ------------------------------------------------------------------------------

    def _end_term(self, reason: str) -> None:
        with self._lock:
            was, own = self._term, self._own
            self._term = False
            self._fence = None
        if was and own is not None:
            self.log.info(REVOKED, epoch=own.epoch, reason=reason)
            self._emit(Revoked(own.epoch, reason, self.queue))

    def _revoke_and_rejoin(self, reason: str, *, delete: bool) -> None:
        own = self._own
        self._end_term(reason)
        if delete and own is not None:
            self._line.leave(own.path)
        self._forget_node()
        self._transition(_S.JOINING)
        self._advance()

    def _reverify(self) -> None:
        """After a reconnect (or a deadline suspension) on the same session: own node must exist, be the
        lowest and be owned by this session — then resume; otherwise the term is revoked."""
        own = self._own
        if own is None or not self._connected_now():
            return
        sent = self._clock()
        try:
            verdict = self._line.recheck(own, self._current_session(), self._arm)
        except self._transient() as exc:
            self.log.debug("reverify_interrupted", error=type(exc).__name__)
            self._schedule_retry()
            return
        if verdict is not Verdict.HOLDS:
            # a node that is not the lowest is still ours: delete it so it does not stand in line
            self._revoke_and_rejoin(verdict.value, delete=verdict is Verdict.NOT_LOWEST)
            return
        self._heard(sent)
        self._retry_backoff_s = 0.0
        if self._state is _S.SUSPENDED:
            self._transition(_S.LEADING)
            self.log.info(RESUMED, epoch=own.epoch)
            self._emit(Resumed(own.epoch, self.queue))

    def _suspend(self, reason: str) -> None:
        if self._state is _S.LEADING and self._own is not None:
            self._transition(_S.SUSPENDED)
            self.log.info(SUSPENDED, epoch=self._own.epoch, reason=reason)
            self._emit(Suspended(self._own.epoch, reason, self.queue))

    # -- connection events ------------------------------------------------------------------

    def _on_connection(self, state: str, session: int | None) -> None:
        if state == KazooState.SUSPENDED:
            self._set_connected(False)
            self._suspend("connection suspended")
        elif state == KazooState.LOST:
            self._set_connected(False)
            self._line.orphans_died()
            self._session_lost()
        elif state == KazooState.CONNECTED:
            self._set_connected(True)
            if self._own is not None and session != self._own.session_id:
                self._line.orphans_died()
                self._session_lost()  # missed the LOST: a new session means the old node is gone
            if self._state in (_S.LEADING, _S.SUSPENDED):
                self._reverify()
            elif self._state in (_S.JOINING, _S.FOLLOWING):
                self._advance()
            self._line.delete_orphans()

    def _session_lost(self) -> None:
        self._end_term("session lost")
        if self._own is not None:
            self.log.info("node_lost_with_session", node=self._own.path)
        self._forget_node()
        if self._state in (_S.LEADING, _S.SUSPENDED, _S.FOLLOWING):
            self._transition(_S.JOINING)

    def _on_watch(self, token: int, kind: str) -> None:
        if token != self._token:
            return  # a superseded watch (re-armed since, or a node we dropped)
        if kind == "predecessor" and self._state is _S.FOLLOWING:
            with self._lock:
                self.watch_deliveries += 1
            self._advance()
        elif kind == "own" and self._state in (_S.LEADING, _S.SUSPENDED):
            self._reverify()

    # -- tick: liveness round-trip and the safe-until deadline --------------------------------

    def _tick(self) -> None:
        now = self._clock()
        if self._state is _S.LEADING and now >= self.safe_until():
            self._suspend("safe-until deadline passed")
        if self._tick_in_flight is not None and now - self._tick_in_flight > self.session_timeout_s:
            self._tick_in_flight = None  # kazoo drops queued requests on session loss without an answer
        if not self._connected_now():
            return
        if self._own is not None and self._tick_in_flight is None:
            node, sent = self._own.path, self._clock()
            self._tick_in_flight = sent
            result = self.client.exists_async(node)
            result.rawlink(lambda res: self._queue.put(_Pong(node, sent, res)))
        if self._retry_at is not None and now >= self._retry_at:
            self._retry_at = None
            if self._state in (_S.LEADING, _S.SUSPENDED):
                self._reverify()
            else:
                self._advance()
        self._line.delete_orphans()

    def _on_pong(self, msg: _Pong) -> None:
        self._tick_in_flight = None
        own = self._own
        if own is None or msg.node != own.path or not msg.result.successful():
            return
        if msg.result.value is None:  # own node is gone
            if self._state in (_S.LEADING, _S.SUSPENDED):
                self._revoke_and_rejoin("node deleted", delete=False)
            elif self._state is _S.FOLLOWING:
                self.log.info("own_node_missing", node=own.path)
                self._forget_node()
                self._transition(_S.JOINING)
                self._advance()
            return
        if self._current_session() == own.session_id:
            self._heard(msg.sent_at)
        if self._state is _S.SUSPENDED and self._connected_now() and self._clock() < self.safe_until():
            self._reverify()  # a deadline suspension while kazoo stayed connected: fresh answers again

    # -- release ----------------------------------------------------------------------------

    def _on_release(self, msg: _Release) -> None:
        if self._state in (_S.IDLE, _S.CLOSED):
            return
        own = self._own
        self._transition(_S.RELEASING)
        if own is not None:
            msg.error = self._line.delete_until(own.path, msg.deadline)
        self._end_term("released")
        self._forget_node()
        self._retry_at = None
        self._transition(_S.IDLE)
