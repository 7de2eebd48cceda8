"""A queue's wake counter: a number in the data root that a queue no file wakes (a Redis topic's stream) plans by.

A queue folder's leader runs a batch when a file lands, so a retry that falls due or an operator's replay is woken
by a tick file in ``landing/``. Nothing lands in a Redis stream for them, and adding an entry would change the
stream every group reads. So each queue of a data root has a counter instead (``Layout.wake``): the leader's
housekeeping adds one when held records fall due, ``tenure replay`` when it asks for a replay, and the Redis source
keeps the count it last planned in its offset beside the stream's position (``{"id", "n", "wake"}``). A count other
than its start offset's is a batch of no entry, ``{id, n}`` to ``{id, n}``, which the career runs like any other:
its retries and replays are taken, and it replays as it ran (its end offset is in Spark's checkpoint).

The counter only ever grows: it is written under a lock (two wakers never write the same count), fsynced, by an
atomic rename, so a reader sees a whole number; it is a wake-up, not data: a lost or repeated wake-up changes no
batch's records, only when the next batch runs.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Final

from tenure.career._durable import fsync
from tenure.errors import TenureError

__all__ = ["WAKE", "WakeError", "read_wake", "wake"]

WAKE: Final = "wake"
"""The data root's folder of wake counters: ``wake/count`` in a topic of one queue, ``wake/queue=<k>/count``."""

_COUNT = "count"
_LOCK = ".lock"
_LOCK_TIMEOUT_S = 2.0  # another waker holds the lock for one small write: far less than this
_LOCK_POLL_S = 0.01


class WakeError(TenureError):
    """The wake counter could not be written; the message says where and why."""


def read_wake(folder: Path) -> int:
    """The wake count in ``folder`` (0 when nothing ever woke the queue)."""
    try:
        return int((folder / _COUNT).read_text())
    except FileNotFoundError:
        return 0
    except ValueError as exc:  # only a hand-edited file: every write is a whole number, renamed into place
        raise WakeError(f"{folder / _COUNT} holds no count ({exc}): delete it (the queue's next wake-up writes it "
                        "again)") from exc


def wake(folder: Path) -> int:
    """Add one to the wake count in ``folder`` (made if need be), durably; the new count.

    Raises:
        WakeError: another waker held the lock past a deadline of seconds (a hung process holding
            ``<folder>/.lock``), or the folder cannot be written.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / _LOCK).open("a") as lock:
            _lock(lock.fileno(), folder)
            count = read_wake(folder) + 1
            partial = folder / f".{_COUNT}.{os.getpid()}"
            with partial.open("w") as handle:
                handle.write(f"{count}\n")
                handle.flush()
                os.fsync(handle.fileno())
            partial.replace(folder / _COUNT)
            fsync(folder, directory=True)
            return count  # the lock goes with the file's closing
    except OSError as exc:
        raise WakeError(f"cannot wake the queue through {folder / _COUNT} ({exc}): make the data root writable"
                        ) from exc


def _lock(fd: int, folder: Path) -> None:
    """Take the counter's lock, or raise once ``_LOCK_TIMEOUT_S`` has passed (never wait without a deadline)."""
    deadline = time.monotonic() + _LOCK_TIMEOUT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise WakeError(f"{folder / _LOCK} stayed locked for {_LOCK_TIMEOUT_S:g} s: another process "
                                "waking the queue hangs; stop it") from None
            time.sleep(_LOCK_POLL_S)
