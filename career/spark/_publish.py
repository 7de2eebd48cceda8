"""Publishing a committed batch: its staged part files linked into the outputs and added to each Delta table as one
version, idempotent so that any replica may finish it (a successor's roll-forward, a stale leader resuming), and the
clean-up of dead epochs' staging."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog

from tenure.career._durable import sync_dirs
from tenure.career.output import adopt_table, covered_batch, covers, publish_batch
from tenure.career.queue import is_hidden
from tenure.career.spark._layout import Layout, epoch_of

__all__ = [
    "DELTA_VERSION_ADDED",
    "Published",
    "adopt_outputs",
    "finish_publish",
    "is_published",
    "remove_dead_staging",
    "staged_parts",
]

_log = structlog.get_logger("tenure.career.spark")

DELTA_VERSION_ADDED: Final = "delta_version_added"
"""Logged when a publish adds a batch's version to an output's Delta table (fields output, path, batch, version)."""


def staged_parts(layout: Layout, staged: Mapping[str, str], batch_id: int) -> dict[str, list[str]]:
    """The published names of the part files staged for each Delta output (the commit record's ``parts``), so the
    batch's Delta step adds exactly these without listing the output folder, which keeps every published file."""
    return {name: sorted(layout.published_name(output, batch_id, entry.name)
                         for entry in layout.resolve(staged[name]).iterdir()
                         if not is_hidden(entry.name) and entry.is_file())
            for name, output in layout.delta_outputs().items() if name in staged}


def _link_staged(layout: Layout, staged: Path, output: Path, batch_id: int) -> int:
    """Hard-link each staged part file into ``output`` under its published name, durably; returns how many were
    linked.

    Links, not renames: the staged copy stays until the batch's Delta versions are in (:func:`finish_publish` drops
    the staging last), so a published file deleted before its version names it — a ``VACUUM`` that removes files
    no version names yet — is linked again from staging (right before the version is written, and by any later
    attempt) instead of leaving a half batch.
    Every step may be repeated (a roll-forward after a crash, or a zombie racing the new leader on the same
    committed batch): a target already there is the same file, linked by an earlier attempt.
    """
    linked = 0
    if staged.is_dir():
        for entry in sorted(staged.iterdir()):
            if is_hidden(entry.name) or not entry.is_file():
                continue
            try:
                os.link(entry, output / layout.published_name(output, batch_id, entry.name), follow_symlinks=False)
                linked += 1
            except (FileExistsError, FileNotFoundError):  # linked by an earlier attempt; staging dropped by one
                continue
    if linked:
        sync_dirs(output)  # the links survive a power loss before Spark's commit
    return linked


def _drop_staging(staged: Path) -> None:
    shutil.rmtree(staged, ignore_errors=True)
    _prune_empty(staged.parent)


def _prune_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # only succeeds when empty (another batch of the epoch may be staging)
        folder.rmdir()


def is_published(layout: Layout, record: Mapping[str, Any]) -> bool:
    """A committed batch is published once its staging folders are gone and each Delta output it wrote to has a
    version for it (the state lives in the files and the Delta logs)."""
    staged = record.get("staged") or {}
    if any(layout.resolve(path).exists() for path in staged.values()):
        return False
    batch_id = int(record["batch_id"])
    return all(covers(covered_batch(output, layout.output), batch_id)
               for name, output in layout.delta_outputs().items() if name in staged)


def adopt_outputs(layout: Layout, record: Mapping[str, Any]) -> list[str]:
    """Make each Delta output that holds published files but no Delta table one, in one version of every file of
    the batches up to the committed ``record``'s (``career.output.adopt_table``); returns the outputs adopted."""
    return [name for name, output in layout.delta_outputs().items()
            if adopt_table(output, int(record["batch_id"]), epoch=int(record["epoch"]),
                           replica_id=str(record.get("replica_id") or ""), queue=layout.output) is not None]


@dataclass(frozen=True)
class Published:
    """What :func:`finish_publish` did: files linked, Delta versions added, and the seconds the Delta part took."""

    moved: int
    versions: int
    delta_s: float


def finish_publish(layout: Layout, record: Mapping[str, Any], fault: Callable[[str], None] = lambda _point: None
                   ) -> Published:
    """Publish (or finish publishing) the committed batch ``record`` describes.

    Three steps, each idempotent (any replica may finish them, in any interleaving with another): link the staged
    part files into their output folders, add them to each Delta output's table as one version
    (``tenure.career.output.publish_batch``, which names the epoch and replica that committed the batch and
    refuses a part file that is gone), then drop the staging. ``fault`` is the fault hook, called at
    ``after_rename`` (the files linked) and ``inside_delta_commit``.
    """
    batch_id = int(record["batch_id"])
    staged = record.get("staged") or {}
    parts: Mapping[str, list[str]] | None = record.get("parts")  # None in a record of an earlier release
    moved = 0
    for name, output in layout.outputs().items():
        if name in staged:
            output.mkdir(parents=True, exist_ok=True)
            moved += _link_staged(layout, layout.resolve(staged[name]), output, batch_id)
    fault("after_rename")
    started, versions = time.monotonic(), 0
    for name, output in layout.delta_outputs().items():
        if name in staged:
            # Again, right before the version names them: a part file deleted since (a VACUUM) is back.
            _link_staged(layout, layout.resolve(staged[name]), output, batch_id)
            version = publish_batch(output, batch_id, epoch=int(record["epoch"]),
                                    replica_id=str(record.get("replica_id") or ""),
                                    parts=None if parts is None else parts.get(name, []),
                                    before_commit=lambda: fault("inside_delta_commit"), queue=layout.output)
            if version is not None:
                versions += 1
                _log.info(DELTA_VERSION_ADDED, output=name, path=str(output), batch=batch_id, version=version,
                          **({} if layout.queues == 1 else {"queue": layout.index}))
    delta_s = time.monotonic() - started
    for name in staged:  # last: until every version is in, a part file deleted from an output is linked again
        _drop_staging(layout.resolve(staged[name]))
    for name in ("retry", "order"):
        if name in staged:
            _drop_older_snapshots(layout.outputs()[name], batch_id)
    return Published(moved, versions, delta_s)


def _drop_older_snapshots(folder: Path, batch_id: int) -> None:
    """Delete retry snapshots of batches before ``batch_id``: the committed batch's snapshot supersedes them."""
    for entry in folder.glob("batch-*.parquet"):
        if int(entry.name.split("-", 2)[1]) < batch_id:
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()


def remove_dead_staging(layout: Layout, live_epoch: int) -> list[str]:
    """Delete the queue's staging folders of epochs below ``live_epoch``; returns what was removed (relative paths).

    Safe whoever calls it, a stale leader included: term ``live_epoch`` was elected, so every election node of the
    queue's line created before its own (every lower epoch) was gone by then, and a commit checks its own node: no
    lower epoch of the queue can commit again, so its staging can never be named by a future commit. Higher epochs
    are never touched, nor another queue's staging (``Layout.staging_root``): its live term's epoch may be lower.
    Call only after the committed batch has been rolled forward: its staging may be a lower epoch's.
    """
    removed: list[str] = []
    for output in layout.outputs().values():
        base = layout.staging_root(output)
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            epoch = epoch_of(entry.name)
            if epoch is not None and epoch < live_epoch:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(layout.relative(entry))
    return removed
