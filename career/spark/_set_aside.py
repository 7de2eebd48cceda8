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
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tenure.career._protocol import FailedBatch
from tenure.career.set_aside import MANIFEST, write_json
from tenure.career.spark._layout import Layout
from tenure.career.spark._read import CHUNK_BYTES, error_text

__all__ = ["stage_set_aside"]


def _source(layout: Layout, name: str) -> Path | None:
    """Where the queue entry ``name`` is now (a dangling link included: it is named in ``not_kept``)."""
    return next((folder / name for folder in (layout.landing, layout.archive) if os.path.lexists(folder / name)),
                None)


def stage_set_aside(layout: Layout, staging: Path, *, batch_id: int, epoch: int, files: Sequence[str],
                    failed: FailedBatch, records: Mapping[str, Sequence[tuple[int, bytes]]] | None = None) -> int:
    """Stage what a batch sets aside in ``staging`` with a manifest; returns the number of lines staged.

    Without ``records``, the whole of each queue file in ``files``, hard-linked, not copied: the queue files stay
    where consumption and archiving expect them, and the set-aside copy shares their bytes (a copy across file
    systems). An entry that can be neither linked nor copied (a folder, a dangling link, a file this process may
    not read) is named in the manifest's ``not_kept`` with the error: the batch is set aside all the same (its
    batch quarantined none of it, so ``tenure verify`` counts the lines of a file by that name as set aside too).
    With ``records`` (a split batch), one file per source named in it (a queue file, a set-aside file being
    replayed, or any other source's name) holding its records set aside, one JSON line each, whatever the source
    (``(line, record)``: the line the record came from, which the manifest keeps, and the record).
    """
    staging.mkdir(parents=True, exist_ok=True)
    count = 0
    kept: list[str] = []
    not_kept: dict[str, str] = {}
    for name in (files if records is None else sorted(records)):
        target = staging / name
        if records is not None:
            target.write_bytes(b"".join(line + b"\n" for _number, line in sorted(records[name])))
        else:
            source = _source(layout, name)
            if source is None:
                continue
            try:
                if not source.is_file():
                    not_kept[name] = "not a regular file"
                    continue
                if not target.exists():
                    _link_or_copy(source, target)
            except OSError as exc:
                target.unlink(missing_ok=True)
                not_kept[name] = error_text(exc)
                continue
        count += _count_lines(target)
        kept.append(name)
    manifest: dict[str, Any] = {
        "batch_id": batch_id,
        "epoch": epoch,
        "files": kept,
        **({"not_kept": not_kept} if not_kept else {}),
        "records": count,
        "split": records is not None,
        "lines": None if records is None else {name: sorted(n for n, _ in records[name]) for name in kept},
        "attempts": failed.attempts,
        "failing_s": round(failed.failing_s, 3),
        "error": failed.error,
        "set_aside_at": time.time(),
        "how_to_replay": f"fix the cause, then `tenure replay --data-root <data root> --batch {batch_id}"
                         f"{'' if layout.queues == 1 else f' --queue {layout.index}'}`: the next batch writes these "
                         "records, past their keys' order marks",
    }
    write_json(staging / MANIFEST, manifest)
    return count


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
