"""Pause and resume a whole process tree: a replica's Python process and its Spark JVM stop together.

A real pause (a frozen VM, a stopped container, a long stop-the-world GC) stops every process of a replica at
once. SIGSTOP to the Python process alone leaves its JVM running, which is not the fault drills mean to test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import psutil

__all__ = ["pause_descendants", "pause_tree", "resume_tree", "tree_pids"]


def tree_pids(pid: int) -> list[int]:
    """``pid`` and all its descendants (an empty list if ``pid`` is gone)."""
    try:
        root = psutil.Process(pid)
        return [pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def _send(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def pause_tree(pid: int) -> list[int]:
    """SIGSTOP ``pid`` and every descendant; returns the pids stopped.

    From outside, the root stops first (it can no longer start children). When ``pid`` is this process, the
    descendants stop first and this process last: nothing runs after its own stop.
    """
    pids = tree_pids(pid)
    if pid == os.getpid():
        _send(pids[1:], signal.SIGSTOP)
        # To the calling thread: a process-wide SIGSTOP goes to the main thread first, and the caller (say a
        # py4j thread about to send a commit) could run on for a few milliseconds.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    else:
        _send(pids, signal.SIGSTOP)
    return pids


def resume_tree(pid: int) -> list[int]:
    """SIGCONT ``pid`` and every descendant (children first, so the root wakes to a running JVM)."""
    pids = tree_pids(pid)
    _send(list(reversed(pids)), signal.SIGCONT)
    return pids


def pause_descendants(pid: int) -> list[int]:
    """SIGSTOP every descendant of ``pid`` but not ``pid`` itself: a replica's Spark JVM and its Python workers
    freeze while the replica's own Python process runs on (a JVM stuck in GC, a wedged native call); returns the
    pids stopped. :func:`resume_tree` resumes them."""
    pids = tree_pids(pid)[1:]
    _send(pids, signal.SIGSTOP)
    return pids
