"""A demonstration career: appends ``epoch,n`` lines to a file per queue, each one visible only after its fenced
commit."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from tenure.career._health import HealthSettings, StorageHealth
from tenure.career._protocol import CareerContext, CareerObserver, Careers, Outcome
from tenure.errors import ConfigError, Fenced
from tenure.settings import setting

__all__ = ["CounterCareer", "CounterSettings", "CounterStandby", "counter_careers", "counter_path"]

_log = structlog.get_logger("tenure.career.counter")


@dataclass(frozen=True, kw_only=True)
class CounterSettings:
    """The counter career's settings (``tenure run``'s flags of the same names)."""

    counter_interval_s: float = setting(0.2, unit="s", help="Counter career: one commit per interval.")

    def __post_init__(self) -> None:
        if self.counter_interval_s <= 0:
            raise ConfigError(f"counter_interval_s={self.counter_interval_s:g} must be a positive number of seconds")


def counter_path(data_root: Path, queue: int = 0, queues: int = 1) -> Path:
    """Queue ``queue``'s counter file: ``counter.log`` in a group of one queue, ``counter-queue-<k>.log`` in one of
    several."""
    return data_root / ("counter.log" if queues == 1 else f"counter-queue-{queue}.log")


class CounterStandby:
    """The counter career's standby (``career.Standby``): its folder, made at ``prepare``, and the storage check.

    Example::

        standby = CounterStandby(Path("data"), HealthSettings())
    """

    def __init__(self, folder: Path, health: HealthSettings | None = None) -> None:
        health = health if health is not None else HealthSettings(min_free_disk_mb=0)  # a test's: no disk minimum
        self._folder = folder
        self._storage = StorageHealth([folder], min_free_bytes=health.min_free_bytes, timeout_s=health.probe_timeout_s)

    def prepare(self) -> None:
        self._folder.mkdir(parents=True, exist_ok=True)

    def ready(self) -> bool:
        return True

    def unhealthy(self) -> str | None:
        return self._storage.problem()

    def close(self) -> None:
        """Nothing to release: each file is opened per append."""


class CounterCareer:
    """Counts 1, 2, 3 … across every leader of one queue, each ``n`` committed in ZooKeeper before it is published.

    The commit record holds the last ``n`` and its line; publishing appends that line to ``path``. A leader
    that dies between commit and publish leaves the line for the next leader's ``inaugurate`` to roll
    forward, so the file holds every ``n`` exactly once. Used by tests and ``tenure run --career counter``.

    It is its own standby too (a ``SoloCareer``: ``prepare``, ``ready``, ``unhealthy``, ``close`` are those of a
    ``CounterStandby`` of its file's folder), as a group of one queue needs; :func:`counter_careers` makes a
    replica's careers for any number of queues.

    Example::

        career = CounterCareer(Path("counter.log"), interval_s=0.2, observer=metrics)
    """

    def __init__(self, path: Path, *, interval_s: float, observer: CareerObserver,
                 clock: Callable[[], float] = time.monotonic, health: HealthSettings | None = None) -> None:
        self._path = path
        self._standby = CounterStandby(path.parent, health)
        self._interval_s = interval_s
        self._observer = observer
        self._clock = clock
        self._ctx: CareerContext | None = None
        self._version = -1
        self._last_n: int | None = None
        self._last_line = ""
        self._published_n = 0
        self._due = 0.0

    def prepare(self) -> None:
        self._standby.prepare()

    def ready(self) -> bool:
        return self._standby.ready()

    def unhealthy(self) -> str | None:
        return self._standby.unhealthy()

    def inaugurate(self, ctx: CareerContext) -> None:
        self._ctx = ctx
        record, self._version = ctx.fence.read_commit()
        self._published_n = self._read_published_n()
        self._last_n = None if record is None else int(record["n"])
        self._last_line = "" if record is None else str(record["line"])
        if record is not None and self._published_n < int(record["n"]):
            # The previous leader committed n but died before publishing it: roll it forward.
            self._publish(int(record["n"]), str(record["line"]))
            _log.info("rolled_forward", n=record["n"], epoch=ctx.epoch)
        _log.info("counter_inaugurated", epoch=ctx.epoch, last_n=self._last_n,
                  path="fast" if ctx.after_clean_handover else "recovery")

    def execute(self) -> bool:
        ctx = self._ctx
        if ctx is None or self._clock() < self._due or not ctx.still_leading():
            return False
        self._observer.backlog(1)  # there is always a next n to count: a counter that stops counting is stalled
        self._due = self._clock() + self._interval_s
        if self._last_n is not None and self._published_n < self._last_n:
            # Committed while suspended mid-publish: publish it before committing anything new.
            self._publish(self._last_n, f"{self._last_line}")
        n = (self._last_n or 0) + 1
        line = f"{ctx.epoch},{n}"
        started = self._clock()
        try:
            self._version = ctx.fence.commit({"n": n, "line": line, "committed_at": time.time()}, self._version)
        except Fenced:
            self._observer.batch_finished("fenced", self._clock() - started, {})
            raise
        self._observer.commit_finished(self._clock() - started, time.time())
        self._last_n, self._last_line = n, line
        self._publish(n, line)
        self._observer.batch_finished("committed", self._clock() - started, {"written": 1})
        return True

    def hand_over(self, outcome: Outcome) -> int | None:
        if outcome is Outcome.CLEAN and self._last_n is not None and self._published_n < self._last_n:
            self._publish(self._last_n, self._last_line)
        _log.info("counter_handed_over", outcome=outcome.value, last_n=self._last_n)
        self._ctx = None
        return self._last_n

    def close(self) -> None:
        self._standby.close()

    def _read_published_n(self) -> int:
        """The last ``n`` in the file; a torn last line (a crash mid-append) is cut off first."""
        try:
            with self._path.open("rb+") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - 4096))
                tail = f.read()
                complete, _, torn = tail.rpartition(b"\n")
                if torn:
                    f.truncate(size - len(torn))
        except FileNotFoundError:
            return 0
        lines = [line for line in complete.split(b"\n") if line]
        return int(lines[-1].split(b",")[1]) if lines else 0

    def _publish(self, n: int, line: str) -> None:
        if n <= self._published_n:
            return
        if self._ctx is not None and not self._ctx.still_leading():
            return  # a paused leader that woke up: the successor rolls this line forward instead
        with self._path.open("a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._published_n = n


def counter_careers(data_root: Path, queues: int, settings: CounterSettings, health: HealthSettings) -> Careers:
    """A replica's counter careers: one standby for ``data_root``, and for each queue a ``CounterCareer`` of its own
    file there (:func:`counter_path`; ``counter.log`` in a group of one queue, as before queues)."""
    return Careers(CounterStandby(data_root, health),
                   lambda queue, observer: CounterCareer(counter_path(data_root, queue, queues),
                                                         interval_s=settings.counter_interval_s, observer=observer,
                                                         health=health))
