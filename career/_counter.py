"""A demonstration career: appends ``epoch,n`` lines to a file, each one visible only after its fenced commit."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from tenure.career._health import HealthSettings, StorageHealth
from tenure.career._protocol import CareerContext, CareerObserver, Outcome
from tenure.errors import ConfigError, Fenced
from tenure.settings import setting

__all__ = ["CounterCareer", "CounterSettings"]

_log = structlog.get_logger("tenure.career.counter")


@dataclass(frozen=True, kw_only=True)
class CounterSettings:
    """The counter career's settings (``tenure run``'s flags of the same names)."""

    counter_interval_s: float = setting(0.2, unit="s", help="Counter career: one commit per interval.")

    def __post_init__(self) -> None:
        if self.counter_interval_s <= 0:
            raise ConfigError(f"counter_interval_s={self.counter_interval_s:g} must be a positive number of seconds")


class CounterCareer:
    """Counts 1, 2, 3 … across every leader, each ``n`` committed in ZooKeeper before it is published.

    The commit record holds the last ``n`` and its line; publishing appends that line to ``path``. A leader
    that dies between commit and publish leaves the line for the next leader's ``inaugurate`` to roll
    forward, so the file holds every ``n`` exactly once. Used by tests and ``tenure run --career counter``.

    Example::

        career = CounterCareer(Path("counter.log"), interval_s=0.2, observer=metrics)
    """

    def __init__(self, path: Path, *, interval_s: float, observer: CareerObserver,
                 clock: Callable[[], float] = time.monotonic, health: HealthSettings | None = None) -> None:
        health = health if health is not None else HealthSettings(min_free_disk_mb=0)  # a test's: no disk minimum
        self._path = path
        self._storage = StorageHealth([path.parent], min_free_bytes=health.min_free_bytes,
                                      timeout_s=health.probe_timeout_s)
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
        self._path.parent.mkdir(parents=True, exist_ok=True)

    def ready(self) -> bool:
        return True

    def unhealthy(self) -> str | None:
        return self._storage.problem()

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
        """Nothing to release: the file is opened per append."""

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
