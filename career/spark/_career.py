"""The Spark career's lifecycle: prepare (warm standby), inaugurate, execute, hand over (ARCHITECTURE.md "One
term's lifecycle").

The batches themselves run in ``_batch`` on Spark's thread; this module starts, watches, restarts and stops
the query from the runner's control thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Final

import structlog
from pyspark.sql import SparkSession

from tenure.career._deadline import Probe, call_within
from tenure.career._health import StorageHealth
from tenure.career._protocol import BatchFailed, CareerContext, CareerObserver, Outcome
from tenure.career.lifecycle import HANDED_OVER, INAUGURATED
from tenure.career.spark._batch import BatchWriter
from tenure.career.spark._cluster import (
    STALE_APPLICATIONS_LEFT,
    ClusterMaster,
    reclaim_cores,
    record_application,
    standby_application_name,
    term_application_name,
)
from tenure.career.spark._config import SparkCareerConfig
from tenure.career.spark._errors import CommitRecordError, SparkCareerError
from tenure.career.spark._executors import StandbyExecutors, standby_conf
from tenure.career.spark._hooks import Hooks, check_transform, load_hook
from tenure.career.spark._housekeeping import Housekeeper
from tenure.career.spark._marks import ConsumptionMarks
from tenure.career.spark._progress import BATCH_PROGRESS, ProgressInbox, progress_figures
from tenure.career.spark._query import query_name, start_query
from tenure.career.spark._record import check_record
from tenure.career.spark._recovery import repair_checkpoint, repair_delta_log
from tenure.career.spark._session import build_session, use_driver_python
from tenure.career.spark._storage import (
    Layout,
    StaleTermError,
    adopt_checkpoint,
    adopt_outputs,
    finish_publish,
    is_published,
    remove_dead_staging,
    spark_committed,
)
from tenure.career.spark._term import Term, TermClock, committed_batch, no_fault
from tenure.career.spark._warmup import KeepWarm, warm_up
from tenure.errors import CommitOutcomeUnknown, ElectionError, Fenced, NotLeader, Unresponsive

__all__ = ["QUERY_STARTED", "STANDBY_EXECUTORS_HELD", "STANDBY_WITHOUT_EXECUTORS", "TORN_FILES_REMOVED", "SparkCareer"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
QUERY_STARTED: Final = "query_started"
TORN_FILES_REMOVED: Final = "torn_files_removed"
STANDBY_EXECUTORS_HELD: Final = "standby_executors_held"
STANDBY_WITHOUT_EXECUTORS: Final = "standby_without_executors"

_POLL_S = 0.02
_RENEW_S = 30.0  # how often a leader on a cluster tells the master its share again
_LOCAL_WARMUP_MASTER = "local[1]"  # a follower's warm-up on a cluster when it holds no executors there
#: A batch that fails for one of these failed because ZooKeeper did, not because of its data: no attempt counts
#: (the election raises ``ZooKeeperUnavailable``, an ``ElectionError``, for kazoo's own errors).
_INFRASTRUCTURE = (ElectionError, Unresponsive)


def _session_stopped(session: SparkSession) -> bool:
    """Whether the session's SparkContext has stopped (a py4j call: may hang on a frozen JVM)."""
    try:
        return bool(session.sparkContext._jsc.sc().isStopped())
    except Exception:  # py4j: the gateway itself is gone
        return True


