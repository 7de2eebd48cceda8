"""Polling with a deadline: ``wait_for`` a condition, and the foreground loop of ``tenure zk`` and ``tenure spark``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["wait_for", "watch_until_stopped"]


def wait_for(predicate: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.05) -> T:
    """Poll ``predicate`` every ``interval_s`` until it returns something truthy, and return that; raise
    ``TimeoutError`` naming ``what`` at the deadline.

    Example::

        leader = wait_for(lambda: topology.leaders(), timeout_s=30, what="a leader")[0]
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


def watch_until_stopped(stop: threading.Event, dead: Callable[[], Iterable[str]], report: Callable[[str], None],
                        poll_s: float = 0.5) -> None:
    """Until ``stop`` is set, poll ``dead`` (names of processes that exited on their own) every ``poll_s`` and
    ``report`` each name once: the foreground loop of a command that runs daemons until SIGTERM or Ctrl-C."""
    reported: set[str] = set()
    while not stop.wait(poll_s):
        for name in dead():
            if name not in reported:
                reported.add(name)
                report(name)
