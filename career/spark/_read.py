"""Reading one admitted queue file: opened once, checked against the identity its batch admitted, and its lines
streamed in bounded memory.

A batch's offset records the identity of each file it admitted (inode, size, modification time:
:class:`tenure.career.queue.FileIdentity`), and Spark re-runs a batch from that offset. So the reader opens the
name once and compares the open file (``fstat``) with it, then reads exactly the admitted size: a re-run reads the
same lines, or learns that the file is no longer the one admitted. Three outcomes besides the lines:

- :class:`EntryRefused` ``gone``: nothing under the name any more; ``unreadable``: it may not be opened or read
  (``EACCES``, an I/O error). The batch quarantines the entry on its own and goes on.
- :class:`EntryChanged`: another file is under the name now, or the file was rewritten, appended or cut short
  since its admission. Its batch reads none of it (or keeps the lines read before the change was seen); its mark
  holds the admitted identity, so the file as it is now is new to the source and read whole in a later batch.

Pure Python and light: Spark's Python workers import it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from urllib.parse import unquote_to_bytes, urlparse

from tenure.career.queue import FileIdentity

__all__ = ["EntryChanged", "EntryRefused", "admitted_lines", "error_text", "path_of", "split_stream"]

CHUNK_BYTES = 1 << 20
"""Bytes read at a time: with the longest line kept (``max_line_bytes`` + 1), what reading a file holds at most."""


class EntryRefused(Exception):
    """An admitted entry that cannot be read: ``reason`` is one of ``ENTRY_REASONS``, ``detail`` says more."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class EntryChanged(Exception):
    """The file under an admitted name is not, or is no longer, the file its batch admitted."""


def path_of(uri: str) -> str:
    """``file:///…/landing/a%20b.jsonl`` → ``/…/landing/a b.jsonl``; the bytes of a name that is not UTF-8 come
    back as ``os.fsdecode`` gives them (``Path.as_uri`` quotes a name's bytes, and ``unquote`` would decode them
    as UTF-8, with U+FFFD for each byte it cannot: another path). A plain path is returned as it is."""
    return os.fsdecode(unquote_to_bytes(urlparse(uri).path)) if uri.startswith("file:") else uri


def error_text(exc: OSError) -> str:
    """``EACCES: Permission denied``: an OSError as its errno's name and text, without the path."""
    return f"{errno.errorcode.get(exc.errno or 0, str(exc.errno))}: {exc.strerror or exc}"


def admitted_lines(path: str, admitted: FileIdentity | None, max_line_bytes: int) -> Iterator[bytes]:
    """The lines of the queue file ``path``, as its batch admitted it (``admitted``; ``None``: as it is now).

    Lines are split as :func:`split_stream` says. The file is opened once, without following it into a FIFO's
    wait (``O_NONBLOCK``), and compared with ``admitted`` through the open descriptor.

    Raises:
        EntryRefused: ``gone`` or ``unreadable`` (at the open, or part-way: lines yielded before stay read).
        EntryChanged: the open file is not the one admitted, or it ended before the admitted size.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise EntryRefused("gone", "not in landing/ when its batch read it: moved or deleted after its "
                                   "admission") from None
    except OSError as exc:
        raise EntryRefused("unreadable", error_text(exc)) from None
    with os.fdopen(fd, "rb", buffering=0) as handle:
        info = os.fstat(fd)
        found = FileIdentity.of(info)
        if not stat.S_ISREG(info.st_mode):
            raise EntryChanged(f"admitted as a file, now not a regular file (mode {stat.filemode(info.st_mode)})")
        if admitted is not None and not admitted.same(found):
            raise EntryChanged(f"admitted as {admitted}, found {found}")
        size = admitted.size if admitted is not None and admitted.size is not None else info.st_size
        try:
            yield from split_stream(handle.read, size, max_line_bytes)
        except OSError as exc:
            raise EntryRefused("unreadable", error_text(exc)) from None


def split_stream(read: Callable[[int], bytes], size: int, max_line_bytes: int,
                 chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The lines of the first ``size`` bytes that ``read`` gives, split on ``\\n`` only, in bounded memory.

    A ``\\r`` stays in its line; a final ``\\n`` makes no extra empty line; no bytes, no line. A line longer than
    ``max_line_bytes`` is yielded as its first ``max_line_bytes + 1`` bytes (enough to be ``oversized``; the rest
    is read past, never held), so reading holds at most ``chunk_bytes`` plus one such line, however large the
    file or its lines.

    Raises:
        EntryChanged: ``read`` ended before ``size`` bytes (the file was cut short).
    """
    keep = max_line_bytes + 1
    remaining = size
    tail = b""  # the start of a line not ended yet: at most ``keep`` bytes
    over = False  # the line in ``tail`` is longer than ``keep``: what follows of it is dropped
    while remaining > 0:
        data = read(min(chunk_bytes, remaining))
        if not data:
            raise EntryChanged(f"it ended after {size - remaining} of the {size} bytes admitted")
        remaining -= len(data)
        pieces = data.split(b"\n")
        rest = pieces.pop()  # what follows the chunk's last newline
        if pieces:
            if over:
                pieces[0] = tail
            elif tail:
                pieces[0] = tail + pieces[0]
            tail, over = b"", False
            for piece in pieces:
                yield piece if len(piece) <= keep else piece[:keep]
        if not over:
            if len(tail) + len(rest) > keep:
                tail, over = (tail + rest)[:keep], True
            else:
                tail += rest
    if tail or over:
        yield tail
