"""Each batch's Spark progress, delivered once and without polling the JVM.

Spark reports a ``StreamingQueryProgress`` after it commits a batch to the checkpoint, so after the batch's
``foreachBatch`` (and its ``batch_committed`` event) has returned. A :class:`ProgressInbox` is a
``StreamingQueryListener``: Spark's listener thread calls it once per progress, and it only posts the progress
(of each query run it was told to watch, apart) for the control thread, which logs each batch's as
``batch_progress``.

Why a listener and not ``query.recentProgress``: that property converts every retained progress (up to 100) over
py4j on each call, so a leader reading it once a second converts the same progresses again and again; and a
progress of a trigger without data carries the id of the batch that runs next, so "newer than the last id read"
skipped that batch's own progress.

Each progress crosses py4j as one JSON string (:class:`_JsonProgressListener`): PySpark's own listener builds
the Python progress by asking the JVM for every field of it, a py4j round trip each: 86 ms at p50 against 1.2 ms
for the JSON (same fields; ``bench/results/issue-29-progress``), spent on the JVM's listener thread and the
replica's py4j threads while the next batch runs.
"""

from __future__ import annotations

import collections
import json
import threading
from typing import Any, Final

from pyspark import SparkContext
from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent, StreamingQueryListener

__all__ = ["BATCH_PROGRESS", "ProgressInbox", "progress_figures"]

# The log event other code reads (the bench's handover split): named once, here.
BATCH_PROGRESS: Final = "batch_progress"

_KEPT = 1000  # progresses waiting for the control thread at most (it drains them every loop)


def progress_figures(progress: Any) -> dict[str, Any]:
    """What a batch's ``StreamingQueryProgress`` says about where its time went, as log fields.

    ``trigger_started`` is when Spark's trigger began (its ``timestamp``, UTC); ``duration_ms`` is Spark's split
    (``latestOffset``: the source's listing; ``queryPlanning``; ``addBatch``: the ``foreachBatch``; ``walCommit``
    and ``commitOffsets``: the offset and commit logs; ``triggerExecution``: all of it).
    """
    return {
        "batch": progress.batchId,
        "input_rows": progress.numInputRows,
        "trigger_started": progress.timestamp,
        "duration_ms": dict(progress.durationMs),
    }


class _JsonProgressListener(JStreamingQueryListener):
    """PySpark's bridge from the JVM's listener, with each progress fetched as one JSON string instead of field by
    field (the form Spark Connect sends it in, read by the same ``fromJson``)."""

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802 (Spark's name)
        progress = json.loads(jevent.progress().json())
        self.pylistener.onQueryProgress(QueryProgressEvent.fromJson({"progress": progress}))


class ProgressInbox(StreamingQueryListener):
    """Receives every query's progress on Spark's listener thread; keeps each watched run's apart.

    One inbox listens on a session for every query on it (``SparkStandby.progress``): the control thread that
    starts a query calls :meth:`watch` with its ``runId``, :meth:`drain` from then on and :meth:`forget` once the
    run has stopped; the progress of a run no one watches is dropped. Nothing here changes career state.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, collections.deque[Any]] = {}
        self._jvm_listener: Any = None

    @property
    def _jlistener(self) -> Any:
        """The JVM side that ``streams.addListener`` and ``removeListener`` pass to Spark: PySpark's wrapper
        around :class:`_JsonProgressListener` rather than around its own bridge (PySpark's property, overridden)."""
        if self._jvm_listener is None:
            assert SparkContext._jvm is not None, "a listener is added to a running session"
            wrapper = SparkContext._jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
            self._jvm_listener = wrapper(_JsonProgressListener(self))
        return self._jvm_listener

    def watch(self, run_id: str) -> None:
        """Keep the progress of query run ``run_id`` from now on."""
        with self._lock:
            self._waiting[run_id] = collections.deque(maxlen=_KEPT)

    def forget(self, run_id: str | None) -> None:
        """Keep no more of run ``run_id``'s progress (None: nothing to forget); drops what was waiting."""
        with self._lock:
            self._waiting.pop(run_id or "", None)

    def drain(self, run_id: str | None) -> list[Any]:
        """Run ``run_id``'s progresses posted since the last call, oldest first (None, or a run not watched:
        none)."""
        with self._lock:
            waiting = self._waiting.get(run_id or "")
            if waiting is None:
                return []
            taken = list(waiting)
            waiting.clear()
        return taken

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        progress = event.progress
        with self._lock:
            waiting = self._waiting.get(str(progress.runId))
            if waiting is not None:
                waiting.append(progress)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        pass
