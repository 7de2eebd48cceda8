"""Consumption marks on a queue that several consumer groups share, and the archiving they gate.

A group's leader *marks* a queue file once its own Spark checkpoint has committed the batch that read it (no
re-run of that group can need the file again): a file ``<queue>/consumed/<group>/<name>``
(:meth:`tenure.career.queue.QueueLayout.marks`) holding the identity the batch admitted under that name (its
offset's, never one found later: :func:`tenure.career.queue.read_mark`). A landing file is moved to ``archive/``
once every registered group — and always this one — has a mark that covers the file now under the name; the marks
of an archived file are then removed. A file changed or replaced after its admission is covered by no mark: it
stays, and the source reads it as new. Each step is idempotent,
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
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

import structlog

from tenure.career._durable import sync_dirs
from tenure.career.queue import FileIdentity, is_hidden, mark_bytes, mark_covers, read_mark
from tenure.career.spark._archive import archive_files
from tenure.career.spark._landing import MarkReader, QueueEntry, describe
from tenure.career.spark._layout import Layout

__all__ = ["ConsumptionMarks"]

_log = structlog.get_logger("tenure.career.spark")


def _valid_name(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..")


def _write_mark(folder: Path, name: str, identity: FileIdentity, *, durable: bool) -> None:
    """Write the mark ``name`` holding ``identity``: under a hidden name (which no reader of marks looks at, and the
    sweep leaves alone), then renamed into place; its content fsynced first when ``durable``."""
    fd, partial = tempfile.mkstemp(dir=folder, prefix=".mark-")
    try:
        try:
            os.write(fd, mark_bytes(identity))
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        # The mark's own time is the file's too, as an earlier release's reader expects.
        os.utime(partial, ns=(identity.mtime_ns, identity.mtime_ns))
        os.replace(partial, folder / name)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise


class ConsumptionMarks:
    """One group's marks on its queue and the archive step they gate (shared by Spark's and the control thread).

    Example::

        marks = ConsumptionMarks(layout, "orders", registered_groups=lambda: {"orders", "audit"})
        marks.consumed([("p1.jsonl", identity)], now)  # mark ours, then archive what both groups have marked

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

    def mark(self, entries: Iterable[tuple[str, FileIdentity | None]]) -> int:
        """Mark each ``(name, identity)`` consumed by this group; returns marks written.

        ``identity`` is the one the batch admitted (``None``: a batch of Spark's file source, which recorded
        none: the entry now under the name). A name no longer in ``landing/`` is skipped. Each mark is written
        under a hidden name and renamed into place, so it holds one identity or another; the folder is made
        durable once. A new mark's content is not fsynced: should a power cut lose it, the mark reads as one of an
        earlier release, whose time (the file's, or the mark's creation, later) still covers the file. A mark
        that moves on to a new file under a used name is fsynced first: the earlier identity would not cover it.
        """
        folder = self._layout.queue.marks(self.group)
        landing = self._layout.landing
        made = 0
        for name, admitted in entries:
            if not _valid_name(name):
                continue
            identity = admitted
            if identity is None:
                found = describe(landing, name)
                identity = found.identity if found is not None else None
            if identity is None or not os.path.lexists(landing / name):
                continue
            mark = folder / name
            try:
                held: FileIdentity | None = read_mark(mark)
            except FileNotFoundError:
                held = None
            if held == identity:
                continue
            folder.mkdir(parents=True, exist_ok=True)
            _write_mark(folder, name, identity, durable=held is not None)
            made += 1
        if made:  # durable before the queue source stops carrying these names in its offsets
            sync_dirs(folder)
        return made

    def marked(self, group: str | None = None) -> set[str]:
        """Names of the files ``group`` (default: ours) has marked consumed."""
        try:
            return {entry.name for entry in os.scandir(self._layout.queue.marks(group or self.group))
                    if entry.is_file() and not is_hidden(entry.name)}
        except FileNotFoundError:
            return set()

    def archive_ready(self, now: float) -> int:
        """Archive every landing entry that the marks of all registered groups and this one cover, stamped ``now``
        (the group's clock: retention counts from it); returns entries moved."""
        groups = self._groups()
        if groups is None:
            return 0
        queue = self._layout.queue
        with self._lock:
            ready: set[str] | None = None
            for group in sorted(groups):
                ready = self.marked(group) if ready is None else ready & self.marked(group)
                if not ready:
                    return 0
            names = sorted(ready or ())
            marks = [MarkReader().read(queue.marks(group), names) for group in sorted(groups)]

            def consumed(entry: QueueEntry) -> bool:
                return all(entry.name in held and mark_covers(held[entry.name], entry.identity) for held in marks)

            moved = archive_files(queue, names, now, consumed)
            # Only the marks of entries gone from landing/: a mark of a file changed since stays until it is read.
            self._unmark([name for name in names if not os.path.lexists(queue.landing / name)])
        if moved:
            _log.debug("queue_files_archived", group=self.group, files=moved, groups=sorted(groups))
        return moved

    def consumed(self, entries: Iterable[tuple[str, FileIdentity | None]], now: float) -> int:
        """Mark ``entries`` consumed by this group (:meth:`mark`), then archive what every group has marked
        (stamped ``now``); returns entries moved."""
        self.mark(entries)
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
                    if is_hidden(entry.name):  # a mark being written, by this group's leader or another's
                        continue
                    if not os.path.lexists(landing / entry.name):  # a dangling link is an entry still there
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
