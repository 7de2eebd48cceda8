"""The data root's layout and the idempotent file moves behind publish, roll-forward and clean-up (the queue's own
moves, archiving, are in :mod:`tenure.career.spark._archive`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog

from tenure.career._durable import fsync, sync_dirs
from tenure.career.output import (
    CHECKPOINT,
    DEAD_LETTER,
    ORDER,
    QUARANTINE,
    RETRY,
    SET_ASIDE,
    TABLE,
    adopt_table,
    covered_batch,
    covers,
    publish_batch,
)
from tenure.career.queue import QueueLayout, is_hidden

__all__ = [
    "DELTA_VERSION_ADDED",
    "CheckpointSync",
    "Layout",
    "Published",
    "StaleTermError",
    "adopt_checkpoint",
    "adopt_outputs",
    "finish_publish",
    "fsync",
    "is_published",
    "newer_term_started",
    "published_name",
    "remove_dead_staging",
    "staged_parts",
    "sync_dirs",
    "sync_tree",
]

_log = structlog.get_logger("tenure.career.spark")

DELTA_VERSION_ADDED: Final = "delta_version_added"
"""Logged when a publish adds a batch's version to an output's Delta table (fields output, path, batch, version)."""

_EPOCH_PREFIX = "epoch="


class StaleTermError(Exception):
    """A newer term has already started on this data root: this term must not touch the shared files."""


def _epoch_of(name: str) -> int | None:
    """``epoch=17`` → 17; anything else → None."""
    if not name.startswith(_EPOCH_PREFIX):
        return None
    try:
        return int(name[len(_EPOCH_PREFIX):])
    except ValueError:
        return None


class CheckpointSync:
    """Makes a term's Spark checkpoint durable: Spark writes its offset, commit and state files through Hadoop's
    local file system, which never fsyncs, so a power loss could take the newest of them.

    :meth:`sync` fsyncs every file under the checkpoint it has not synced before, then the folders that hold
    them; called at the start of each batch, it makes durable what the batch before left (its commit, its
    state files) and this batch's planned offsets, before this batch marks files consumed or commits to
    ZooKeeper, either of which assumes the checkpoint has them; and before the marks of a batch Spark has
    committed while the queue is idle (``_term.mark_consumed``), so its commit is durable within a second of
    being written, not one batch later. A batch adds a handful of files, so a call costs a few fsyncs.

    Files are synced deepest first and the commit log last: a snapshot after the state files it is built on, a
    batch's commit after its state, so a power loss in the middle leaves no commit whose state is torn (what it
    leaves torn, ``_recovery`` removes). Safe from both the batch and the control thread.
    """

    def __init__(self, checkpoint: Path) -> None:
        self._root = checkpoint
        self._synced: set[str] = set()
        self._lock = threading.Lock()

    def sync(self) -> int:
        """fsync the checkpoint's new files and their folders; returns how many files."""
        with self._lock:
            return self._sync()

    def _sync(self) -> int:
        present: set[str] = set()
        folders: set[str] = set()
        new: list[tuple[bool, int, str, str]] = []
        commits = os.path.join(str(self._root), "commits")
        for folder, _dirs, files in os.walk(self._root):
            for name in files:
                path = os.path.join(folder, name)
                present.add(path)
                if path not in self._synced:
                    new.append((folder == commits, -folder.count(os.sep), path, folder))
        for _last, _depth, path, folder in sorted(new):
            try:
                fsync(Path(path))
            except FileNotFoundError:  # Spark purged it meanwhile (batches past its retention)
                present.discard(path)
                continue
            folders.add(folder)
        chain: set[str] = set()
        root = str(self._root)
        for created in folders:  # each folder up to the checkpoint's own: Spark may have created any of them
            chain.update(str(p) for p in (Path(created), *Path(created).parents) if len(str(p)) >= len(root))
        for folder in sorted(chain, key=len, reverse=True):
            fsync(Path(folder), directory=True)
        added = len(present - self._synced)
        self._synced = present
        return added


def sync_tree(path: Path) -> None:
    """Make every file under ``path``, and the folders holding them, durable (no-op if ``path`` is absent)."""
    if not path.exists():
        return
    for folder, _dirs, files in os.walk(path):
        for name in files:
            fsync(Path(folder) / name)
        fsync(Path(folder), directory=True)
    sync_dirs(path.parent)


