"""Consumed queue entries moved from ``landing/`` to ``archive/`` (never over an archived file), and the archive's
retention sweep."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from tenure.career._durable import fsync, sync_dirs
from tenure.career.queue import QueueLayout, is_queue_file
from tenure.career.spark._landing import QueueEntry, describe

__all__ = ["archive_files", "sweep_archive"]


def archive_files(queue: QueueLayout, names: Iterable[str], now: float,
                  consumed: Callable[[QueueEntry], bool] = lambda _entry: True) -> int:
    """Move the consumed entries ``names`` from ``landing/`` to ``archive/``; returns how many moved.

    An entry moves only if ``consumed`` says the one under its name now is consumed (every group's mark covers
    it: a file changed or replaced since it was marked stays, for the source to read as new). A missing one was
    moved already. The entry is checked again after the rename; should another file have been renamed over the
    name in between, it is linked back into ``landing/`` (a folder or a third file under the name stays in
    ``archive/``, where ``tenure verify`` counts it read, so a loss there is reported, not silent).

    An entry keeps its name, unless ``archive/`` already holds an earlier one under it (a producer used the name
    again): then it is archived as ``<stem>~<its mtime in ns><suffix>``, and the earlier one is kept. The
    archived entry's own modification time is set to ``now`` (the group's clock, ``_term.TermClock``; a symbolic
    link's, not its target's), so retention counts from the archiving; an entry of another user keeps its own
    time (only its owner may set it).
    """
    moved = 0
    queue.archive.mkdir(parents=True, exist_ok=True)
    for name in names:
        if not name or "/" in name or name in (".", ".."):
            continue
        source = queue.landing / name
        entry = describe(queue.landing, name)
        if entry is None or not consumed(entry):
            continue
        target = _archive_target(queue.archive, name, entry.mtime_ns)
        try:
            os.replace(source, target)
        except FileNotFoundError:
            continue
        if not _put_back_if_another(entry, source, target):
            # Gone: swept by another process meanwhile. Not permitted: the file is another user's (a producer's),
            # whose times only its owner may set: it keeps its own, and retention counts from that.
            with contextlib.suppress(FileNotFoundError, PermissionError):
                os.utime(target, (now, now), follow_symlinks=False)
            moved += 1
    if moved:  # durable before the caller removes the marks: an entry back in landing/ unmarked is read again
        fsync(queue.landing, directory=True)
        sync_dirs(queue.archive)
    return moved


def _put_back_if_another(checked: QueueEntry, source: Path, target: Path) -> bool:
    """Whether the entry renamed to ``target`` is not the one ``checked`` (a producer renamed another file over
    the name between the check and the rename): then a regular file is linked back to ``source`` if nothing is
    there now."""
    found = describe(target.parent, target.name)
    if found is None or found.ino == checked.ino:
        return False
    with contextlib.suppress(OSError):
        os.link(target, source, follow_symlinks=False)  # fails, and changes nothing, if the name is taken again
        os.unlink(target)
    return True


def _archive_target(archive: Path, name: str, mtime_ns: int) -> Path:
    """Where the queue entry ``name`` of ``mtime_ns`` is archived: under its name, unless that is taken, then
    ``<stem>~<mtime_ns><suffix>``, then ``<stem>~<mtime_ns>-<n><suffix>`` (a name reused within one tick of a
    coarse file-system clock): never over an archived file, which is the audit trail."""
    stem, dot, suffix = name.partition(".")
    candidates = itertools.chain([name, f"{stem}~{mtime_ns}{dot}{suffix}"],
                                 (f"{stem}~{mtime_ns}-{n}{dot}{suffix}" for n in itertools.count(2)))
    return next(archive / c for c in candidates if not os.path.lexists(archive / c))


def sweep_archive(queue: QueueLayout, retention_s: float, now: float, stop: Callable[[], bool] = lambda: False) -> int:
    """Delete archived entries archived more than ``retention_s`` before ``now`` (the group's clock, which stamped
    them: a wall clock that jumps forward deletes nothing early); returns how many. ``stop`` is asked before each
    entry: once it answers True, the sweep ends there.

    Files and symbolic links go by their own time; a folder only when it is an archived queue entry (one refused as
    ``not_a_file``, under a queue file's name), never a folder an operator made in ``archive/``.
    """
    removed = 0
    cutoff = now - retention_s
    try:
        entries = os.scandir(queue.archive)
    except FileNotFoundError:
        return 0
    with entries:
        for entry in entries:
            if stop():
                break
            try:
                info = entry.stat(follow_symlinks=False)
                if info.st_mtime >= cutoff:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    if not is_queue_file(entry.name):
                        continue
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                removed += 1
            except FileNotFoundError:
                continue
    return removed
