"""The Spark career's standby: the replica's SparkSession through its life, and what keeps it ready to lead (its
storage and JVM healthy, the user's transform checked, the pipeline warmed up).

The session is started for the warm-up, for a term or for a follower's standby application on a cluster, and
stopped after a term when it lives per term; its query listener is the standby's, and each query registers its
progress there. The standby warms the session up (``_warmup``), keeps it warm while the replica follows, holds a
follower's executors on a cluster (``_executors``), starts the next standby application after a term, and frees and
grows into the cluster's cores when a term leads (``_cluster``). ``SparkCareer`` asks it for the session; the
career's four verbs stay in ``_career``.

Longer than most modules: one class whose steps share its state (the session, the standby application's executors,
the reclaim that is due, the terms open on the session); what is the cluster's alone is in ``_cluster`` and
``_executors``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import structlog
from pyspark.sql import SparkSession

from tenure.career._deadline import Probe, call_within
from tenure.career._health import StorageHealth
from tenure.career.spark._cluster import (
    STALE_APPLICATIONS_LEFT,
    ClusterMaster,
    forget_application,
    reclaim_cores,
    record_application,
    standby_application_name,
    term_application_name,
)
from tenure.career.spark._config import SparkCareerConfig
from tenure.career.spark._executors import StandbyExecutors, standby_conf
from tenure.career.spark._hooks import Hooks, check_transform, load_hooks
from tenure.career.spark._layout import Layout
from tenure.career.spark._progress import ProgressInbox
from tenure.career.spark._session import build_session, use_driver_python
from tenure.career.spark._term import Term
from tenure.career.spark._warmup import KeepWarm, warm_up
from tenure.errors import Unresponsive

__all__ = ["STANDBY_EXECUTORS_HELD", "STANDBY_WITHOUT_EXECUTORS", "SparkStandby"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
STANDBY_EXECUTORS_HELD: Final = "standby_executors_held"
STANDBY_WITHOUT_EXECUTORS: Final = "standby_without_executors"

_RENEW_S = 30.0  # how often a leader on a cluster tells the master its share again
_LOCAL_WARMUP_MASTER = "local[1]"  # a follower's warm-up on a cluster when it holds no executors there


def _session_stopped(session: SparkSession) -> bool:
    """Whether the session's SparkContext has stopped (a py4j call: may hang on a frozen JVM)."""
    try:
        return bool(session.sparkContext._jsc.sc().isStopped())
    except Exception:  # py4j: the gateway itself is gone
        return True


