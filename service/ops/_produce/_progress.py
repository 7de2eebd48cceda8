"""The progress view of ``tenure produce``: a rich bar on a terminal, a plain line every 5 s otherwise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["ProgressDisplay"]


class ProgressDisplay:
    """A rich progress bar on a TTY, plain lines every few seconds otherwise, or nothing."""

    def __init__(self, total: int, mode: bool | None, stream: TextIO, clock: Callable[[], float]) -> None:
        self._total = total
        self._stream = stream
        self._clock = clock
        self._bar: Any = None
        self._task: Any = None
        self._last = clock()
        self._started = self._last
        self._plain = False
        tty = stream.isatty()
        if mode is None:
            mode = True
        if mode and tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self._bar = Progress(
                "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                TimeRemainingColumn(), console=Console(file=stream), transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("producing", total=total)
        elif mode:
            self._plain = True

    def update(self, done: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done)
        elif self._plain:
            now = self._clock()
            if now - self._last >= 5.0:
                self._last = now
                rate = done / (now - self._started) if now > self._started else 0.0
                print(f"produce: {done}/{self._total} records, {rate:,.0f} records/s",
                      file=self._stream, flush=True)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
