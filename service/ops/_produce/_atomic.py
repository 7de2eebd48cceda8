"""One queue file, atomically and durably: written under a hidden name, fsynced, renamed, its folder fsynced.

The steps :class:`~tenure.service.ops._produce._writer.Producer` repeats for each batch, and :func:`write_lines` for a
test that needs exact lines in ``landing/`` (the queue's naming rules are :mod:`tenure.career.queue`'s).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from tenure.career.queue import is_hidden

__all__ = ["check_name", "fsync_dir", "join_lines", "write_hidden_then_rename", "write_lines"]


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_hidden_then_rename(directory: Path, name: str, data: bytes) -> Path:
    """Write ``data`` to ``directory/.name.tmp``, fsync, rename to ``directory/name``; no partial file stays.

    The hidden name (:func:`tenure.career.queue.is_hidden`) keeps Spark's file source and ``verify`` from ever
    listing a file that is still being written; rename within one directory is atomic on POSIX.
    """
    tmp = directory / f".{name}.tmp"
    final = directory / name
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
    except BaseException:
        # A half-written hidden file is harmless to readers but would pile up after every disk-full retry.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return final


def check_name(name: str) -> None:
    if not name or "/" in name or is_hidden(name):
        raise ValueError(f"file name {name!r} must be non-empty, without '/', and not start with '.' or '_'")


def join_lines(lines: Sequence[bytes], trailing_newline: bool = True) -> bytes:
    for line in lines:
        if b"\n" in line:
            raise ValueError(f"a line must not contain b'\\n': {line[:80]!r}")
    if not lines:
        return b""
    return b"\n".join(lines) + (b"\n" if trailing_newline else b"")


def write_lines(
    landing_dir: str | os.PathLike[str], lines: Sequence[bytes], name: str, *, trailing_newline: bool = True
) -> Path:
    """Plant one queue file atomically and durably, exactly as the producer writes its batches.

    For tests of other components that need specific lines (bad ones included) in ``landing/``. No retry.

    Args:
        landing_dir: the folder to write into (created if absent).
        lines: the lines, each without ``\\n``; an empty sequence writes a zero-byte file.
        name: the final file name, e.g. ``p0000000000001-0000001-00000001.jsonl``; it must not start with
            ``.`` or ``_`` (those are hidden from readers).
        trailing_newline: end the last line with ``\\n`` (the producer always does).

    Returns:
        The path of the durable file.

    Example:
        >>> write_lines(tmp / "landing", [b'{"id":"a","key":"k","seq":1,"ts":1,"payload":{}}', b"nope"],
        ...             "t-00000001.jsonl")  # doctest: +SKIP
    """
    check_name(name)
    directory = Path(landing_dir)
    directory.mkdir(parents=True, exist_ok=True)
    final = write_hidden_then_rename(directory, name, join_lines(lines, trailing_newline))
    fsync_dir(directory)
    return final

