"""The Spark career's lifecycle: prepare, inaugurate, execute, hand over (ARCHITECTURE.md "One term's lifecycle").

The batches themselves run in ``_batch`` on Spark's thread; this module starts, watches, restarts and stops
the query from the runner's control thread. The session it runs on, and what keeps it ready to lead, are the
standby's (``_standby``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Final

import structlog

from tenure.career._deadline import call_within
from tenure.career._protocol import BatchFailed, CareerContext, CareerObserver, Outcome
from tenure.career.lifecycle import HANDED_OVER, INAUGURATED
from tenure.career.redis_queue import StreamLost
from tenure.career.spark._batch import BatchWriter
from tenure.career.spark._checkpoints import StaleTermError, adopt_checkpoint, spark_committed
from tenure.career.spark._cluster import ClusterMaster
from tenure.career.spark._config import SparkCareerConfig
from tenure.career.spark._errors import CommitRecordError, SparkCareerError
from tenure.career.spark._housekeeping import Housekeeper
from tenure.career.spark._layout import Layout
from tenure.career.spark._marks import ConsumptionMarks
from tenure.career.spark._prepared import Preloaded, StatePreparer
from tenure.career.spark._progress import BATCH_PROGRESS, progress_figures
from tenure.career.spark._publish import adopt_outputs, finish_publish, is_published
from tenure.career.spark._query import query_name, start_query
from tenure.career.spark._record import check_record
from tenure.career.spark._recovery import repair_checkpoint, repair_delta_log
from tenure.career.spark._redis_topic import LOST_RETRY_S, STREAM_LOST, GroupPositions, Trimmer
from tenure.career.spark._standby import SparkStandby
from tenure.career.spark._term import Term, TermClock, committed_batch, no_fault
from tenure.career.spark._upgrade import carry_spark_state
from tenure.errors import CommitOutcomeUnknown, ConfigError, ElectionError, Fenced, NotLeader, Unresponsive

__all__ = ["MAX_WORKER_RESTARTS", "QUERY_STARTED", "TORN_FILES_REMOVED", "SparkCareer", "worker_did_not_start"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
QUERY_STARTED: Final = "query_started"
TORN_FILES_REMOVED: Final = "torn_files_removed"

_POLL_S = 0.02
#: A batch that fails for one of these failed because ZooKeeper did, not because of its data: no attempt counts
#: (the election raises ``ZooKeeperUnavailable``, an ``ElectionError``, for kazoo's own errors).
_INFRASTRUCTURE = (ElectionError, Unresponsive)
#: What Spark says when a Python worker it launched did not connect back within its fixed 10 s: a Python data
#: source's planner and reader run in such workers, started afresh for each query, and on a loaded machine the
#: interpreter's start can take that long. Nothing of a batch ran.
_WORKER_DID_NOT_START = ("Python worker failed to connect back", "waiting for the Python worker to connect back")
#: Restarts of one term's query after a worker that did not start, before the term ends as failed.
MAX_WORKER_RESTARTS = 3


def worker_did_not_start(text: str) -> bool:
    """Whether a stopped query's error is a Python worker that did not start in time (``_WORKER_DID_NOT_START``)."""
    return any(marker in text for marker in _WORKER_DID_NOT_START)


