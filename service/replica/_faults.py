"""Fault injection at named points of a term, armed at run time by writing a file: for tests and drills.

A replica started with ``--fault-file F`` checks ``F`` at each point below (one ``stat`` when absent). The file
holds ``POINT ACTION``; the first time the replica reaches ``POINT`` it deletes the file, logs
``fault_injected`` and acts: ``pause`` stops its whole process tree (Python and the JVM) until a SIGCONT from
outside, ``kill`` SIGKILLs it, ``raise`` raises :class:`InjectedFault` there, ``hang`` blocks the thread that
reached the point for ever while the rest of the process runs on (a call that never returns: what the progress
watchdog exists for). The points are the windows where a pause or a crash is most dangerous; each is named for
what has just happened.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Final

import structlog

from tenure.errors import TenureError
from tenure.service.replica._proctree import pause_tree

__all__ = ["FAULT_ACTIONS", "FAULT_INJECTED", "FAULT_POINTS", "FaultFile", "InjectedFault", "arm"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
FAULT_INJECTED: Final = "fault_injected"

FAULT_POINTS: Final[dict[str, str]] = {
    "inaugurate": "inside inaugurate: the commit record is read, nothing rolled forward or removed yet",
    "after_read": "the batch's input read (its entries or files, cached), nothing of it staged yet",
    "after_stage": "the batch's output staged and fsynced, the fenced commit not yet sent",
    "before_transaction": "inside the fence: the local leadership checks passed, the transaction not yet sent",
    "after_commit": "the fenced commit applied, the batch not yet published",
    "after_rename": "the batch's files linked into its outputs, their Delta versions not yet committed",
    "inside_delta_commit": "inside a Delta commit: the table read and its transaction version checked, the "
                           "version not yet written",
    "after_publish": "the batch published, Spark's checkpoint not yet told (foreachBatch about to return)",
    "after_checkpoint": "Spark's checkpoint has the batch, its queue files not yet marked consumed or archived",
}
FAULT_ACTIONS: Final = ("pause", "kill", "raise", "hang")

_log = structlog.get_logger("tenure.faults")


class InjectedFault(TenureError):
    """Raised by a ``raise`` fault: a deliberate failure at a named point."""


def _parse(text: str, path: Path) -> tuple[str, str]:
    words = text.split()
    if len(words) != 2 or words[0] not in FAULT_POINTS or words[1] not in FAULT_ACTIONS:
        raise InjectedFault(f"fault file {path} holds {text.strip()!r}: write 'POINT ACTION' with POINT one of "
                            f"{', '.join(FAULT_POINTS)} and ACTION one of {', '.join(FAULT_ACTIONS)}")
    return words[0], words[1]


def arm(path: Path, point: str, action: str) -> None:
    """Arm ``path`` with one fault (atomically: a replica never reads half a line)."""
    _parse(f"{point} {action}", path)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(f"{point} {action}\n")
    partial.replace(path)


class FaultFile:
    """The fault hook (``Callable[[str], None]``) that election and career call at each point."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def __call__(self, point: str) -> None:
        try:
            text = self._path.read_text()
        except FileNotFoundError:
            return
        armed, action = _parse(text, self._path)
        if armed != point:
            return
        try:
            self._path.unlink()
        except FileNotFoundError:
            return  # another thread took it first
        _log.warning(FAULT_INJECTED, point=point, action=action, pid=os.getpid())
        sys.stderr.flush()
        if action == "pause":
            pause_tree(os.getpid())
        elif action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "hang":
            threading.Event().wait()
        else:
            raise InjectedFault(f"injected fault at {point}: {FAULT_POINTS[point]}")
