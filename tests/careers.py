"""Careers of the tests' own, loaded by `tenure run --career tests.careers:NAME` (the plug-in path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tenure.career import Career, CareerContext, CareerObserver, Careers, Outcome, counter_careers, counter_path
from tenure.career._counter import CounterCareer
from tenure.errors import Unresponsive


class _FailingCounter(CounterCareer):
    """A counter that raises on every execute(): a crash-looping career."""

    def execute(self) -> bool:
        raise RuntimeError("injected failure: this career always raises")


def always_fails(config: Any, observer: CareerObserver) -> CounterCareer:
    """Every execute() raises, whatever the replica."""
    return _FailingCounter(config.data_root / "counter.log", interval_s=config.counter.counter_interval_s,
                           observer=observer)


class _FreezesWhenTold(CounterCareer):
    """A counter whose "JVM" freezes once ``frozen-<replica id>`` exists in the data root: its work goes on, but
    its health check says the JVM does not answer and ``hand_over`` cannot stop it, as the Spark career's does
    when the health check is the first to find a frozen JVM. Once ``frozen-at-hand-over-<replica id>`` exists,
    only ``hand_over`` finds it (the JVM froze after the last health check, as a handover began)."""

    def __init__(self, config: Any, observer: CareerObserver) -> None:
        super().__init__(config.data_root / "counter.log", interval_s=config.counter.counter_interval_s,
                         observer=observer)
        self._frozen = config.data_root / f"frozen-{config.replica_id}"
        self._frozen_at_hand_over = config.data_root / f"frozen-at-hand-over-{config.replica_id}"

    def unhealthy(self) -> str | None:
        if self._frozen.exists():
            return "Spark's JVM did not answer within 1 s (frozen, or stuck in a long GC pause)"
        return super().unhealthy()

    def hand_over(self, outcome: Outcome) -> int | None:
        if self._frozen.exists() or self._frozen_at_hand_over.exists():
            raise Unresponsive("Spark's JVM has not answered for 1 s (a call is still waiting)")
        return super().hand_over(outcome)


def freezes_when_told(config: Any, observer: CareerObserver) -> CounterCareer:
    """Healthy until ``frozen-<replica id>`` (or ``frozen-at-hand-over-<replica id>``) appears in the data root
    (see ``_FreezesWhenTold``)."""
    return _FreezesWhenTold(config, observer)


class _StuckInClose(CounterCareer):
    """A counter with a child process, as the Spark career has its JVM, and a ``close`` that waits on that child
    for ever, as stopping a SparkContext waits on a frozen JVM. The child's pid is in ``child-<replica id>``."""

    def __init__(self, config: Any, observer: CareerObserver) -> None:
        super().__init__(config.data_root / "counter.log", interval_s=config.counter.counter_interval_s,
                         observer=observer)
        self._pid_file = config.data_root / f"child-{config.replica_id}"
        self._child: subprocess.Popen[bytes] | None = None

    def prepare(self) -> None:
        super().prepare()
        self._child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        self._pid_file.write_text(str(self._child.pid))

    def close(self) -> None:
        if self._child is not None:
            self._child.wait()


def stuck_in_close(config: Any, observer: CareerObserver) -> CounterCareer:
    """A career whose ``close`` never returns while its child process lives (see ``_StuckInClose``)."""
    return _StuckInClose(config, observer)


class _HungBatch(CounterCareer):
    """A counter whose first batch never finishes while a queue file waits: it tells the observer the batch began
    and input waits, then does no more work (as a Spark batch hung in user code does, on a thread of its own),
    while its control loop comes round as usual."""

    def __init__(self, config: Any, observer: CareerObserver, path: Path | None = None) -> None:
        super().__init__(path or config.data_root / "counter.log", interval_s=config.counter.counter_interval_s,
                         observer=observer)
        self._reporter = observer
        self._began = False

    def inaugurate(self, ctx: CareerContext) -> None:
        super().inaugurate(ctx)
        self._began = False  # each term's first batch hangs again

    def execute(self) -> bool:
        if not self._began:
            self._began = True
            self._reporter.backlog(1)
            self._reporter.batch_started(1)
        return False


def hangs_in_a_batch(config: Any, observer: CareerObserver) -> CounterCareer:
    """A career whose batch hangs from its first term on, input waiting (see ``_HungBatch``)."""
    return _HungBatch(config, observer)


def hangs_in_queue_1(config: Any, observer: CareerObserver) -> Careers:
    """Counters of every queue of the group, queue 1's batches hanging from its first term on while input waits (see
    ``_HungBatch``); the others count as usual (``tenure.career.counter_careers``)."""
    counters = counter_careers(config.data_root, config.queues, config.counter, config.health)

    def career_of(queue: int, queue_observer: CareerObserver) -> Career:
        if queue == 1:
            return _HungBatch(config, queue_observer, counter_path(config.data_root, queue, config.queues))
        return counters.career_of(queue, queue_observer)

    return Careers(counters.standby, career_of)


class _RefusesToLead(CounterCareer):
    """A counter whose every inauguration raises: the replica backs its seat off, out of the queue's line."""

    def inaugurate(self, ctx: CareerContext) -> None:
        raise RuntimeError("injected failure: this queue's career never inaugurates here")


def cannot_lead_queue_0(config: Any, observer: CareerObserver) -> Careers:
    """Counters of every queue of the group, queue 0's inauguration raising every time (see ``_RefusesToLead``); the
    others count as usual."""
    counters = counter_careers(config.data_root, config.queues, config.counter, config.health)

    def career_of(queue: int, queue_observer: CareerObserver) -> Career:
        if queue == 0:
            return _RefusesToLead(counter_path(config.data_root, queue, config.queues),
                                  interval_s=config.counter.counter_interval_s, observer=queue_observer)
        return counters.career_of(queue, queue_observer)

    return Careers(counters.standby, career_of)
