"""Setting records aside: the failing records of a split poison batch, or a whole batch that could not be split,
staged under ``set-aside/`` with a manifest and committed with the batch (``tenure.career.set_aside`` is the folder's
contract, replays included).

A batch that failed ``--max-batch-attempts`` terms in a row for ``--set-aside-after-s`` (whatever replica led them)
would fail every leader for ever: a poison batch that follows the lock. The term that reaches it next splits it
(``_split``): the records that still fail are set aside, the rest of the batch is written. A batch whose split
failed too (``FailedBatch.split_failed``) is set aside whole by the next term, without running the user's code:
its queue files are kept under ``set-aside/``. Either way the commit record says so and the queue moves on, and
``tenure verify`` counts those records as set aside until they are replayed (``tenure replay``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tenure.career._protocol import FailedBatch
from tenure.career.set_aside import MANIFEST, write_json
from tenure.career.spark._storage import Layout

__all__ = ["stage_set_aside"]


def _source(layout: Layout, name: str) -> Path | None:
    """Where the queue file (or set-aside file, for a replay set aside again) ``name`` is now."""
    return next((folder / name for folder in (layout.landing, layout.archive, layout.set_aside)
                 if (folder / name).exists()), None)


def _lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def stage_set_aside(layout: Layout, staging: Path, *, batch_id: int, epoch: int, files: Sequence[str],
                    failed: FailedBatch, lines: Mapping[str, Sequence[int]] | None = None) -> int:
    """Stage what a batch sets aside in ``staging`` with a manifest; returns the number of lines staged.

    Without ``lines``, the whole of each queue file in ``files``, hard-linked, not copied: the queue files stay
    where consumption and archiving expect them, and the set-aside copy shares their bytes (a copy across file
    systems). With ``lines`` (a split batch), each file in it holds only those of its lines (1-based), which the
    manifest maps to the source's line numbers.
    """
    staging.mkdir(parents=True, exist_ok=True)
    count = 0
    kept: list[str] = []
    for name in (files if lines is None else sorted(lines)):
        source = _source(layout, name)
        if source is None:
            continue
        target = staging / name
        if lines is not None:
            chosen = _lines(source.read_bytes())
            target.write_bytes(b"".join(chosen[number - 1] + b"\n" for number in sorted(lines[name])))
        elif not target.exists():
            try:
                os.link(source, target)
            except OSError:
                target.write_bytes(source.read_bytes())
        count += len(_lines(target.read_bytes()))
        kept.append(name)
    manifest: dict[str, Any] = {
        "batch_id": batch_id,
        "epoch": epoch,
        "files": kept,
        "records": count,
        "split": lines is not None,
        "lines": None if lines is None else {name: sorted(lines[name]) for name in kept},
        "attempts": failed.attempts,
        "failing_s": round(failed.failing_s, 3),
        "error": failed.error,
        "set_aside_at": time.time(),
        "how_to_replay": f"fix the cause, then `tenure replay --data-root <data root> --batch {batch_id}`: the next "
                         "batch writes these records, past their keys' order marks",
    }
    write_json(staging / MANIFEST, manifest)
    return count