@dataclass(frozen=True)
class Layout:
    """Where everything lives under a data root (ARCHITECTURE.md, "Data root layout").

    ``table/`` and ``quarantine/`` hold flat part files named ``batch-<B, 12 digits>-part-….parquet``, so
    ``spark.read.parquet`` and ``pyarrow.dataset`` read them without options; staging sits under
    ``_staging/epoch=<e>/batch=<B>/``, which both readers skip (a leading ``_``).

    The queue — ``landing/``, ``archive/`` and the groups' consumption marks ``consumed/<group>/``, laid out as
    :class:`tenure.career.queue.QueueLayout` says — lives under ``queue_root``, which several consumer groups may
    share; it defaults to the data root.
    """

    root: Path
    queue_root: Path | None = None

    @property
    def queue(self) -> QueueLayout:
        """The queue: under ``queue_root``, or under the data root when no shared queue is configured."""
        return QueueLayout(self.root if self.queue_root is None else self.queue_root)

    @property
    def landing(self) -> Path:
        return self.queue.landing

    @property
    def archive(self) -> Path:
        return self.queue.archive

    @property
    def table(self) -> Path:
        return self.root / TABLE

    @property
    def quarantine(self) -> Path:
        return self.root / QUARANTINE

    @property
    def applications(self) -> Path:
        """On a cluster, each term's application id (``_cluster``): what a new leader may kill."""
        return self.root / "_applications"

    @property
    def standby(self) -> Path:
        """On a cluster, the scratch data roots of followers' warm-ups (executors must see them too)."""
        return self.root / "_standby"

    @property
    def checkpoint(self) -> Path:
        """Spark's checkpoints: one ``epoch=<e>`` folder per term (see :func:`adopt_checkpoint`)."""
        return self.root / CHECKPOINT

    @property
    def order(self) -> Path:
        """Per-key high-water marks: the highest ``seq`` published for each key (``tenure.career.spark._order``)."""
        return self.root / ORDER

    def term_checkpoint(self, epoch: int) -> Path:
        """``checkpoint/epoch=<e>``: the Spark checkpoint that term ``epoch`` reads and writes, and no other."""
        return self.checkpoint / f"{_EPOCH_PREFIX}{epoch}"

    @property
    def retry(self) -> Path:
        return self.root / RETRY

    @property
    def dead_letter(self) -> Path:
        return self.root / DEAD_LETTER

    @property
    def set_aside(self) -> Path:
        """Poison batches set aside: each one's queue files and a manifest (``tenure.career.spark._set_aside``)."""
        return self.root / SET_ASIDE

    def outputs(self) -> dict[str, Path]:
        """The folders a commit record's ``staged`` entries publish into, by entry name."""
        return {"table": self.table, "quarantine": self.quarantine, "retry": self.retry,
                "dead_letter": self.dead_letter, "order": self.order, "set_aside": self.set_aside}

    def delta_outputs(self) -> dict[str, Path]:
        """The outputs that are Delta tables (``tenure.career.output``), by their commit record ``staged`` name."""
        return {"table": self.table, "quarantine": self.quarantine, "dead_letter": self.dead_letter}

    def staging(self, output: Path, epoch: int, batch_id: int) -> Path:
        """``<output>/_staging/epoch=<e>/batch=<B>``."""
        return output / "_staging" / f"{_EPOCH_PREFIX}{epoch}" / f"batch={batch_id}"

    def relative(self, path: Path) -> str:
        """A path as stored in the commit record: relative to the data root (the root may be mounted elsewhere)."""
        return path.relative_to(self.root).as_posix()

    def resolve(self, stored: str) -> Path:
        return self.root / stored



def spark_committed(checkpoint: Path, batch_id: int) -> bool:
    """Whether the Spark checkpoint ``checkpoint`` has committed ``batch_id`` (its ``commits/<B>`` file exists)."""
    return (checkpoint / "commits" / str(batch_id)).exists()


def _term_folders(layout: Layout) -> dict[int, Path]:
    try:
        entries = list(os.scandir(layout.checkpoint))
    except FileNotFoundError:
        return {}
    return {epoch: Path(e.path) for e in entries if (epoch := _epoch_of(e.name)) is not None and e.is_dir()}


def newer_term_started(layout: Layout, epoch: int) -> bool:
    """Whether a term above ``epoch`` has begun taking its checkpoint (its folder, or the partial copy of it)."""
    try:
        names = [e.name for e in os.scandir(layout.checkpoint)]
    except FileNotFoundError:
        return False
    for name in names:
        found = _epoch_of(name.removeprefix(".").removesuffix(".partial"))
        if found is not None and found > epoch:
            return True
    return False


