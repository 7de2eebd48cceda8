"""Signals reacted to on a thread of their own, never inside the signal handler.

Python runs a signal handler on the main thread between two bytecodes, wherever that thread is: possibly inside
``queue.Queue.get`` or ``threading.Event.wait`` with their lock held, or half way through a write to stderr. A
handler that takes such a lock (posting to a ``Queue``, setting an ``Event``, starting a ``Timer``, logging) then
waits for itself for ever, or raises into the code it interrupted. The handler here only puts the signal on a
``queue.SimpleQueue``, whose ``put`` is reentrant by design, and a daemon thread calls the reaction. A reaction
that raises is logged (``signal_reaction_failed``) and the next signal is still reacted to: a second SIGTERM must
not find the thread gone.
"""

from __future__ import annotations

import contextvars
import queue
import signal
import threading
from collections.abc import Callable
from types import FrameType

import structlog

__all__ = ["on_signals"]

_log = structlog.get_logger("tenure.service.signals")


def on_signals(react: Callable[[signal.Signals], None], *signums: signal.Signals) -> None:
    """Call ``react(signal)`` for each of ``signums`` delivered to the process, one after another on a daemon
    thread, in the context (structlog's bound variables) of the caller. Install from the main thread."""
    delivered: queue.SimpleQueue[signal.Signals] = queue.SimpleQueue()
    context = contextvars.copy_context()

    def handler(signum: int, _frame: FrameType | None) -> None:
        delivered.put(signal.Signals(signum))

    def reactions() -> None:
        while True:
            signum = delivered.get()
            try:
                context.run(react, signum)
            except Exception:
                _log.exception("signal_reaction_failed", signal=signum.name)

    threading.Thread(target=reactions, name="tenure-signals", daemon=True).start()
    for signum in signums:
        signal.signal(signum, handler)
