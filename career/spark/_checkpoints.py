"""A term's Spark checkpoint: a folder of its own, hard-linked from the newest earlier term's at inauguration, and
made durable as Spark writes it (ARCHITECTURE.md, "Where each guarantee is enforced")."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from tenure.career._durable import fsync, sync_dirs, sync_tree
from tenure.career.spark._layout import Layout, epoch_of

__all__ = ["CheckpointSync", "StaleTermError", "adopt_checkpoint", "newer_term_started", "spark_committed"]


class StaleTermError(Exception):
    """A newer term has already started on this data root: this term must not touch the shared files."""


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


def spark_committed(checkpoint: Path, batch_id: int) -> bool:
    """Whether the Spark checkpoint ``checkpoint`` has committed ``batch_id`` (its ``commits/<B>`` file exists)."""
    return (checkpoint / "commits" / str(batch_id)).exists()


def _term_folders(layout: Layout) -> dict[int, Path]:
    try:
        entries = list(os.scandir(layout.checkpoint))
    except FileNotFoundError:
        return {}
    return {epoch: Path(e.path) for e in entries if (epoch := epoch_of(e.name)) is not None and e.is_dir()}


def newer_term_started(layout: Layout, epoch: int) -> bool:
    """Whether a term above ``epoch`` has begun taking its checkpoint (its folder, or the partial copy of it)."""
    try:
        names = [e.name for e in os.scandir(layout.checkpoint)]
    except FileNotFoundError:
        return False
    for name in names:
        found = epoch_of(name.removeprefix(".").removesuffix(".partial"))
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
            dirs[:] = [d for d in dirs if epoch_of(d) is None and not d.startswith(".")]
        into = target / here.relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                os.link(here / name, into / name)
            except FileNotFoundError:
                continue  # a stale term's temporary file renamed or deleted meanwhile: not part of any state
