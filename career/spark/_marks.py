"""Consumption marks on a queue that several consumer groups share, and the archiving they gate.

A group's leader *marks* a queue file once its own Spark checkpoint has committed the batch that read it (no
re-run of that group can need the file again): an empty file ``<queue>/consumed/<group>/<name>``
(:meth:`tenure.career.queue.QueueLayout.marks`). A landing file is moved to ``archive/`` once every registered group —
and always this one — has marked it; the marks of an archived file are then removed. Each step is idempotent,
so a crash anywhere leaves nothing a later round cannot finish: a file marked but not archived is archived next
round, and marks whose file has left ``landing/`` (archived, but the process died before unmarking) are swept
as stale.

If the registry of groups cannot be read (ZooKeeper unreachable, a timeout), nothing is archived that round:
a file some group may still need is never moved. With no registry at all (``registered_groups=None``) the
group is the queue's only consumer, as in a single-group deployment.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Collection, Iterable

import structlog

from tenure.career.spark._storage import Layout, archive_files, fsync, sync_dirs

__all__ = ["ConsumptionMarks"]

_log = structlog.get_logger("tenure.career.spark")


def _valid_name(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..")


class ConsumptionMarks:
    """One group's marks on its queue and the archive step they gate (shared by Spark's and the control thread).

    Example::

        marks = ConsumptionMarks(layout, "orders", registered_groups=lambda: {"orders", "audit"})
        marks.consumed(["p1.jsonl", "p2.jsonl"], now)  # mark ours, then archive what both groups have marked

    Args:
        layout: the data root and queue layout.
        group: this consumer group.
        registered_groups: the groups registered on the queue (may raise when the registry is unreachable);
            ``None``: this group is the only consumer.
    """

    def __init__(self, layout: Layout, group: str,
                 registered_groups: Callable[[], Collection[str]] | None = None) -> None:
        if not _valid_name(group):
            raise ValueError(f"group={group!r} cannot name a marks folder")
        self._layout = layout
        self.group = group
        self._registered = registered_groups
        self._lock = threading.Lock()
        self._registry_unreadable = False

    def mark(self, names: Iterable[str]) -> int:
        """Mark ``names`` consumed by this group; files no longer in ``landing/`` are skipped. Returns marks made.

        A mark is an empty file created in one step (``O_CREAT|O_EXCL``): it exists or it does not. It carries
        its file's modification time, so the queue source can tell a new file under a used name (a newer time
        than the mark's) from the file it consumed; marking a file under a used name again moves its mark on.
        """
        folder = self._layout.queue.marks(self.group)
        made = 0
        for name in names:
            if not _valid_name(name):
                continue
            try:
                written = (self._layout.landing / name).stat().st_mtime_ns
            except FileNotFoundError:
                continue
            folder.mkdir(parents=True, exist_ok=True)
            mark = folder / name
            try:
                os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                made += 1
                os.utime(mark, ns=(written, written))  # lost in a power cut, the mark is only newer: still holds
            except FileExistsError:
                if mark.stat().st_mtime_ns < written:  # a new file under a used name: move the mark on, durably
                    os.utime(mark, ns=(written, written))
                    fsync(mark)
        if made:  # durable before the queue source stops carrying these names in its offsets
            sync_dirs(folder)
        return made

    def marked(self, group: str | None = None) -> set[str]:
        """Names of the files ``group`` (default: ours) has marked consumed."""
        try:
            return {entry.name for entry in os.scandir(self._layout.queue.marks(group or self.group))
                    if entry.is_file()}
        except FileNotFoundError:
            return set()

    def archive_ready(self, now: float) -> int:
        """Archive every landing file that all registered groups and this one have marked, stamped ``now`` (the
        group's clock: retention counts from it); returns files moved."""
        groups = self._groups()
        if groups is None:
            return 0
        with self._lock:
            ready: set[str] | None = None
            for group in sorted(groups):
                ready = self.marked(group) if ready is None else ready & self.marked(group)
                if not ready:
                    return 0
            names = sorted(ready or ())
            moved = archive_files(self._layout, names, now)
            self._unmark(names)
        if moved:
            _log.debug("queue_files_archived", group=self.group, files=moved, groups=sorted(groups))
        return moved

    def consumed(self, names: Iterable[str], now: float) -> int:
        """Mark ``names`` consumed by this group, then archive what every group has marked (stamped ``now``);
        returns files moved."""
        self.mark(names)
        return self.archive_ready(now)

    def sweep(self) -> int:
        """Delete every group's marks whose file is no longer in ``landing/``; returns how many."""
        landing = self._layout.landing
        removed = 0
        with self._lock:
            for folder in self._mark_folders():
                try:
                    entries = list(os.scandir(folder))
                except FileNotFoundError:  # a group removed meanwhile (`tenure groups remove`)
                    continue
                for entry in entries:
                    if not (landing / entry.name).exists():
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.path)
                            removed += 1
        return removed

    def _groups(self) -> set[str] | None:
        if self._registered is None:
            return {self.group}
        try:
            groups = {self.group, *self._registered()}
        except Exception as exc:  # the registry is unreadable: never archive what a group may still need
            if not self._registry_unreadable:
                _log.warning("groups_unreadable", group=self.group, error=repr(exc)[:500],
                             effect="nothing is archived until the registry answers")
            self._registry_unreadable = True
            return None
        if self._registry_unreadable:
            _log.info("groups_readable", group=self.group, groups=sorted(groups))
        self._registry_unreadable = False
        return groups

    def _mark_folders(self) -> list[str]:
        try:
            return sorted(entry.path for entry in os.scandir(self._layout.queue.consumed) if entry.is_dir())
        except FileNotFoundError:
            return []

    def _unmark(self, names: Iterable[str]) -> None:
        """Remove the marks of ``names`` in every group's folder (registered or not)."""
        folders = self._mark_folders()
        for name in names:
            for folder in folders:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))
