"""Setting a poison batch aside: its queue files and a manifest, staged like any output, committed instead of it.

A batch that failed ``--max-batch-attempts`` terms in a row (whatever replica led them) would fail every leader
for ever: a poison batch that follows the lock. The term that reaches it next commits it without running the
user's code: the batch's queue files are kept under ``set-aside/`` with a manifest naming the error and the
attempts, the commit record says so, and the queue moves on. ``tenure verify`` counts those records as set aside.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from tenure.career._protocol import FailedBatch
from tenure.career.spark._layout import Layout
from tenure.career.spark._read import CHUNK_BYTES, error_text

__all__ = ["MANIFEST", "stage_set_aside"]

MANIFEST = "manifest.json"
"""The manifest's name in a set-aside batch's staging folder; published as ``set-aside/batch-<B>-manifest.json``."""


def stage_set_aside(layout: Layout, staging: Path, *, batch_id: int, epoch: int, files: list[str],
                    failed: FailedBatch) -> int:
    """Link the batch's queue files into ``staging`` with a manifest; returns the number of lines they hold.

    Hard links, not copies: the queue files stay where consumption and archiving expect them, and the set-aside
    copy shares their bytes (falls back to a copy across file systems). An entry that can be neither linked nor
    copied (a folder, a dangling link, a file this process may not read) is named in the manifest's
    ``not_kept`` with the error: the batch is set aside all the same (its batch quarantined none of it, so
    ``tenure verify`` counts the lines of a file by that name as set aside too).
    """
    staging.mkdir(parents=True, exist_ok=True)
    lines = 0
    kept: list[str] = []
    not_kept: dict[str, str] = {}
    for name in files:
        source = next((folder / name for folder in (layout.landing, layout.archive)
                       if os.path.lexists(folder / name)), None)
        if source is None:
            continue
        target = staging / name
        try:
            if not source.is_file():
                not_kept[name] = "not a regular file"
                continue
            if not target.exists():
                _link_or_copy(source, target)
            lines += _count_lines(target)
        except OSError as exc:
            target.unlink(missing_ok=True)
            not_kept[name] = error_text(exc)
            continue
        kept.append(name)
    manifest: dict[str, Any] = {
        "batch_id": batch_id,
        "epoch": epoch,
        "files": kept,
        **({"not_kept": not_kept} if not_kept else {}),
        "records": lines,
        "attempts": failed.attempts,
        "error": failed.error,
        "set_aside_at": time.time(),
        "how_to_replay": "fix the cause, then copy the files back into landing/ under new names "
                         "(after the dedup window, or their ids count as repeats)",
    }
    partial = staging / f".{MANIFEST}"
    partial.write_text(json.dumps(manifest, indent=2) + "\n")
    partial.replace(staging / MANIFEST)
    return lines


def _link_or_copy(source: Path, target: Path) -> None:
    """``source`` linked as ``target``, or copied there (across file systems)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _count_lines(path: Path) -> int:
    """The lines of ``path`` (a final one without ``\\n`` counts), read a chunk at a time."""
    count, last = 0, b"\n"
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")
