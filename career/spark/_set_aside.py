"""Setting a poison batch aside: its queue files and a manifest, staged like any output, committed instead of it.

A batch that failed ``--max-batch-attempts`` terms in a row (whatever replica led them) would fail every leader
for ever: a poison batch that follows the lock. The term that reaches it next commits it without running the
user's code: the batch's queue files are kept under ``set-aside/`` with a manifest naming the error and the
attempts, the commit record says so, and the queue moves on. ``tenure verify`` counts those records as set aside.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tenure.career._protocol import FailedBatch
from tenure.career.spark._storage import Layout

__all__ = ["MANIFEST", "stage_set_aside"]

MANIFEST = "manifest.json"
"""The manifest's name in a set-aside batch's staging folder; published as ``set-aside/batch-<B>-manifest.json``."""


def stage_set_aside(layout: Layout, staging: Path, *, batch_id: int, epoch: int, files: list[str],
                    failed: FailedBatch) -> int:
    """Link the batch's queue files into ``staging`` with a manifest; returns the number of lines they hold.

    Hard links, not copies: the queue files stay where consumption and archiving expect them, and the set-aside
    copy shares their bytes (falls back to a copy across file systems).
    """
    staging.mkdir(parents=True, exist_ok=True)
    lines = 0
    kept: list[str] = []
    for name in files:
        source = next((folder / name for folder in (layout.landing, layout.archive) if (folder / name).exists()),
                      None)
        if source is None:
            continue
        target = staging / name
        if not target.exists():
            try:
                os.link(source, target)
            except OSError:
                target.write_bytes(source.read_bytes())
        data = target.read_bytes()
        lines += data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)
        kept.append(name)
    manifest: dict[str, Any] = {
        "batch_id": batch_id,
        "epoch": epoch,
        "files": kept,
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