class SparkCareer:
    """The leader's work for one queue of a topic: a Structured Streaming consumer whose output is made visible by
    fenced commits.

    Implements ``career.Career``. The query runs on Spark's own thread with a processing-time trigger;
    ``execute`` (the runner's control thread) starts it, watches its health, archives consumed files and
    reports the backlog. Each batch stages Parquet, commits through the fence, then publishes (see
    ``_batch.BatchWriter``); a re-run of a committed batch id is skipped, so the output is exactly once. The
    session comes from the career's :class:`SparkStandby`, which also warms it up, keeps it warm while the
    replica follows and, on a cluster, holds the follower's executors and the leader's cores.

    Queue ``queue`` of a topic of ``queues`` (default: the one queue of a topic of one) is read from its own
    ``landing/`` and written beside the other queues' batches (``_layout.Layout``): the careers of several queues
    of one replica share one standby (``standby``), so one SparkSession, each running its own query on it.

    Example::

        career = SparkCareer(SparkCareerConfig(data_root=Path("/srv/tenure")), observer, replica_id="r1")
        career.prepare()                       # warm standby: Spark up and warmed on a scratch sample
        career.inaugurate(ctx)                 # elected: roll forward, clean dead staging
        while leading:
            career.execute() or time.sleep(0.1)
        last_batch = career.hand_over(Outcome.CLEAN)
        career.close()

        # one replica, queues 0 and 1 of a topic of 4, on one session:
        standby = SparkStandby.for_replica(config, replica_id="r1", group="g")
        careers = [SparkCareer(config, observer, replica_id="r1", group="g", standby=standby, queue=k, queues=4)
                   for k in (0, 1)]
        ...                                    # each career through its own terms; then each closed, then
        standby.close()

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
            a paused leader's application keeps its cores until it resumes or dies. Used only by a standby the
            career builds itself.
        standby: the replica's standby (``SparkStandby.for_replica``, built from the same ``config``), which the
            careers of the queues it may lead share, and whose owner closes it once every career is closed.
            Default None: the career builds one of its own and closes it with itself.
        queue: the queue of the topic this career reads (0 ≤ ``queue`` < ``queues``).
        queues: the topic's number of queues (its ``_topic.json``'s); 1, the default, keeps every path, name and
            column of before topics had several queues.
        positions: on a Redis topic (``config.queue_url``), every group registered on it and its committed and
            checkpointed position in queue k's stream, read from ZooKeeper: the stream is trimmed below the slowest
            after each commit (``_redis_topic``). Default None: this group is the topic's only one.

    Raises:
        ConfigError: ``queue`` is not one of ``queues``, or a topic of several queues with a source other than the
            queue's own files, or a ``standby`` built from other settings.
        HookError: the user's code cannot be loaded (a standby of the career's own).
    """

    def __init__(self, config: SparkCareerConfig, observer: CareerObserver, *, replica_id: str,
                 clock: Callable[[], float] = time.monotonic, group: str = "default",
                 registered_groups: Callable[[], Collection[str]] | None = None,
                 faults: Callable[[str], None] | None = None, cluster_master: ClusterMaster | None = None,
                 standby: SparkStandby | None = None, queue: int = 0, queues: int = 1,
                 positions: GroupPositions | None = None) -> None:
        self._config = config
        self._observer = observer
        self._replica_id = replica_id
        self._clock = clock
        queue_root = Path(config.queue_dir).resolve() if config.queue_dir is not None else None
        self._layout = Layout(Path(config.data_root).resolve(), queue_root, queue, queues)
        if queues > 1 and config.redis_topic is None and (not config.file_source or config.source_path is not None):
            raise ConfigError(f"source_format={config.source_format!r} and source_path={config.source_path!r} read "
                              f"no queue of a topic of {queues} queues: a topic of several queues is read from its "
                              "queues' own landing/ folders (leave both unset)")
        self._marks = ConsumptionMarks(self._layout, group, registered_groups)
        topic = config.redis_topic
        self._trimmer = Trimmer(topic, queue, group, positions) if topic is not None else None
        self._log = structlog.get_logger("tenure.career.spark").bind(
            replica_id=replica_id, **({"queue": queue} if queues > 1 else {}))
        self._term: Term | None = None
        self._run_id: str | None = None  # the run of the term's query whose progress the standby keeps for us
        self._faults = faults if faults is not None else no_fault
        self._housekeeper = Housekeeper(self._layout, config, observer, clock, self._faults)
        split = config.handover_split()
        self._wait_s, self._stop_s = split.batch_s, split.query_stop_s
        if standby is not None and standby.config != config:
            raise ConfigError("the standby was built from other settings than this career's: build the replica's "
                              "standby and its careers from one SparkCareerConfig")
        self._owns_standby = standby is None
        self._standby = standby if standby is not None else SparkStandby.for_replica(
            config, replica_id=replica_id, group=group, clock=clock, cluster_master=cluster_master)
        self._hooks = self._standby.hooks
        self._jvm = self._standby.jvm  # every call from the control thread into Spark's JVM
        # What this replica keeps ready to lead the queue while it follows (``_prepared``), or nothing.
        self._preparer = StatePreparer(self._layout, replica_id, self._log, window_ms=config.dedup_window_ms) \
            if config.standby_state == "on" else None

    # -- lifecycle -------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Check the transform; warm standby: start Spark and run the real pipeline once on a scratch sample.

        Cold standby does nothing here unless a transform is configured: then Spark starts for the check and
        stops again.

        Raises:
            HookError: the transform fails on an empty batch or breaks the output schema.
        """
        self._standby.prepare()

    def ready(self) -> bool:
        """True once ``prepare`` has finished, and no standby application is starting after a term."""
        return self._standby.ready()

    def unhealthy(self) -> str | None:
        """The data root (and a shared queue) writable with enough disk free; once prepared, the SparkSession
        alive (a dead one does not come back: restart the replica) and its JVM answering within
        ``probe_timeout_s`` (a frozen one does not lead).

        The runner calls this every few seconds in every state, so it is also where a follower on a cluster
        starts its next standby application after a term (``SparkStandby.unhealthy``, which answers all of it).
        """
        return self._standby.unhealthy()

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
        try:
            self._standby.session_for_term(ctx.epoch, log, self._layout.applications)
            self._open_term(ctx, log, started)
        except BaseException:
            if self._term is None:
                self._standby.term_not_begun(ctx.epoch)
            raise

    def _open_term(self, ctx: CareerContext, log: Any, started: float) -> None:
        """The part of ``inaugurate`` after the term's session: the record's checks, then the term opened."""
        layout = self._layout
        for folder in ((layout.landing, layout.archive) if self._trimmer is None else ()) + (layout.table,
                                                                                               layout.quarantine):
            folder.mkdir(parents=True, exist_ok=True)
        record, _version = ctx.fence.read_commit()
        check_record(layout, record)  # before anything acts on what it names
        self._faults("inaugurate")
        if record is not None and int(record.get("epoch") or 0) > ctx.epoch:
            raise Fenced(f"inaugurate(epoch {ctx.epoch}): the commit record has epoch {record.get('epoch')}; "
                         "a newer leader has committed")
        if not ctx.still_leading():
            raise NotLeader(f"inaugurate(epoch {ctx.epoch}): leadership lost before the term started")
        preparer = self._preparer
        preloaded = preparer.pause() if preparer is not None else None
        try:
            self._begin_term(ctx, record, preloaded, log, started)
        except BaseException:
            if preparer is not None:
                preparer.resume()
            raise

    def _begin_term(self, ctx: CareerContext, record: dict[str, Any] | None, preloaded: Preloaded | None,
                    log: Any, started: float) -> None:
        """The part of ``inaugurate`` that acts on the data root: the checkpoint (from the follower's prepared copy
        when it passes its checks), torn files, the roll-forward, dead staging; the term opened."""
        layout = self._layout
        preparer = self._preparer
        copying = self._clock()
        try:
            checkpoint, copied_from = adopt_checkpoint(
                layout, ctx.epoch, prepared=preparer.checkpoint if preparer is not None else None,
                committed=committed_batch(record))
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
        carry_spark_state(self._standby.session(), layout.dedup, checkpoint, record, committed_batch(record),
                          self._config.dedup_window_ms, log)
        checkpoint_s = self._clock() - copying
        prepared = "off" if preparer is None else preparer.checkpoint.verdict
        prepared_figures = {} if preparer is None or prepared != "used" else {
            "prepared_linked": preparer.checkpoint.linked_at_take}
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
        reused: list[str] = []
        if preloaded is not None and (marks := preloaded.marks_for(record)) is not None:
            term.order, reused = marks, [*reused, "order"]
        if preloaded is not None and (held := preloaded.held_for(record)) is not None:
            term.held, reused = held, [*reused, "retry"]
        if preloaded is not None and (dedup := preloaded.dedup_for(record, layout.dedup)) is not None:
            term.dedup, reused = dedup, [*reused, "dedup"]
        self._term = term
        self._standby.term_began()
        self._housekeeper.term_began(term)
        log.info(INAUGURATED, epoch=ctx.epoch, batch=term.last_committed, rolled_forward=rolled,
                 clean=ctx.after_clean_handover,
                 **({"adopted_as_delta": adopted} if adopted else {}),
                 checkpoint_from=copied_from, prepared=prepared, **prepared_figures, preloaded=reused,
                 checkpoint_s=round(checkpoint_s, 3), outputs_s=round(outputs_s, 3),
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
        active = self._jvm(lambda: bool(query.isActive))
        if term.lost is not None:
            return self._while_lost(term, active)
        if not active and not self._recover_query(term):
            return False
        self._housekeeper.run(term)
        self._standby.tend(term)
        self._report_progress(term)
        with term.lock:
            changed = term.completed != term.reported
            term.reported = term.completed
        return changed

    def _report_progress(self, term: Term) -> None:
        """Log each batch's Spark progress (``batch_progress``: when its trigger started, where its time went)."""
        for progress in self._standby.progress.drain(self._run_id):
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
        self._standby.progress.forget(self._run_id)
        self._run_id = None
        if term.lost is not None:  # the gauge is the leader's: the next one sets it again if the hole is still there
            self._observer.queue_lost(False)
        # Only if Spark's checkpoint has the batch: then no re-run needs its files.
        self._housekeeper.archive_committed(term)
        self._term = None
        term.log.info(HANDED_OVER, outcome=outcome.value, batch=term.last_committed, timed_out=timed_out,
                      seconds=round(self._clock() - started, 3))
        self._standby.term_ended(term.epoch, term.log)
        if self._preparer is not None:
            self._preparer.resume()
        return term.last_committed

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
        """Stop the archive sweep, a running query and, when the career built it, the standby (keep-warm, and Spark
        if the standby started it); a shared standby is its owner's to close."""
        self._housekeeper.close()
        if self._trimmer is not None:
            self._trimmer.close()
        if self._term is not None:
            try:
                self.hand_over(Outcome.FAILED)
            except Unresponsive as exc:  # a frozen JVM at the end: the process's exit kills it
                self._log.warning("spark_unresponsive_at_close", reason=str(exc))
        if self._preparer is not None:
            self._preparer.close()
        if self._owns_standby:
            self._standby.close()

    # -- internals -------------------------------------------------------------------------------------------

    def _start_query(self, term: Term) -> None:
        started = self._clock()
        session = self._standby.session()
        writer = BatchWriter(term, self._layout, self._config, self._observer, self._replica_id, self._hooks,
                             self._faults, self._trimmer)
        name = query_name(self._replica_id, term.epoch, term.restarts)
        term.error, term.failed = None, None

        def start() -> tuple[Any, str]:
            query = start_query(session, self._config, self._layout, writer, name=name, checkpoint=term.checkpoint,
                                marks=self._layout.queue.marks(self._marks.group), clock=term.clock)
            run_id = str(query.runId)
            self._standby.progress.watch(run_id)
            return query, run_id

        term.query, run_id = call_within(start, self._config.warmup_timeout_s, "starting the streaming query")
        self._standby.progress.forget(self._run_id)  # a restarted query's earlier run
        self._run_id = run_id
        term.log.info(QUERY_STARTED, query=name, seconds=round(self._clock() - started, 3))

    def _while_lost(self, term: Term, active: bool) -> bool:
        """A Redis topic's stream lost entries (``_lost``): every ``LOST_RETRY_S``, a stopped query is started
        again (planning refuses again while the hole is there), and one that kept running that long means the
        stream was restored: the term goes on. The term is kept meanwhile: nothing is committed past the hole, and
        another leader would stop at it too."""
        if term.lost_check_at is None or self._clock() < term.lost_check_at:
            return False
        if not active and self._lost(term):
            term.restarts += 1
            self._start_query(term)
            term.lost_check_at = self._clock() + LOST_RETRY_S
            return False
        if active:
            term.log.warning("stream_restored", stream=getattr(term.lost, "stream", None),
                             effect="the query plans from the committed position again")
        term.lost, term.lost_check_at = None, None
        self._observer.queue_lost(False)
        return active or self._recover_query(term)

    def _lost(self, term: Term) -> bool:
        """Whether the query stopped because its stream lost entries (``StreamLost`` at planning, or at a batch's
        read): then it logs one line (once while the hole lasts), sets the queue's
        ``lost`` gauge, and keeps the query down for ``LOST_RETRY_S``. Not a batch's failure: no attempt counts and
        nothing is set aside, so nothing past the hole is ever skipped."""
        query = term.query
        texts = [str(term.error) if term.error is not None else ""]
        if query is not None:
            texts.append(str(self._jvm(query.exception) or ""))
        lost = next((found for text in texts if (found := StreamLost.found_in(text)) is not None), None)
        if lost is None:
            return False
        if term.lost is None:  # once while it lasts: each planning again meets the hole, perhaps with new entries
            term.log.error(STREAM_LOST, stream=lost.stream, error=str(lost), batch=term.last_committed,
                           effect="this queue commits nothing until the stream's entries are restored; it plans "
                                  f"again every {LOST_RETRY_S:g} s")
        self._observer.queue_lost(True)
        self._observer.backlog(0)  # nothing can be read past the hole: the leader owes no progress, it is not stalled
        term.lost, term.error, term.failed = lost, None, None
        term.lost_check_at = self._clock() + LOST_RETRY_S
        return True

    def _recover_query(self, term: Term) -> bool:
        """The query has stopped on its own. Restart it after a leadership pause; a stream that lost entries is
        planned again later (``_lost``); otherwise raise."""
        if self._lost(term):
            return False
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
        if error is None and worker_did_not_start(str(exc)) and term.worker_restarts < MAX_WORKER_RESTARTS \
                and not term.stop.is_set():
            # No batch ran, so none is to blame: start the query again (its checkpoint is the term's own, and its
            # batches are fenced as before), a few times, before the term ends as failed.
            term.restarts += 1
            term.worker_restarts += 1
            term.log.warning("query_restarting", reason="a Python worker did not start in time",
                             restarts=term.restarts, error=str(exc).splitlines()[0][:300])
            self._start_query(term)
            return False
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
