"""Polling with a deadline: ``wait_for`` a condition, and the foreground loop of ``tenure zk`` and ``tenure spark``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["wait_for", "watch_until_stopped"]


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.1) -> None:
    """Poll ``predicate`` every ``interval_s`` until truthy; raise ``TimeoutError`` naming ``what`` at the deadline.

    Example::

        wait_for(lambda: ensemble.leader(), timeout_s=30, what="a ZooKeeper leader")
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
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
