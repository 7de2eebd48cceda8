"""fsync for files and the folders that hold them: what a step relies on after a power loss must be on disk.

Pure Python, so both the Spark career's storage and the output's Delta log (``tenure.career.output``) use it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync", "sync_dirs", "sync_tree"]


def fsync(path: Path, *, directory: bool = False) -> None:
    """Make ``path`` durable: a file's content and metadata, or a folder's entries."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_dirs(folder: Path) -> None:
    """Make ``folder``'s entries durable, and its own entry in each folder above it up to ``/``: a folder created
    since (``mkdir(parents=True)``) would otherwise vanish in a power loss with everything in it."""
    current = folder.absolute()
    while True:
        fsync(current, directory=True)
        if current.parent == current:
            return
        current = current.parent


def sync_tree(path: Path) -> None:
    """Make every file under ``path``, and the folders holding them, durable (no-op if ``path`` is absent)."""
    if not path.exists():
        return
    for folder, _dirs, files in os.walk(path):
        for name in files:
            fsync(Path(folder) / name)
        fsync(Path(folder), directory=True)
    sync_dirs(path.parent)
