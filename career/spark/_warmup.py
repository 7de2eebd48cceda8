"""Warm standby: run the real pipeline once over a scratch sample so a new leader's first batch runs hot, then
keep the follower's Python workers alive until it leads.

Everything happens under a temporary data root with an in-memory fence: nothing the warm-up writes is ever
visible, and it needs no ZooKeeper.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from tenure.career._protocol import CareerContext
from tenure.career.spark._batch import BatchWriter
from tenure.career.spark._config import SparkCareerConfig
from tenure.career.spark._hooks import Hooks
from tenure.career.spark._layout import Layout
from tenure.career.spark._marks import ConsumptionMarks
from tenure.career.spark._query import source_stream
from tenure.career.spark._retry import identity_row
from tenure.career.spark._term import Term, TermClock, no_fault
from tenure.errors import Fenced

__all__ = ["KEEP_WARM_GROUP", "KeepWarm", "warm_up"]

KEEP_WARM_GROUP = "tenure-keep-warm"
"""The Spark job group of the keep-warm jobs (what the Spark UI and status tracker show)."""

_WARMUP_FILES = 10  # two batches at the default 5 files per trigger
_WARMUP_RECORDS_PER_FILE = 1000


class _NullObserver:
    """The warm-up's observer: its batches are no one's metrics."""

    def batch_started(self, batch_id: int) -> None:
        pass

    def batch_finished(self, outcome: str, duration_s: float, records: dict[str, int], *,
                       progressed: bool = True) -> None:
        pass

    def retry_waiting(self, records: int) -> None:
        pass

    def queue_lost(self, lost: bool) -> None:
        pass

    def commit_finished(self, duration_s: float, committed_at: float) -> None:
        pass

    def backlog(self, files: int, *, retry_due: bool = False) -> None:
        pass


class _ScratchFence:
    """An in-memory fence for the warm-up run (no ZooKeeper: nothing it writes is ever visible)."""

    def __init__(self) -> None:
        self._record: dict[str, Any] | None = None
        self._version = 0

    @property
    def epoch(self) -> int:
        return 0

    def read_commit(self) -> tuple[dict[str, Any] | None, int]:
        return self._record, self._version

    def commit(self, record: dict[str, Any], expected_version: int) -> int:
        if expected_version != self._version:
            raise Fenced(f"scratch fence: version {self._version}, expected {expected_version}")
        self._record = dict(record)
        self._version += 1
        return self._version


def _write_sample(landing: Path) -> None:
    """Queue files of a realistic size, not a token one: the JVM compiles the hot paths of a 5 000-record batch
    only when it has run some, and a new leader's first batch is otherwise twice as slow. The first file adds a
    duplicate, a bad line and an empty one, so the quarantine path runs too; the last adds one late record."""
    for f in range(_WARMUP_FILES):
        # seq rises across files, as a real producer's does: otherwise every later file is late (quarantined), and
        # the warm-up would exercise the late path instead of the table write.
        lines = [f'{{"id":"w{f}-{i}","key":"k{i % 100}","seq":{f * _WARMUP_RECORDS_PER_FILE + i},"ts":{i},'
                 f'"payload":{{"n":{i}}}}}' for i in range(_WARMUP_RECORDS_PER_FILE)]
        if f == 0:
            lines += ['{"id":"w0-1","key":"k1","seq":1,"ts":1,"payload":null}', "not json", ""]
        if f == _WARMUP_FILES - 1:
            lines.append('{"id":"w-late","key":"k2","seq":0,"ts":0,"payload":null}')
        sample = landing / f".sample-{f:02d}.jsonl"
        sample.write_text("\n".join(lines) + "\n")
        os.utime(sample, (time.time() - 100 + f, time.time() - 100 + f))
        sample.rename(landing / f"sample-{f:02d}.jsonl")


def warm_up(session: SparkSession, config: SparkCareerConfig, hooks: Hooks, *, replica_id: str, log: Any,
            scratch_parent: Path | None = None) -> None:
    """Run the real pipeline — parse, dedup, order, Parquet, commit — once over a scratch sample.

    The sample lives in a folder of its own under ``scratch_parent`` (default: the system's temporary folder;
    on a cluster, a folder the executors see too). Bounded by ``config.warmup_timeout_s``; a failure is logged
    (``warmup_failed``), not raised: the replica can still lead, only its first batch is slower.
    """
    if scratch_parent is not None:
        scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="tenure-warmup-", dir=scratch_parent))
    try:
        layout = Layout(scratch)
        layout.landing.mkdir(parents=True)
        _write_sample(layout.landing)
        ctx = CareerContext(epoch=0, fence=_ScratchFence(), still_leading=lambda: True, previous_handover=None)
        term = Term(ctx=ctx, log=log.bind(warmup=True), marks=ConsumptionMarks(layout, "warmup"),
                    checkpoint=layout.checkpoint, clock=TermClock(None))
        # The user's transform runs on the sample; their row function does not (it may have effects
        # outside), but the retry path does, through the identity function.
        hooks = replace(hooks, row_function=identity_row if hooks.row_function else None)
        writer = BatchWriter(term, layout, config, _NullObserver(), replica_id, hooks, no_fault)
        query = (
            source_stream(session, config, layout, sample=True, marks=layout.queue.marks("warmup"),
                          checkpoint=layout.checkpoint)
            .writeStream.foreachBatch(writer)
            .option("checkpointLocation", str(layout.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            finished = query.awaitTermination(int(config.warmup_timeout_s))
        except StreamingQueryException:  # the query failed: query.exception() says how, below
            finished = True
        if not finished:
            query.stop()
        error = term.error or query.exception()
        if error is not None:
            log.warning("warmup_failed", error=f"{type(error).__name__}: {error}"[:1000])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _pass_through(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


class KeepWarm:
    """A warm follower's heartbeat: one tiny Python job every ``interval_s`` while ``idle()`` says no term is open.

    Why: Spark stops a Python worker that has been idle for a minute, so a follower that waited longer than that
    would start its workers again in its first batch as leader (measured in-process: a term begun after 75 s idle
    committed its first batch at 3.3 s, against 1.8–2.5 s for terms begun at once). The job runs one task per
    core, each through a Python worker, so every worker the leader's batches use stays alive.

    ``renew``, when given, runs before each job (a standby application's executor limit, ``_executors``).

    The thread changes no career state; a job that fails is logged and tried again next time.
    """

    def __init__(self, session: SparkSession, interval_s: float, idle: Callable[[], bool], log: Any,
                 renew: Callable[[], None] | None = None) -> None:
        self._session = session
        self._renew = renew
        self._interval_s = interval_s
        self._idle = idle
        self._log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenure-keep-warm", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the heartbeat and wait for a job in flight (a few tens of milliseconds)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _run(self) -> None:
        context = self._session.sparkContext
        context.setJobGroup(KEEP_WARM_GROUP, "keep a warm follower's Python workers alive", interruptOnCancel=True)
        slots = max(context.defaultParallelism, 1)
        while not self._stop.wait(self._interval_s):
            if not self._idle():
                continue
            try:
                if self._renew is not None:
                    self._renew()
                self._session.range(0, slots, 1, slots).mapInArrow(_pass_through, "id long").collect()
            except Exception as exc:  # a stopping session, a lost JVM: the health check reports those
                self._log.debug("keep_warm_failed", error=repr(exc)[:500])
