"""The data root's layout and the idempotent file moves behind publish, roll-forward, clean-up and archive."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

__all__ = [
    "Layout",
    "archive_files",
    "empty_landing_files",
    "finish_publish",
    "is_published",
    "landing_files",
    "published_name",
    "remove_dead_staging",
    "sweep_archive",
]

_log = structlog.get_logger("tenure.career.spark")

_EPOCH_PREFIX = "epoch="


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


@dataclass(frozen=True)
class Layout:
    """Where everything lives under a data root (DESIGN.md, "Output").

    ``table/`` and ``quarantine/`` hold flat part files named ``batch-<B, 12 digits>-part-….parquet``, so
    ``spark.read.parquet`` and ``pyarrow.dataset`` read them without options; staging sits under
    ``_staging/epoch=<e>/batch=<B>/``, which both readers skip (a leading ``_``).

    The queue — ``landing/``, ``archive/`` and the groups' consumption marks ``consumed/<group>/`` — lives
    under ``queue_root``, which several consumer groups may share; it defaults to the data root.
    """

    root: Path
    queue_root: Path | None = None

    @property
    def queue(self) -> Path:
        """The queue folder: ``queue_root``, or the data root when no shared queue is configured."""
        return self.root if self.queue_root is None else self.queue_root

    @property
    def landing(self) -> Path:
        return self.queue / "landing"

    @property
    def archive(self) -> Path:
        return self.queue / "archive"

    @property
    def consumed(self) -> Path:
        """``consumed/<group>/<file name>``: empty marks, one per queue file a group no longer needs."""
        return self.queue / "consumed"

    @property
    def table(self) -> Path:
        return self.root / "table"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def retry(self) -> Path:
        return self.root / "retry"

    @property
    def dead_letter(self) -> Path:
        return self.root / "dead-letter"

    def outputs(self) -> dict[str, Path]:
        """The folders a commit record's ``staged`` entries publish into, by entry name."""
        return {"table": self.table, "quarantine": self.quarantine, "retry": self.retry,
                "dead_letter": self.dead_letter}

    def staging(self, output: Path, epoch: int, batch_id: int) -> Path:
        """``<output>/_staging/epoch=<e>/batch=<B>``."""
        return output / "_staging" / f"{_EPOCH_PREFIX}{epoch}" / f"batch={batch_id}"

    def relative(self, path: Path) -> str:
        """A path as stored in the commit record: relative to the data root (the root may be mounted elsewhere)."""
        return path.relative_to(self.root).as_posix()

    def resolve(self, stored: str) -> Path:
        return self.root / stored

    def spark_committed(self, batch_id: int) -> bool:
        """Whether Spark's checkpoint has committed ``batch_id`` (its ``commits/<B>`` file exists)."""
        return (self.checkpoint / "commits" / str(batch_id)).exists()


def published_name(batch_id: int, part: str) -> str:
    """The name a staged part file gets in the output folder."""
    return f"batch-{batch_id:012d}-{part}"


def _publish_folder(staged: Path, output: Path, batch_id: int) -> int:
    """Move each staged part file into ``output`` under its published name; then drop the staging folder.

    Every step may be repeated (a roll-forward after a crash, or a zombie racing the new leader on the same
    committed batch): a source already gone was moved by an earlier attempt.
    """
    moved = 0
    if staged.is_dir():
        for entry in sorted(staged.iterdir()):
            if _hidden(entry.name) or not entry.is_file():
                continue
            target = output / published_name(batch_id, entry.name)
            try:
                os.replace(entry, target)  # atomic on one POSIX filesystem; same content either way
                moved += 1
            except FileNotFoundError:
                continue
        shutil.rmtree(staged, ignore_errors=True)
        _prune_empty(staged.parent)
    return moved


def _prune_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # only succeeds when empty (another batch of the epoch may be staging)
        folder.rmdir()


def is_published(layout: Layout, record: Mapping[str, Any]) -> bool:
    """A committed batch is published once its staging folders are gone (the state lives in the files)."""
    staged = record.get("staged") or {}
    return not any(layout.resolve(path).exists() for path in staged.values())


def finish_publish(layout: Layout, record: Mapping[str, Any]) -> int:
    """Publish (or finish publishing) the committed batch ``record`` describes; returns files moved now."""
    batch_id = int(record["batch_id"])
    staged = record.get("staged") or {}
    moved = 0
    for name, output in layout.outputs().items():
        if name in staged:
            output.mkdir(parents=True, exist_ok=True)
            moved += _publish_folder(layout.resolve(staged[name]), output, batch_id)
    if "retry" in staged:
        _drop_older_snapshots(layout.retry, batch_id)
    return moved


def _drop_older_snapshots(folder: Path, batch_id: int) -> None:
    """Delete retry snapshots of batches before ``batch_id``: the committed batch's snapshot supersedes them."""
    for entry in folder.glob("batch-*.parquet"):
        if int(entry.name.split("-", 2)[1]) < batch_id:
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()


def remove_dead_staging(layout: Layout, live_epoch: int) -> list[str]:
    """Delete staging folders of every epoch but ``live_epoch``; returns what was removed (relative paths).

    Call only after the committed batch has been rolled forward: its staging belongs to a dead epoch too.
    """
    removed: list[str] = []
    for output in layout.outputs().values():
        base = output / "_staging"
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            if entry.name != f"{_EPOCH_PREFIX}{live_epoch}":
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(layout.relative(entry))
    return removed


def archive_files(layout: Layout, names: Iterable[str]) -> int:
    """Move consumed queue files from ``landing/`` to ``archive/`` (same names); a missing one was moved already.

    The archived file's modification time is set to now, so retention counts from the archiving.
    """
    moved = 0
    layout.archive.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for name in names:
        if not name or "/" in name or name in (".", ".."):
            continue
        source = layout.landing / name
        target = layout.archive / name
        try:
            os.replace(source, target)
        except FileNotFoundError:
            continue
        with contextlib.suppress(FileNotFoundError):  # swept by another process meanwhile: nothing to keep
            os.utime(target, (now, now))
        moved += 1
    return moved


def empty_landing_files(layout: Layout, min_age_s: float) -> list[str]:
    """Visible queue files of zero bytes older than ``min_age_s``.

    Spark's file source never hands an empty file to a batch (it skips zero-length files), so no batch can
    name it; it holds nothing to lose, and the file source tolerates a listed file that has gone, so these
    may be archived at any time.
    """
    found: list[str] = []
    cutoff = time.time() - min_age_s
    try:
        entries = list(os.scandir(layout.landing))
    except FileNotFoundError:
        return found
    for entry in entries:
        if _hidden(entry.name) or not entry.name.endswith(".jsonl"):
            continue
        try:
            info = entry.stat()
        except FileNotFoundError:
            continue
        if info.st_size == 0 and info.st_mtime < cutoff:
            found.append(entry.name)
    return found


def landing_files(layout: Layout) -> list[str]:
    """Names of visible queue files in ``landing/`` (what the file source would list)."""
    try:
        return [e.name for e in os.scandir(layout.landing)
                if e.name.endswith(".jsonl") and not _hidden(e.name)]
    except FileNotFoundError:
        return []


def sweep_archive(layout: Layout, retention_s: float) -> int:
    """Delete archived files archived more than ``retention_s`` ago; returns how many."""
    removed = 0
    cutoff = time.time() - retention_s
    try:
        entries = list(os.scandir(layout.archive))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if entry.is_file() and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
        except FileNotFoundError:
            continue
    return removed