class SparkCareer:
    """The leader's work: a Structured Streaming consumer whose output is made visible by fenced commits.

    Implements ``career.Career``. The query runs on Spark's own thread with a processing-time trigger;
    ``execute`` (the runner's control thread) starts it, watches its health, archives consumed files and
    reports the backlog. Each batch stages Parquet, commits through the fence, then publishes (see
    ``_batch.BatchWriter``); a re-run of a committed batch id is skipped, so the output is exactly once.

    Example::

        career = SparkCareer(SparkCareerConfig(data_root=Path("/srv/tenure")), observer, replica_id="r1")
        career.prepare()                       # warm standby: Spark up and warmed on a scratch sample
        career.inaugurate(ctx)                 # elected: roll forward, clean dead staging
        while leading:
            career.execute() or time.sleep(0.1)
        last_batch = career.hand_over(Outcome.CLEAN)
        career.close()

    Args:
        config: the career's settings.
        observer: receives batch, commit and backlog figures (metrics).
        replica_id: stored in commit records and bound to every log event.
        clock: monotonic clock in seconds (injectable).
        group: the consumer group; names its consumption marks on the queue (``consumed/<group>/``).
        registered_groups: the groups registered on the queue (``config.queue_dir``), read before each
            archiving round; a queue file is archived only once all of them (and this group) have consumed
            it, and not at all while this raises (registry unreachable). Default None: the only consumer.
        faults: a fault-injection hook for tests and drills, called with the name of each dangerous window as
            it is reached (``inaugurate``, ``after_stage``, ``after_commit``, ``after_publish``,
            ``after_checkpoint``; ``tenure.service.replica.FAULT_POINTS`` describes them). What it raises inside a
            batch, ``execute`` raises as is. Default None: no faults.
        cluster_master: on a cluster, the master's applications: a new leader kills there the applications of
            its group's earlier terms (a paused leader's) before it starts its own (``_cluster``). Default None:
            a paused leader's application keeps its cores until it resumes or dies.
    """

    def __init__(self, config: SparkCareerConfig, observer: CareerObserver, *, replica_id: str,
                 clock: Callable[[], float] = time.monotonic, group: str = "default",
                 registered_groups: Callable[[], Collection[str]] | None = None,
                 faults: Callable[[str], None] | None = None, cluster_master: ClusterMaster | None = None) -> None:
        self._config = config
        self._group = group
        self._cluster_master = cluster_master if config.on_cluster else None
        self._observer = observer
        self._replica_id = replica_id
        self._clock = clock
        queue_root = Path(config.queue_dir).resolve() if config.queue_dir is not None else None
        self._layout = Layout(Path(config.data_root).resolve(), queue_root)
        self._marks = ConsumptionMarks(self._layout, group, registered_groups)
        self._log = structlog.get_logger("tenure.career.spark").bind(replica_id=replica_id)
        self._session: SparkSession | None = None
        self._owned = False
        self._prepared = False
        self._term: Term | None = None
        self._keep_warm: KeepWarm | None = None
        self._faults = faults if faults is not None else no_fault
        self._progress = ProgressInbox()
        self._housekeeper = Housekeeper(self._layout, config, observer, clock, self._faults)
        self._jvm = Probe("Spark's JVM", config.health.probe_timeout_s)  # every call from the control thread into it
        self._application_stopped: threading.Event | None = None  # set once a term's own Spark has stopped
        self._executors: StandbyExecutors | None = None  # the standby application's, while it runs (cluster)
        self._share_renewed_at = 0.0
        self._reclaim_at: float | None = None  # when the term's put-off or failed reclaim falls due (None: none)
        self._restandby: threading.Thread | None = None  # a new standby application starting after a term
        self._standby_due = False  # a term has ended: the next health check starts the next standby application
        self._closing = threading.Event()
        self._storage = StorageHealth(dict.fromkeys((config.data_root, config.queue_dir or config.data_root)),
                                      min_free_bytes=config.health.min_free_bytes,
                                      timeout_s=config.health.probe_timeout_s)
        self._wait_s, self._stop_s, self._session_stop_s = config.handover_split()
        self._hooks = Hooks(
            transform=load_hook("transform", config.transform) if config.transform else None,
            row_function=load_hook("row_function", config.row_function) if config.row_function else None,
            policy=config.retry_policy,
        )

    # -- lifecycle -------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Check the transform; warm standby: start Spark and run the real pipeline once on a scratch sample.

        Cold standby does nothing here unless a transform is configured: then Spark starts for the check and
        stops again.

        Raises:
            HookError: the transform fails on an empty batch or breaks the output schema.
        """
        if self._prepared:
            return
        if self._hooks.transform is not None and self._config.transform is not None:
            session = (self._ensure_session(standby=True) if self._holds_standby
                       else self._ensure_session(master=self._warmup_master))
            check_transform(session, self._config.transform, self._hooks.transform)
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
        """The data root (and a shared queue) writable with enough disk free; once prepared, the SparkSession
        alive (a dead one does not come back: restart the replica) and its JVM answering within
        ``probe_timeout_s`` (a frozen one does not lead).

        The runner calls this every few seconds in every state, so it is also where a follower on a cluster
        starts its next standby application after a term, on a thread of its own: not in ``hand_over``, because
        a replica that hands over on its way out needs none.
        """
        if self._standby_due and self._term is None:
            self._standby_due = False
            self._restandby = threading.Thread(target=self._restart_standby, name="tenure-standby", daemon=True)
            self._restandby.start()
        session = self._session
        if self._prepared and session is not None:
            try:
                stopped = self._jvm(lambda: _session_stopped(session))
            except Unresponsive as exc:
                return f"{exc} (frozen, or stuck in a long GC pause)"
            if stopped:
                return "the SparkSession has stopped (its JVM died?): restart the replica"
        return self._storage.problem()

    def inaugurate(self, ctx: CareerContext) -> None:
        """Begin a term: take a checkpoint of its own, remove what a power loss left torn in it and in the Delta
        logs (``_recovery``), roll a committed-but-unpublished batch forward, delete staging of dead epochs. Each
        step is safe even if this term is already stale (see ``_batch.BatchWriter``).

        The query starts on the first ``execute``.

        Raises:
            SparkCareerError: a term is still open, or the checkpoint never saw the committed batch, or a file a
                power loss tore cannot be rebuilt (``TornFileError``), or the commit record is not one tenure
                wrote (``CommitRecordError``).
            NotLeader: leadership was lost before the term could start.
            Fenced: a newer term has committed or started.
            Unresponsive: Spark did not start (or answer) within ``warmup_timeout_s``.
        """
        if self._term is not None:
            raise SparkCareerError(f"inaugurate(epoch {ctx.epoch}) while epoch {self._term.epoch} is still open; "
                                   "call hand_over first")
        started = self._clock()
        log = self._log.bind(epoch=ctx.epoch)
        restandby = self._restandby
        if restandby is not None:  # the standby application this replica began after its last term
            restandby.join(self._config.warmup_timeout_s)
            if restandby.is_alive():
                raise Unresponsive(f"the standby application did not start within {self._config.warmup_timeout_s:g} s")
        if self._executors is None:  # an application of its own: its first batch needs an earlier term's cores
            self._reclaim_cores(ctx.epoch, log)
        else:  # its standby executors run the first batch: the reclaim comes before the growth (``_grow_share``)
            self._put_off_reclaim()
        call_within(lambda: self._ensure_session(epoch=ctx.epoch), self._config.warmup_timeout_s, "starting Spark")
        self._record_application(ctx.epoch, log)
        layout = self._layout
        for folder in (layout.landing, layout.table, layout.quarantine, layout.archive):
            folder.mkdir(parents=True, exist_ok=True)
        record, _version = ctx.fence.read_commit()
        check_record(layout, record)  # before anything acts on what it names
        self._faults("inaugurate")
        if record is not None and int(record.get("epoch") or 0) > ctx.epoch:
            raise Fenced(f"inaugurate(epoch {ctx.epoch}): the commit record has epoch {record.get('epoch')}; "
                         "a newer leader has committed")
        if not ctx.still_leading():
            raise NotLeader(f"inaugurate(epoch {ctx.epoch}): leadership lost before the term started")
        copying = self._clock()
        try:
            checkpoint, copied_from = adopt_checkpoint(layout, ctx.epoch)
        except StaleTermError as exc:
            raise Fenced(str(exc)) from exc
        # What a power loss left empty or torn, before Spark or delta-rs reads it and stops for good.
        torn = [f"{layout.relative(checkpoint)}/{name}" for name in repair_checkpoint(checkpoint,
                                                                                     committed_batch(record))]
        torn += [f"{layout.relative(output)}/{name}" for output in layout.delta_outputs().values()
                 for name in repair_delta_log(output)]
        if torn:
            log.warning(TORN_FILES_REMOVED, files=torn, effect="Spark plans or runs again the batches they were "
                        "part of; a committed batch's Delta version is added again by the roll-forward")
        checkpoint_s = self._clock() - copying
        term = Term(ctx=ctx, log=log, marks=self._marks, checkpoint=checkpoint, clock=TermClock(record))
        rolled = 0
        adopted: list[str] = []
        outputs_s = 0.0
        committed = committed_batch(record)
        if record is not None and committed is not None:
            # Batch ids are the checkpoint's: a checkpoint that never planned the committed batch (deleted,
            # replaced, another data root) would restart at batch 0 and every batch up to the committed id
            # would be skipped as a re-run — silent loss. Refuse instead.
            if not (checkpoint / "offsets" / str(committed)).exists():
                raise SparkCareerError(
                    f"ZooKeeper says batch {committed} is committed (epoch {record.get('epoch')}), but the "
                    f"checkpoint {layout.checkpoint} has no such batch: it was deleted or belongs elsewhere. "
                    "Restore the checkpoint, or start a new consumer group with a new data root")
            term.last_committed = committed
            term.last_record = record
            outputs = self._clock()
            if not is_published(layout, record):
                rolled = finish_publish(layout, record).moved
            adopted = adopt_outputs(layout, record)  # a data root of a release before the Delta outputs
            outputs_s = self._clock() - outputs
        removed = remove_dead_staging(layout, ctx.epoch)
        self._term = term
        archived = self._housekeeper.archive_committed(term)
        log.info(INAUGURATED, epoch=ctx.epoch, batch=term.last_committed, rolled_forward=rolled,
                 removed_staging=len(removed), archived=archived, clean=ctx.after_clean_handover,
                 **({"adopted_as_delta": adopted} if adopted else {}),
                 checkpoint_from=copied_from, checkpoint_s=round(checkpoint_s, 3), outputs_s=round(outputs_s, 3),
                 seconds=round(self._clock() - started, 3))

    def execute(self) -> bool:
        """Start the query on the first call, then check its health; True if a batch finished since last call.

        Raises:
            Fenced: a batch's commit was fenced (a newer leader exists): hand over.
            CommitOutcomeUnknown: a batch's commit lost its reply and could not be read back: end the term.
            BatchFailed: a batch failed on its own (its error is chained): the attempt counts against it.
            SparkCareerError: the query died for another reason, such as ZooKeeper being unreachable from a
                batch (the error is chained); what the fault hook raised in a batch is raised as is.
            Unresponsive: Spark's JVM did not answer within ``probe_timeout_s``.
        """
        term = self._term
        if term is None:
            raise SparkCareerError("execute() before inaugurate(): there is no term to work for")
        query = term.query
        if query is None:
            self._start_query(term)
            return False
        if not self._jvm(lambda: bool(query.isActive)) and not self._recover_query(term):
            return False
        self._housekeeper.run(term)
        self._retry_reclaim(term)
        self._grow_share(term)
        self._report_progress(term)
        with term.lock:
            changed = term.completed != term.reported
            term.reported = term.completed
        return changed

    def _report_progress(self, term: Term) -> None:
        """Log each batch's Spark progress (``batch_progress``: where its time went, its state store), and report
        rows Spark dropped as older than the watermark: they are in no output, so they are logged and counted,
        never silent."""
        for progress in self._progress.drain():
            dropped = sum(op.numRowsDroppedByWatermark for op in progress.stateOperators)
            if dropped:
                term.log.error("rows_dropped_by_watermark", rows=dropped, batch=progress.batchId,
                               effect="these rows are in no output: `tenure verify` counts their ids as lost")
                self._observer.records_dropped(dropped)
            if "addBatch" in progress.durationMs:  # a trigger that ran a batch (not an idle one)
                term.log.info(BATCH_PROGRESS, **progress_figures(progress))

    def hand_over(self, outcome: Outcome) -> int | None:
        """End the term; returns the last committed batch id.

        CLEAN: no new batch starts; the batch in flight finishes its commit and publish and Spark commits it
        to the checkpoint, bounded by its share of the handover budget (``SparkCareerConfig.handover_split``); then
        the query stops. REVOKED/FAILED: the query stops at once (a batch in flight is abandoned; its commit would
        be fenced anyway).

        Raises:
            Unresponsive: Spark's JVM did not answer, so the query could not be stopped (the runner fail-stops).
        """
        term = self._term
        if term is None:
            return None
        started = self._clock()
        term.stop.set()
        query = term.query
        if query is not None:
            self._answers(query)
        timed_out = False
        if query is not None and outcome is Outcome.CLEAN:
            timed_out = not self._wait_for_quiet(term, started + self._wait_s)
        if query is not None:
            self._stop_query(term, query)
        self._report_progress(term)
        self._progress.watch(None)
        # Only if Spark's checkpoint has the batch: then no re-run needs its files.
        self._housekeeper.archive_committed(term)
        self._term = None
        term.log.info(HANDED_OVER, outcome=outcome.value, batch=term.last_committed, timed_out=timed_out,
                      seconds=round(self._clock() - started, 3))
        self._reclaim_at = None
        if self._session_per_term:
            self._stop_keep_warm()
            self._stop_application(term)
            self._standby_due = self._holds_standby and self._prepared
        return term.last_committed

    def _stop_application(self, term: Term) -> None:
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
                term.log.warning("spark_stop_failed", error=repr(exc)[:500])
            finally:
                stopped.set()

        if self._holds_standby:
            threading.Thread(target=stop, name="tenure-stop-application", daemon=True).start()
            return
        try:
            call_within(stop, self._session_stop_s, "stopping the Spark application")
        except Unresponsive as exc:
            term.log.warning("spark_stop_timed_out", reason=str(exc))

    def _answers(self, query: Any) -> None:
        """Raise Unresponsive when Spark's JVM does not answer a probe (at once while an earlier one, say the
        health check's, still waits): its query cannot be stopped. A query or JVM that died answers with an
        error, which leaves nothing running to stop."""
        try:
            self._jvm(lambda: bool(query.isActive))
        except Unresponsive:
            raise
        except Exception as exc:
            self._log.debug("query_probe_error", error=repr(exc)[:500])

    def _stop_query(self, term: Term, query: Any) -> None:
        """``query.stop()`` within its share of the hand-over budget (Spark's own ``stopTimeout`` is the same).

        Raises:
            Unresponsive: the stop timed out and the JVM does not answer a probe either. A frozen JVM's query
                runs on when it thaws, so the replica must fail-stop, not hand over as if the query had stopped.
        """
        try:
            call_within(query.stop, self._stop_s + 1.0, "stopping the streaming query")
        except Unresponsive as exc:
            term.log.warning("query_stop_timed_out", reason=str(exc), in_flight=term.in_flight)
            self._answers(query)  # a batch running long answers; a frozen JVM does not
        except Exception as exc:  # stopping a query that died: nothing more to stop
            term.log.debug("query_stop_error", error=repr(exc)[:500])

    def close(self) -> None:
        """Stop the keep-warm heartbeat, the archive sweep, a running query and, if this career started Spark,
        Spark itself."""
        self._housekeeper.close()
        self._closing.set()  # a standby application still starting stops itself once started
        restandby = self._restandby
        if restandby is not None:
            restandby.join(self._session_stop_s)
        self._stop_keep_warm()
        if self._term is not None:
            try:
                self.hand_over(Outcome.FAILED)
            except Unresponsive as exc:  # a frozen JVM at the end: the process's exit kills it
                self._log.warning("spark_unresponsive_at_close", reason=str(exc))
        session = self._session
        if session is not None:
            # A session this career did not start lives on: it must stop calling this career's listener.
            with contextlib.suppress(Exception):  # stopped, or its JVM gone: the listener went with it
                self._jvm(lambda: session.streams.removeListener(self._progress))
        if self._owned:
            self._stop_session()
        self._session = None

    # -- internals -------------------------------------------------------------------------------------------

    @property
    def _session_per_term(self) -> bool:
        """Whether the Spark this career started lives only from inauguration to hand-over: cold standby, or a
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
                                       idle=lambda: self._term is None, log=self._log, renew=renew)
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
        if not share.grown and self._reclaim_at is not None:  # an earlier term's cores first: it grows into them
            self._reclaim_cores(term.epoch, term.log)
        try:
            self._jvm(share.renew if share.grown else share.grow)
        except Exception as exc:  # Unresponsive is the health check's to act on; a refusal is tried again
            term.log.debug("share_not_renewed", error=repr(exc)[:500])

    def _retry_reclaim(self, term: Term) -> None:
        """Try a reclaim the master failed again, every ``_RENEW_S`` while the term leads (a master's web UI slow
        to answer under load once would otherwise leave a paused leader's cores held for the whole term)."""
        if self._reclaim_at is not None and self._clock() >= self._reclaim_at:
            self._reclaim_cores(term.epoch, term.log)

    def _put_off_reclaim(self) -> None:
        """A term on its standby executors: reclaim an earlier term's cores right before it grows, once its first
        batch has committed, or ``_RENEW_S`` after inauguration if that batch takes longer (``_retry_reclaim``).
        Not at inauguration: asking the master costs the handover up to a second, and the kill's executors
        stopping would take CPU from the first batch."""
        self._reclaim_at = self._clock() + _RENEW_S if self._cluster_master is not None else None

    def _record_application(self, epoch: int, log: Any) -> None:
        """On a cluster, once the term's application is up: record it as this term's, so that a successor can kill
        it should this leader pause (a standby application grows to the leader's share later, ``_grow_share``).
        Best effort, within the probe timeout: a failure costs the term a warning."""
        session = self._session
        if session is None or self._cluster_master is None:
            return
        records = self._layout.applications

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
        try:
            call_within(lambda: reclaim_cores(master, self._layout.applications, epoch=epoch, log=log),
                        self._config.health.probe_timeout_s, "reclaiming the cluster's cores")
            self._reclaim_at = None
        except Exception as exc:  # nothing the master does may fail the term
            self._reclaim_at = tried_at + _RENEW_S
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
                shuffle_partitions=self._config.shuffle_partitions, extra_conf=conf)
            self._session.streams.addListener(self._progress)
        else:
            use_driver_python(self._session, master)
        return self._session

    def _stop_session(self) -> None:
        if self._session is not None:
            self._session.sparkContext.stop()
            self._session = None
            self._owned = False

    def _start_query(self, term: Term) -> None:
        started = self._clock()
        session = self._ensure_session()
        writer = BatchWriter(term, self._layout, self._config, self._observer, self._replica_id, self._hooks,
                             self._faults)
        name = query_name(self._replica_id, term.epoch, term.restarts)
        term.error, term.failed = None, None

        def start() -> Any:
            query = start_query(session, self._config, self._layout, writer, name=name, checkpoint=term.checkpoint,
                                marks=self._layout.queue.marks(self._marks.group), clock=term.clock)
            self._progress.watch(str(query.runId))
            return query

        term.query = call_within(start, self._config.warmup_timeout_s, "starting the streaming query")
        term.log.info(QUERY_STARTED, query=name, seconds=round(self._clock() - started, 3))

    def _recover_query(self, term: Term) -> bool:
        """The query has stopped on its own. Restart it after a leadership pause; otherwise raise."""
        error = term.error
        if isinstance(error, NotLeader) and not term.stop.is_set():
            if not term.ctx.still_leading():
                return False  # still suspended: the runner pauses us or revokes the term
            term.restarts += 1
            term.log.info("query_restarting", reason="leadership resumed", restarts=term.restarts)
            self._start_query(term)
            return False
        if isinstance(error, (Fenced, CommitOutcomeUnknown)) or (error is not None and error is term.injected):
            # A fenced commit, or one whose reply was lost, ends the term the same way from a batch as from the
            # control thread: the runner catches both by name (neither is the career's failure).
            raise error
        query = term.query
        exc = self._jvm(query.exception) if query is not None else None
        if isinstance(error, _INFRASTRUCTURE):
            raise SparkCareerError(f"epoch {term.epoch}: a batch could not reach ZooKeeper: {error}") from error
        if isinstance(error, CommitRecordError):
            raise error  # the record's fault, not the batch's: no attempt counts, no healthy batch is set aside
        if error is not None and term.failed is not None:
            raise BatchFailed(term.failed, f"epoch {term.epoch}: batch {term.failed} failed: "
                                           f"{type(error).__name__}: {str(error)[:2000]}") from error
        detail = str(error) if error is not None else str(exc)
        raise SparkCareerError(f"epoch {term.epoch}: the streaming query stopped: {detail[:2000]}") from error

    def _wait_for_quiet(self, term: Term, deadline: float) -> bool:
        """Wait until no batch is in flight and the last one is in Spark's commit log (or the query ended)."""
        query = term.query
        while self._clock() < deadline:
            with term.lock:
                in_flight, last = term.in_flight, term.last_seen
            if in_flight is None and (last is None or spark_committed(term.checkpoint, last)
                                      or not self._jvm(lambda: bool(query.isActive))):
                return True
            time.sleep(_POLL_S)
        return False