def adopt_checkpoint(layout: Layout, epoch: int) -> tuple[Path, int | None]:
    """Give term ``epoch`` a Spark checkpoint of its own, hard-linked from the newest earlier term's.

    Why: a paused or cut-off leader's JVM may resume and write into its checkpoint (plan the next batch,
    commit the last) after a successor has started, and Spark's own guard against two writers fires only
    after the fact (and is not atomic on a local filesystem). With a folder per term, whatever a stale term
    writes lands in its own folder, which no later term reads: the successor's copy was taken when it was
    elected, and every later term copies from a newer one. Spark writes each checkpoint file once (a temporary
    name, then a rename), so hard links share no mutable state; a stale term's renames replace entries in its
    own folder only.

    The copy is made under a hidden name, made durable, and renamed into place (that rename made durable too),
    so a crash mid-copy leaves no half folder and a power loss after inauguration cannot take the copy.
    A flat checkpoint of an earlier tenure version (``checkpoint/offsets`` …) is adopted as the oldest term.

    Returns the term's folder and the epoch it was copied from (``None``: fresh, or the flat legacy layout).

    Raises:
        StaleTermError: a term with a higher epoch has a folder already: this term is stale.
    """
    folders = _term_folders(layout)
    newer = [e for e in folders if e > epoch]
    if newer:
        raise StaleTermError(f"term {epoch} is stale: term {max(newer)} has already started on {layout.root}")
    target = layout.term_checkpoint(epoch)
    earlier = [e for e in folders if e < epoch]
    source_epoch = max(earlier) if earlier else None
    if source_epoch is not None:
        source: Path | None = folders[source_epoch]
    elif (layout.checkpoint / "offsets").is_dir():
        source = layout.checkpoint  # the flat layout before per-term folders
    else:
        source = None
    partial = layout.checkpoint / f".{target.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)  # an earlier attempt of this very term (same node, same epoch)
    partial.mkdir(parents=True)
    if source is not None:
        _link_tree(source, partial)
    sync_tree(partial)  # the links and, through them, the previous term's last files (its last commit)
    os.replace(partial, target)
    sync_dirs(layout.checkpoint)
    for old, folder in folders.items():  # no term below the one copied from can ever be adopted again
        if source_epoch is not None and old < source_epoch:
            shutil.rmtree(folder, ignore_errors=True)
    return target, source_epoch


def _link_tree(source: Path, target: Path) -> None:
    """Hard-link every file of ``source`` into ``target`` (folders re-created), skipping term folders."""
    for folder, dirs, files in os.walk(source):
        here = Path(folder)
        if here == source:
            dirs[:] = [d for d in dirs if _epoch_of(d) is None and not d.startswith(".")]
        into = target / here.relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                os.link(here / name, into / name)
            except FileNotFoundError:
                continue  # a stale term's temporary file renamed or deleted meanwhile: not part of any state


def published_name(batch_id: int, part: str) -> str:
    """The name a staged part file gets in the output folder."""
    return f"batch-{batch_id:012d}-{part}"


def staged_parts(layout: Layout, staged: Mapping[str, str], batch_id: int) -> dict[str, list[str]]:
    """The published names of the part files staged for each Delta output (the commit record's ``parts``), so the
    batch's Delta step adds exactly these without listing the output folder, which keeps every published file."""
    return {name: sorted(published_name(batch_id, entry.name) for entry in layout.resolve(staged[name]).iterdir()
                         if not is_hidden(entry.name) and entry.is_file())
            for name in layout.delta_outputs() if name in staged}


def _link_staged(staged: Path, output: Path, batch_id: int) -> int:
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
                os.link(entry, output / published_name(batch_id, entry.name), follow_symlinks=False)
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
    return all(covers(covered_batch(output), batch_id)
               for name, output in layout.delta_outputs().items() if name in staged)


def adopt_outputs(layout: Layout, record: Mapping[str, Any]) -> list[str]:
    """Make each Delta output that holds published files but no Delta table one, in one version of every file of
    the batches up to the committed ``record``'s (``career.output.adopt_table``); returns the outputs adopted."""
    return [name for name, output in layout.delta_outputs().items()
            if adopt_table(output, int(record["batch_id"]), epoch=int(record["epoch"]),
                           replica_id=str(record.get("replica_id") or "")) is not None]


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
            moved += _link_staged(layout.resolve(staged[name]), output, batch_id)
    fault("after_rename")
    started, versions = time.monotonic(), 0
    for name, output in layout.delta_outputs().items():
        if name in staged:
            # Again, right before the version names them: a part file deleted since (a VACUUM) is back.
            _link_staged(layout.resolve(staged[name]), output, batch_id)
            version = publish_batch(output, batch_id, epoch=int(record["epoch"]),
                                    replica_id=str(record.get("replica_id") or ""),
                                    parts=None if parts is None else parts.get(name, []),
                                    before_commit=lambda: fault("inside_delta_commit"))
            if version is not None:
                versions += 1
                _log.info(DELTA_VERSION_ADDED, output=name, path=str(output), batch=batch_id, version=version)
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
    """Delete the staging folders of epochs below ``live_epoch``; returns what was removed (relative paths).

    Safe whoever calls it, a stale leader included: term ``live_epoch`` was elected, so every election node
    created before its own (every lower epoch) was gone by then, and a commit checks its own node: no lower
    epoch can commit again, so its staging can never be named by a future commit. Higher epochs are never
    touched. Call only after the committed batch has been rolled forward: its staging may be a lower epoch's.
    """
    removed: list[str] = []
    for output in layout.outputs().values():
        base = output / "_staging"
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            epoch = _epoch_of(entry.name)
            if epoch is not None and epoch < live_epoch:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(layout.relative(entry))
    return removed
