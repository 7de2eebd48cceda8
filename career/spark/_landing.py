"""``landing/`` as the queue source sees it: each entry's identity or the reason it is refused, and the one rule
that says which entries this group has yet to consume, shared by the source and the backlog.

An *entry* is anything in ``landing/`` under a name the source reads (a queue file's, or a retry tick's). The
source admits every entry, in (modification time, name) order; one it cannot read as a file is admitted *refused*,
with one of :data:`tenure.career.queue.ENTRY_REASONS`, so that its batch quarantines it on its own (one row at
line 0) and the group goes on, where it used to fail every batch that held it. What the listing can tell is
decided here; what only opening the file tells (it may not be opened, it is gone) is decided when the batch
reads it (:mod:`tenure.career.spark._read`).

Pure Python and light: Spark's Python processes import it with the source (``tests/test_lazy_imports.py``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenure.career.queue import (
    TICK_SUFFIX,
    FileIdentity,
    is_hidden,
    is_queue_file,
    mark_covers,
    printable_name,
    read_mark,
)
from tenure.career.spark._read import error_text

__all__ = [
    "MarkReader",
    "QueueEntry",
    "describe",
    "is_input",
    "listed_names",
    "scan_landing",
    "waiting",
]


def is_input(name: str) -> bool:
    """Whether the source reads entries of this name: a queue file's, or a retry tick's (never a hidden one)."""
    return is_queue_file(name) or (name.endswith(TICK_SUFFIX) and not is_hidden(name))


@dataclass(frozen=True, order=True)
class QueueEntry:
    """An entry of ``landing/``; entries sort in admission order (modification time in ns, then name).

    ``refused`` is the reason the source will not read it (one of ``ENTRY_REASONS``) and ``detail`` says more;
    both are ``None`` for a file it reads. ``ino`` is ``None`` only in an offset of an earlier release.
    """

    mtime_ns: int
    name: str
    size: int
    ino: int | None = field(default=None, compare=False)
    refused: str | None = field(default=None, compare=False)
    detail: str | None = field(default=None, compare=False)

    @property
    def identity(self) -> FileIdentity:
        """Which file this is; an entry of an earlier release's offset is known by its time alone, as that
        release knew it."""
        if self.ino is None:
            return FileIdentity(None, None, self.mtime_ns)
        return FileIdentity(self.ino, self.size, self.mtime_ns)

    @property
    def bytes(self) -> int:
        """What the entry weighs against ``max_bytes_per_trigger``: nothing when it is refused (not read)."""
        return 0 if self.refused is not None else self.size

    def to_offset(self) -> list[Any]:
        """``[name, mtime_ns, size, ino]``, plus ``reason, detail`` when refused: the entry in a batch's offset."""
        entry: list[Any] = [self.name, self.mtime_ns, self.size, self.ino]
        return entry if self.refused is None else [*entry, self.refused, self.detail]

    @classmethod
    def from_offset(cls, entry: Sequence[Any]) -> QueueEntry:
        """The entry an offset names (an offset of an earlier release named ``[name, mtime_ns, size]``)."""
        name, mtime_ns = str(entry[0]), int(entry[1])
        if len(entry) < 4:
            return cls(mtime_ns, name, int(entry[2]) if len(entry) > 2 else 0)
        return cls(mtime_ns, name, int(entry[2]), None if entry[3] is None else int(entry[3]),
                   *((str(entry[4]), str(entry[5])) if len(entry) >= 6 else ()))


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def describe(folder: Path, name: str) -> QueueEntry | None:
    """The entry ``name`` of ``folder`` as the source admits it (``None``: it is gone).

    A symbolic link to a file is that file (Spark's file source follows links too); the identity of a refused
    entry is its own (a dangling link's, from ``lstat``), so that a mark of it covers it until it changes.
    """
    path = os.path.join(folder, name)
    refused: tuple[str, str] | None = None
    try:
        info = os.stat(path)
    except FileNotFoundError:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None  # archived or removed since the scan
        refused = ("dangling_symlink", f"-> {_target(path)}")
    except OSError as exc:  # a symbolic link loop, a name too long, an I/O error on the inode
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        refused = ("unreadable", error_text(exc))
    if refused is None and not stat.S_ISREG(info.st_mode):
        kind = next((text for test, text in _KINDS if test(info.st_mode)), "not a regular file")
        refused = ("not_a_file", kind)
    if refused is None and not _utf8(name):
        refused = ("name_not_utf8", printable_name(name))
    return QueueEntry(info.st_mtime_ns, name, info.st_size, info.st_ino,
                      *(refused if refused is not None else ()))


def _target(path: str) -> str:
    try:
        return printable_name(os.readlink(path))
    except OSError as exc:
        return error_text(exc)


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # os.scandir gives undecodable bytes as lone surrogates
        return False
    return True


def listed_names(folder: Path) -> set[str]:
    """The names of ``folder``'s entries that the source reads (one listing, no stat)."""
    try:
        return {entry.name for entry in os.scandir(folder) if is_input(entry.name)}
    except FileNotFoundError:
        return set()


def scan_landing(folder: Path) -> list[QueueEntry]:
    """Every entry of ``folder`` that the source reads, described (:func:`describe`)."""
    try:
        names = [entry.name for entry in os.scandir(folder) if is_input(entry.name)]
    except FileNotFoundError:
        return []
    return [entry for name in names if (entry := describe(folder, name)) is not None]


class MarkReader:
    """A group's marks of the entries now in ``landing/``, read again and again (by the source at every trigger,
    the backlog every second): each mark's content is read once per version of the mark. A mark is replaced by a
    rename, never rewritten in place, so its inode and time name its version, and a poll costs a ``stat`` per mark,
    as it did when a mark was an empty file.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple[int, int], FileIdentity]] = {}

    def read(self, folder: Path, names: Iterable[str]) -> dict[str, FileIdentity]:
        """The marks of ``names`` in ``folder`` (other marks are not looked at), name → the identity consumed under
        it."""
        wanted = set(names)
        try:
            present = [entry for entry in os.scandir(folder) if entry.name in wanted]
        except FileNotFoundError:
            present = []
        found: dict[str, FileIdentity] = {}
        known: dict[str, tuple[tuple[int, int], FileIdentity]] = {}
        for entry in present:
            try:
                info = entry.stat()
                version = (info.st_ino, info.st_mtime_ns)
                cached = self._known.get(entry.name)
                identity = cached[1] if cached is not None and cached[0] == version else read_mark(Path(entry.path))
            except FileNotFoundError:  # unmarked meanwhile (archived)
                continue
            found[entry.name] = identity
            known[entry.name] = (version, identity)
        self._known = known  # only the marks still wanted: bounded by landing/
        return found


def waiting(entries: Iterable[QueueEntry], marks: Mapping[str, FileIdentity]) -> list[QueueEntry]:
    """The entries this group has yet to consume: those its marks do not cover. The one rule: the source admits
    from these, and the backlog (what the progress watchdog waits on) counts these."""
    return [entry for entry in entries
            if (mark := marks.get(entry.name)) is None or not mark_covers(mark, entry.identity)]
