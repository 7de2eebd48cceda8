"""Signals are reacted to off the handler (tenure.service._signals), in a process of their own each."""

from __future__ import annotations

import subprocess
import sys

_LOCK_HELD = """
import os, queue, signal
from tenure.service._signals import on_signals

events = queue.Queue()
on_signals(lambda signum: events.put(signum.name), signal.SIGTERM)
with events.mutex:  # as the control loop holds its event queue's lock inside get()
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(100_000):  # the handler runs between these bytecodes, the lock still held
        pass
print(events.get(timeout=10), flush=True)
"""

_IN_ORDER = """
import contextvars, os, queue, signal
from tenure.service._signals import on_signals

bound = contextvars.ContextVar("bound", default="unbound")
bound.set("replica r1")
seen = queue.Queue()
on_signals(lambda signum: seen.put(f"{signum.name} {bound.get()}"), signal.SIGTERM, signal.SIGINT)
os.kill(os.getpid(), signal.SIGTERM)
os.kill(os.getpid(), signal.SIGINT)
print(seen.get(timeout=10), seen.get(timeout=10), sep=", ", flush=True)
"""

_RAISES_ONCE = """
import os, queue, signal
from tenure.service._signals import on_signals

seen = queue.Queue()
calls = []

def react(signum):
    calls.append(signum)
    if len(calls) == 1:
        raise RuntimeError("the first reaction fails")
    seen.put(signum.name)

on_signals(react, signal.SIGTERM)
os.kill(os.getpid(), signal.SIGTERM)
os.kill(os.getpid(), signal.SIGTERM)
print(seen.get(timeout=10), flush=True)
"""


def _run(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_signal_that_lands_while_the_main_thread_holds_the_reactions_lock_is_reacted_to_once_it_is_released() -> None:
    """SIGTERM delivered while the main thread holds the lock of the queue the reaction posts to: the reaction
    waits for the lock on its own thread and posts (a handler posting itself would wait for itself for ever, the
    replica's handover overrun that CI saw)."""
    assert _run(_LOCK_HELD) == "SIGTERM"


def test_each_signal_is_reacted_to_in_the_order_delivered_with_the_installers_bound_context() -> None:
    """Two signals, two reactions, in order, each seeing the context variables bound where they were installed
    (structlog's replica and group)."""
    assert _run(_IN_ORDER) == "SIGTERM replica r1, SIGINT replica r1"


def test_a_reaction_that_raises_is_logged_and_the_next_signal_is_still_reacted_to() -> None:
    """The first SIGTERM's reaction raises: the error is logged and a second SIGTERM is still reacted to (a thread
    that died with the first would leave the replica deaf to every later signal)."""
    done = subprocess.run([sys.executable, "-c", _RAISES_ONCE], capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "SIGTERM", done.stderr
    assert "signal_reaction_failed" in done.stdout + done.stderr and "the first reaction fails" in (
        done.stdout + done.stderr)