class SparkStandby:
    """The replica's Spark, kept ready to lead: the session, its progress listener, the warm-up and keep-warm, and
    on a cluster the follower's standby application, the re-standby after a term, the reclaim of earlier terms'
    cores and the leader's share.

    The career that leads asks it for the session (:meth:`session_for_term`, :meth:`session`), tells it when a
    term begins and ends (:meth:`term_began`, :meth:`term_ended`) and calls :meth:`tend` once per unit of work;
    each query registers its run with :attr:`progress`. Keep-warm idles while any term is open, and the session
    that lives per term stops when the last open term ends, so that careers leading several queues of one replica
    can share one standby and one session. On a cluster the application is named after the term that starts it,
    each term records it under its queue's folder (``_cluster``) and forgets it again when it ends while other terms
    still run on it, and it grows to the leader's share once a term's first batch has committed.

    Example::

        standby = SparkStandby.for_replica(config, replica_id="r1", group="g")  # or SparkStandby(config, hooks, …)
        standby.prepare()                              # warmed up: a leader's first batch runs hot
        session = standby.session_for_term(epoch, log, records)  # elected
        standby.term_began()
        ...                                            # the term's query on ``session``; ``standby.tend(term)``
        standby.term_ended(epoch, log)
        standby.close()

    Args:
        config: the Spark career's settings (master, standby mode, executors, timeouts, Spark conf).
        hooks: the user's transform and row function, which the warm-up runs.
        replica_id: names a standby application and the warm-up's commits; bound to every log event.
        group: the consumer group; names the term's and the standby's applications.
        layout: the data root's layout: where a cluster's warm-up sample goes (``_standby/``) and where each term
            records its application (``_applications/``).
        clock: monotonic clock in seconds (injectable).
        cluster_master: on a cluster, the master's applications, to kill earlier terms' (``_cluster``). Default
            None: none is killed.
    """

    def __init__(self, config: SparkCareerConfig, hooks: Hooks, *, replica_id: str, group: str, layout: Layout,
                 clock: Callable[[], float] = time.monotonic, cluster_master: ClusterMaster | None = None) -> None:
        self._config = config
        self._hooks = hooks
        self._replica_id = replica_id
        self._group = group
        self._layout = layout
        self._clock = clock
        self._cluster_master = cluster_master if config.on_cluster else None
        self._log = structlog.get_logger("tenure.career.spark").bind(replica_id=replica_id)
        self.jvm = Probe("Spark's JVM", config.health.probe_timeout_s)  # every call from the control thread into it
        self.progress = ProgressInbox()  # the session's query listener: each query's progress, by run
        self._session: SparkSession | None = None
        self._owned = False
        self._prepared = False
        self._terms = 0  # terms open on this session: keep-warm idles and no standby application restarts
        self._keep_warm: KeepWarm | None = None
        self._application_stopped: threading.Event | None = None  # set once a term's own Spark has stopped
        self._executors: StandbyExecutors | None = None  # the standby application's, while it runs (cluster)
        self._share_renewed_at = 0.0
        self._records: dict[int, Path] = {}  # on a cluster, where each open term recorded its application
        # By open term: when its put-off or failed reclaim falls due, and whether its first batch brings it forward.
        self._reclaim_at: dict[int, tuple[float, bool]] = {}
        self._restandby: threading.Thread | None = None  # a new standby application starting after a term
        self._standby_due = False  # a term has ended: the next health check starts the next standby application
        self._closing = threading.Event()
        split = config.handover_split()
        self._stop_s, self._session_stop_s = split.query_stop_s, split.application_stop_s
        self._storage = StorageHealth(dict.fromkeys((config.data_root, config.queue_dir or config.data_root)),
                                      min_free_bytes=config.health.min_free_bytes,
                                      timeout_s=config.health.probe_timeout_s)

    @classmethod
    def for_replica(cls, config: SparkCareerConfig, *, replica_id: str, group: str,
                    clock: Callable[[], float] = time.monotonic,
                    cluster_master: ClusterMaster | None = None) -> SparkStandby:
        """The standby of a replica whose Spark careers (one per queue it may lead) share it: the user's code the
        settings name loaded once (:attr:`hooks`), the data root's own folders (not a queue's) for a cluster's
        warm-up and applications.

        Raises:
            HookError: the transform or row function cannot be loaded.
        """
        layout = Layout(Path(config.data_root).resolve())
        return cls(config, load_hooks(config.transform, config.row_function, config.retry_policy),
                   replica_id=replica_id, group=group, layout=layout, clock=clock, cluster_master=cluster_master)

    @property
    def config(self) -> SparkCareerConfig:
        """The settings the standby was built with, which every career on it shares."""
        return self._config

    @property
    def hooks(self) -> Hooks:
        """The user's transform and row function, loaded once for every career on the standby."""
        return self._hooks

    # -- a follower's ---------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Check the user's transform; warm standby: start Spark and run the real pipeline once on a scratch sample;
        on a cluster, hold the standby application's executors (``standby_executors``). Cold standby does nothing
        here unless a transform is configured: then Spark starts for the check (on the session the follower warms
        up on) and stops again. Once done, nothing: the careers of every queue may each call it.

        Raises:
            HookError: the transform fails on an empty batch or breaks the output schema.
        """
        if self._prepared:
            return
        transform, spec = self._hooks.transform, self._config.transform
        check = None if transform is None or spec is None else (
            lambda session: check_transform(session, spec, transform))
        if check is not None:
            check(self._ensure_session(standby=True) if self._holds_standby
                  else self._ensure_session(master=self._warmup_master))
        if self._holds_standby:
            self._start_standby()
        else:
            if self._config.standby == "warm":
                self._warm_up(self._ensure_session(master=self._warmup_master), self._log)
            if self._session_per_term:
                self._stop_session()
            else:
                self._start_keep_warm()
        self._prepared = True

    def ready(self) -> bool:
        """True once ``prepare`` has finished, and no standby application is starting after a term."""
        restandby = self._restandby
        return self._prepared and (restandby is None or not restandby.is_alive())

    def unhealthy(self) -> str | None:
        """Why no career of the replica can work now, or None: once prepared, the session stopped (a dead one does
        not come back: restart the replica) or its JVM not answering within ``probe_timeout_s`` (a frozen one does
        not lead); the data root (and a shared queue folder) not writable, or short of disk.

        The career's health check calls this every few seconds in every state, so it is also where a follower on a
        cluster starts its next standby application after a term, on a thread of its own: not in ``term_ended``,
        because a replica that hands over on its way out needs none.
        """
        if self._standby_due and self._terms == 0:
            self._standby_due = False
            self._restandby = threading.Thread(target=self._restart_standby, name="tenure-standby", daemon=True)
            self._restandby.start()
        session = self._session
        if self._prepared and session is not None:
            try:
                stopped = self.jvm(lambda: _session_stopped(session))
            except Unresponsive as exc:
                return f"{exc} (frozen, or stuck in a long GC pause)"
            if stopped:
                return "the SparkSession has stopped (its JVM died?): restart the replica"
        return self._storage.problem()

    # -- a leader's -----------------------------------------------------------------------------------------

    def session_for_term(self, epoch: int, log: Any, records: Path) -> SparkSession:
        """The session a term ``epoch`` runs its query on, within ``warmup_timeout_s``: the follower's (its
        standby application on a cluster), or one started for the term. On a cluster, the term's application is
        recorded as this term's under ``records`` (its queue's ``_applications/``), and the cores earlier terms of
        that queue hold are reclaimed first, or, on standby executors, once the first batch has committed
        (``tend``).

        Raises:
            Unresponsive: Spark (or a standby application starting after the last term) did not start in time.
        """
        restandby = self._restandby
        if restandby is not None:  # the standby application this replica began after its last term
            restandby.join(self._config.warmup_timeout_s)
            if restandby.is_alive():
                raise Unresponsive(f"the standby application did not start within {self._config.warmup_timeout_s:g} s")
        self._records[epoch] = records
        if self._executors is None:  # an application of its own: its first batch needs an earlier term's cores
            self._reclaim_cores(epoch, log)
        else:  # its standby executors run the first batch: the reclaim (``_reclaim_if_due``) comes before the growth
            self._put_off_reclaim(epoch)
        session = call_within(lambda: self._ensure_session(epoch=epoch), self._config.warmup_timeout_s,
                              "starting Spark")
        self._record_application(epoch, log)
        return session

    def session(self) -> SparkSession:
        """The session, started on the configured master if none runs."""
        return self._ensure_session()

    def term_began(self) -> None:
        """A term has begun on the session: keep-warm idles until every open term has ended."""
        self._terms += 1

    def tend(self, term: Term) -> None:
        """Once per unit of a term's work, on a cluster: reclaim earlier terms' cores when that falls due, grow the
        standby application to the leader's share after the term's first batch, and tell the master that share
        again now and then."""
        self._reclaim_if_due(term)
        self._grow_share(term)

    def term_ended(self, epoch: int, log: Any) -> None:
        """Term ``epoch`` has ended (its query stopped). Once no term is open, a session that lives per term stops
        (on a cluster, its executors and their cores go with it), and a follower that holds a standby application
        starts its next one at the next health check."""
        self._terms = max(self._terms - 1, 0)
        self.term_not_begun(epoch)
        if self._terms == 0 and self._session_per_term:
            self._stop_keep_warm()
            self._stop_application(log)
            self._standby_due = self._holds_standby and self._prepared

    def term_not_begun(self, epoch: int) -> None:
        """Term ``epoch`` will not run (any more) on the session: forget its reclaim, and its application's record if
        the application lives on for the replica's other terms (the queue's next leader must not kill it). Once
        no term is open the record stays: the application stops, and should that stop hang, the successor kills
        it."""
        self._reclaim_at.pop(epoch, None)
        records = self._records.pop(epoch, None)
        if records is not None and self._terms > 0 and self._cluster_master is not None:
            forget_application(records, epoch)

    def close(self) -> None:
        """Stop a standby application still starting, the keep-warm heartbeat, the listener and, if the standby
        started Spark, Spark itself. Call it once every term on the session has ended."""
        self._closing.set()  # a standby application still starting stops itself once started
        restandby = self._restandby
        if restandby is not None:
            restandby.join(self._session_stop_s)
        self._stop_keep_warm()
        session = self._session
        if session is not None:
            # A session this standby did not start lives on: it must stop calling this standby's listener.
            with contextlib.suppress(Exception):  # stopped, or its JVM gone: the listener went with it
                self.jvm(lambda: session.streams.removeListener(self.progress))
        if self._owned:
            self._stop_session()
        self._session = None

    # -- internals -------------------------------------------------------------------------------------------

    @property
    def _session_per_term(self) -> bool:
        """Whether the Spark this standby started lives only from inauguration to hand-over: cold standby, or a
        cluster master (a term's application holds its share of the cluster's cores only while it leads)."""
        return self._owned and (self._config.standby == "cold" or self._config.on_cluster)

    @property
    def _holds_standby(self) -> bool:
        """Whether a follower holds a standby application on the cluster (warm standby, ``standby_executors``)."""
        return self._config.on_cluster and self._config.standby == "warm" and self._config.standby_executors > 0

    @property
    def _warmup_master(self) -> str:
        """Where a follower warms up without a standby application: locally on a cluster (it holds none of the
        cluster's cores), on the configured master otherwise."""
        return _LOCAL_WARMUP_MASTER if self._config.on_cluster else self._config.spark_master

    def _warm_up(self, session: SparkSession, log: Any, scratch_parent: Path | None = None) -> None:
        started = self._clock()
        warm_up(session, self._config, self._hooks, replica_id=self._replica_id, log=log,
                scratch_parent=scratch_parent)
        log.info("warmed_up", seconds=round(self._clock() - started, 3))

    def _start_keep_warm(self, renew: Callable[[], None] | None = None) -> None:
        if self._config.standby == "warm" and self._config.keep_warm_interval_s and self._session is not None:
            self._keep_warm = KeepWarm(self._session, self._config.keep_warm_interval_s,
                                       idle=lambda: self._terms == 0, log=self._log, renew=renew)
            self._keep_warm.start()

    def _stop_keep_warm(self) -> None:
        if self._keep_warm is not None:
            self._keep_warm.stop()
            self._keep_warm = None

    def _start_standby(self) -> None:
        """A follower on a cluster: start its standby application, hold ``standby_executors`` executors on it and
        warm them with the real pipeline, so that leading needs no executor to start. Runs in ``prepare``, and
        after each term on a thread of its own (``ready`` is False until it ends).

        The cluster may have no free core (the leader's share and the other followers' standby hold them all):
        past ``warmup_timeout_s`` the follower logs ``standby_without_executors``, warms up locally and holds
        nothing, and its application starts at inauguration as it would with ``standby_executors=0``. A cluster
        that fails the application (its master down) is logged as ``standby_failed`` and met the same way.
        """
        started = self._clock()
        try:
            session = self._ensure_session(standby=True)
            executors = StandbyExecutors(session, self._config.standby_executors, self._clock)
            held = executors.hold(self._config.warmup_timeout_s)
        except Exception as exc:  # the cluster or Spark failed: the next term starts an application of its own
            held = 0
            if not self._closing.is_set():
                self._log.warning("standby_failed", error=f"{type(exc).__name__}: {str(exc)[:1000]}")
        else:
            if held == 0:
                self._log.warning(STANDBY_WITHOUT_EXECUTORS, waited_s=round(self._clock() - started, 3),
                                  effect="this follower's first batch as leader waits for its executors to start",
                                  fix="give the cluster free cores for each follower (spark.cores.max below the "
                                      "cluster's total minus the followers' standby_executors)")
        if held == 0 or self._closing.is_set():
            with contextlib.suppress(Exception):  # a failed application may fail its stop too
                self._stop_session()
            if not self._closing.is_set():
                self._warm_up(self._ensure_session(master=_LOCAL_WARMUP_MASTER), self._log)
                self._stop_session()
            return
        self._executors = executors
        self._log.info(STANDBY_EXECUTORS_HELD, executors=held, app_id=session.sparkContext.applicationId,
                       seconds=round(self._clock() - started, 3))
        self._warm_up(session, self._log, scratch_parent=self._layout.standby)
        self._start_keep_warm(renew=executors.renew)

    def _restart_standby(self) -> None:
        try:
            self._start_standby()
        except Exception as exc:  # the local warm-up failed too: the next term starts an application of its own
            if not self._closing.is_set():
                self._log.warning("standby_failed", error=f"{type(exc).__name__}: {str(exc)[:1000]}")
            with contextlib.suppress(Exception):
                self._stop_session()

    def _grow_share(self, term: Term) -> None:
        """Grow the term's standby application to the leader's share once its first batch has finished, then
        tell the master that share again every ``_RENEW_S`` (``StandbyExecutors.renew``).

        Not before: executors that register while the first batch runs take its tasks and run them cold (JVM,
        Python workers, code generation), which made the first batch slower than on the warm standby executor
        alone."""
        share = self._executors
        if share is None or term.completed == 0 or (share.grown and self._clock() < self._share_renewed_at + _RENEW_S):
            return
        self._share_renewed_at = self._clock()
        try:
            self.jvm(share.renew if share.grown else share.grow)
        except Exception as exc:  # Unresponsive is the health check's to act on; a refusal is tried again
            term.log.debug("share_not_renewed", error=repr(exc)[:500])

    def _reclaim_if_due(self, term: Term) -> None:
        """Reclaim once it falls due: a put-off reclaim right before the share grows, after the term's first batch
        (``_put_off_reclaim``); a reclaim the master failed ``_RENEW_S`` later, again and again while the term leads
        (a master's web UI slow to answer under load once would otherwise leave a paused leader's cores held for
        the whole term)."""
        pending = self._reclaim_at.get(term.epoch)
        if pending is None:
            return
        due, at_first_batch = pending
        if self._clock() >= due or (at_first_batch and term.completed > 0):
            self._reclaim_cores(term.epoch, term.log)

    def _put_off_reclaim(self, epoch: int) -> None:
        """A term on its standby executors: reclaim an earlier term's cores right before it grows, once its first
        batch has committed, or ``_RENEW_S`` after inauguration if that batch takes longer (``_reclaim_if_due``).
        Not at inauguration: asking the master costs the handover up to a second, and the kill's executors
        stopping would take CPU from the first batch."""
        if self._cluster_master is not None:
            self._reclaim_at[epoch] = (self._clock() + _RENEW_S, True)

    def _record_application(self, epoch: int, log: Any) -> None:
        """On a cluster, once the term's application is up: record it as this term's, so that a successor can kill
        it should this leader pause (a standby application grows to the leader's share later, ``_grow_share``).
        Best effort, within the probe timeout: a failure costs the term a warning."""
        session = self._session
        if session is None or self._cluster_master is None:
            return
        records = self._records[epoch]

        def claim() -> None:
            record_application(records, epoch, session.sparkContext.applicationId, self._replica_id)

        try:
            call_within(claim, self._config.health.probe_timeout_s, "recording the term's application")
        except Exception as exc:
            log.warning("application_not_recorded", error=f"{type(exc).__name__}: {exc}",
                        effect="a successor may not free this term's cores should its leader pause")

    def _reclaim_cores(self, epoch: int, log: Any) -> None:
        """On a cluster, before the term grows its application: kill the applications of earlier terms still
        holding cores. The step is best effort: a master that does not answer, answers garbage or refuses the kill
        within the probe timeout costs the term a warning, and the leader tries again every ``_RENEW_S`` while
        it leads (``_retry_reclaim``); until then its application waits for those cores."""
        master = self._cluster_master
        if master is None:
            return
        tried_at = self._clock()
        records, session = self._records[epoch], self._session

        def reclaim() -> None:
            own = session.sparkContext.applicationId if session is not None else None
            reclaim_cores(master, records, epoch=epoch, log=log, own=own)

        try:
            call_within(reclaim, self._config.health.probe_timeout_s, "reclaiming the cluster's cores")
            self._reclaim_at.pop(epoch, None)
        except Exception as exc:  # nothing the master does may fail the term
            self._reclaim_at[epoch] = (tried_at + _RENEW_S, False)
            log.warning(STALE_APPLICATIONS_LEFT, error=f"{type(exc).__name__}: {exc}",
                        fix="the term's application may wait for cores an earlier term's paused leader holds: "
                            "check that the master's web UI answers at --spark-master-webui and that "
                            "spark.ui.killEnabled is true on the master")

    def _ensure_session(self, *, master: str | None = None, epoch: int | None = None,
                        standby: bool = False) -> SparkSession:
        """The session, started if need be: on ``master`` (default: the configured one). A session started for a
        term (``epoch``) names its application after the term; a follower's standby application on a cluster
        (``standby``) after the follower, and it holds ``standby_executors`` executors (``_executors``)."""
        master = master or self._config.spark_master
        if self._session is None:
            stopping = self._application_stopped
            if stopping is not None and not stopping.wait(self._config.warmup_timeout_s):
                raise Unresponsive(f"the previous term's Spark application has not stopped within "
                                   f"{self._config.warmup_timeout_s:g} s")
            conf = {
                "spark.sql.streaming.stopTimeout": str(int(self._stop_s * 1000)),
                # a standby executor of one core (Spark's standalone default: every core of its worker)
                **({"spark.executor.cores": "1"} if standby else {}),
                **self._config.spark_conf,
                **(standby_conf(self._config.standby_executors) if standby else {}),
            }
            app_name = self._config.app_name
            if standby:
                app_name = standby_application_name(app_name, self._group, self._replica_id)
            elif epoch is not None:
                app_name = term_application_name(app_name, self._group, epoch)
            self._session, self._owned = build_session(
                master, app_name=app_name,
                shuffle_partitions=self._config.shuffle_partitions, extra_conf=conf,
                fork_server_on=self._config.fork_server == "on")
            self._session.streams.addListener(self.progress)
        else:
            use_driver_python(self._session, master, fork_server_on=self._config.fork_server == "on")
        return self._session

    def _stop_session(self) -> None:
        if self._session is not None:
            self._session.sparkContext.stop()
            self._session = None
            self._owned = False

    def _stop_application(self, log: Any) -> None:
        """Stop the term's own Spark within its share of the budget (on a cluster the executors go with the
        application, freeing the cores). A stop that overruns goes on in the background, and the next
        ``_ensure_session`` waits for it: PySpark allows one SparkContext at a time.

        With standby executors the hand-over does not wait at all: the successor's first batch runs on the
        executors it held as a follower, and it grows into these cores only after that batch, so the stop runs on
        beside the handover record and the release (0.9 s of the gap on the embedded cluster when it waited)."""
        session, self._session, self._owned, self._executors = self._session, None, False, None
        if session is None:
            return
        stopped = self._application_stopped = threading.Event()

        def stop() -> None:
            try:
                session.sparkContext.stop()
            except Exception as exc:  # py4j: the gateway is gone, so is the application
                log.warning("spark_stop_failed", error=repr(exc)[:500])
            finally:
                stopped.set()

        if self._holds_standby:
            threading.Thread(target=stop, name="tenure-stop-application", daemon=True).start()
            return
        try:
            call_within(stop, self._session_stop_s, "stopping the Spark application")
        except Unresponsive as exc:
            log.warning("spark_stop_timed_out", reason=str(exc))
