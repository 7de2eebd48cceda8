"""A term's Spark checkpoint: a folder of its own, hard-linked from the newest earlier term's at inauguration (from a
follower's prepared copy when it passes its checks), and made durable as Spark writes it (ARCHITECTURE.md, "Where
each guarantee is enforced")."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Final

from tenure.career._durable import fsync, sync_dirs, sync_tree
from tenure.career.spark._layout import Layout, epoch_of

__all__ = ["PREPARED_PREFIX", "CheckpointSync", "PreparedCheckpoint", "StaleTermError", "adopt_checkpoint",
           "newer_term_started", "spark_committed"]

#: A follower's prepared copy is ``<checkpoint>/.prepared-<replica>``: hidden, so no term takes it for a term
#: folder, none copies it (``_link_tree`` skips hidden folders) and ``newer_term_started`` does not count it.
PREPARED_PREFIX: Final = ".prepared-"


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


def adopt_checkpoint(layout: Layout, epoch: int, *, prepared: PreparedCheckpoint | None = None,
                     committed: int | None = None) -> tuple[Path, int | None]:
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

    With ``prepared``, the follower's copy taken ahead of the election (:class:`PreparedCheckpoint`), only what it
    lacks is linked: it is used if it was taken from the folder this term copies and, caught up again, holds the
    ``committed`` batch's offset and commit files as that folder's own files; otherwise it is discarded and the
    copy is made in full (``prepared.verdict`` says which). The argument above holds for it unchanged: the hidden
    ``.epoch=<e>.partial`` exists before the copy's last catch-up begins, exactly as before the full copy's links,
    so a stale term that marks queue files consumed (only while no such folder exists: ``newer_term_started``)
    did so for a batch its folder had already committed, which that catch-up then links; and what that catch-up
    leaves is, name for name, the file the source holds at that moment (a file the source replaced since an
    earlier catch-up is linked again, one it deleted is dropped), the tree a full copy would have taken. The
    prepared folder itself is the follower's alone: no term reads it before it is renamed into a term's place.

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
    partial.mkdir(parents=True)  # from here on, a stale term marks nothing consumed (``newer_term_started``)
    if prepared is not None and prepared.take(source_epoch, committed, partial):
        sync_dirs(partial.parent)
    else:
        if source is not None:
            _link_tree(source, partial)
        sync_tree(partial)  # the links and, through them, the previous term's last files (its last commit)
    os.replace(partial, target)
    sync_dirs(layout.checkpoint)
    for old, folder in folders.items():  # no term below the one copied from can ever be adopted again
        if source_epoch is not None and old < source_epoch:
            shutil.rmtree(folder, ignore_errors=True)
    return target, source_epoch


class PreparedCheckpoint:
    """A follower's hard-linked copy of the newest term's checkpoint, taken ahead of its election and caught up as
    the leader commits, so that its inauguration links only what is new (issue 53).

    Checked, never trusted (:meth:`take`, at inauguration): used only if it was taken from the term folder the new
    term copies (the newest earlier one) and, caught up once more, holds the committed batch's ``offsets/<B>`` and
    ``commits/<B>`` as the very files (same inode) that folder holds; otherwise discarded. A catch-up is exact: it
    links what the source has that the copy lacks or holds as another file, and drops what the source no longer
    has, so a copy never keeps a file the source replaced (a batch re-run after a pause writes its state again).
    The follower fsyncs what it links (:meth:`sync_linked`), so a term that takes the copy syncs only what it links
    itself and whatever the follower had not synced yet.

    The follower's thread and inauguration take turns through :attr:`lock` (:meth:`take` takes it itself).

    Example::

        prepared = PreparedCheckpoint(layout, "r1")
        with prepared.lock:
            prepared.catch_up()                 # the follower, after each commit it sees
        prepared.sync_linked()
        adopt_checkpoint(layout, epoch, prepared=prepared, committed=7)   # at inauguration
        prepared.verdict                        # "used", or why not
    """

    def __init__(self, layout: Layout, owner: str) -> None:
        self.folder = layout.checkpoint / f"{PREPARED_PREFIX}{re.sub(r'[^A-Za-z0-9_.-]', '_', owner)}"
        self.lock = threading.Lock()
        self.verdict = "none"  # what the last ``take`` did: "used", or why the term copied in full
        self.linked_at_take = 0  # files ``take`` linked itself: what the copy lacked at inauguration
        self._layout = layout
        self._source: int | None = None  # the term folder the copy mirrors
        self._files: dict[str, int] = {}  # relative path -> inode of the link the copy holds
        self._dirs: set[str] = set()
        self._unsynced: set[tuple[Path, int]] = set()  # links made and not fsynced yet, with their inodes
        self.discard()  # a copy left by an earlier life of the process: what it holds is not known

    @property
    def source_epoch(self) -> int | None:
        """The term whose folder the copy mirrors (None: no copy)."""
        return self._source

    def newest_term(self) -> tuple[int, Path] | None:
        """The newest term folder on the data root, and its epoch (None: none yet)."""
        folders = _term_folders(self._layout)
        return None if not folders else (max(folders), folders[max(folders)])

    def discard(self) -> None:
        """Drop the copy: the next catch-up starts from nothing."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self._source, self._files, self._dirs, self._unsynced = None, {}, set(), set()

    def catch_up(self) -> int:
        """Mirror the newest term folder (a newer term's replaces the one mirrored: the files both share stay);
        returns the number of files linked, which :meth:`sync_linked` makes durable. Any error leaves no copy
        (never a half-known one). Call it holding :attr:`lock`."""
        found = self.newest_term()
        if found is None:
            return 0
        newest, folder = found
        try:
            linked = self._mirror(folder)
        except BaseException:
            self.discard()
            raise
        self._source = newest
        return len(linked)

    def sync_linked(self) -> None:
        """fsync the files linked and not synced yet (the leader syncs them only at its next batch's start), without
        holding :attr:`lock` while the disk works, so an inauguration waits for none of it; the copy's folders are
        synced once, by the term that takes it."""
        with self.lock:
            pending = list(self._unsynced)
        done = [(path, inode) for path, inode in pending if _synced(path, inode)]
        with self.lock:
            self._unsynced.difference_update(done)

    def take(self, source_epoch: int | None, committed: int | None, into: Path) -> bool:
        """At inauguration, once ``into`` (the empty hidden folder of the new term) exists: if the copy follows
        ``source_epoch``'s folder (the one the term copies), catch it up with that folder and move it to ``into``
        if it holds the ``committed`` batch as that folder does, its folders and every link not yet synced made
        durable; else discard it. Sets :attr:`verdict`; True when the copy was used."""
        with self.lock:
            return self._take(source_epoch, committed, into)

    def _take(self, source_epoch: int | None, committed: int | None, into: Path) -> bool:
        self.linked_at_take = 0
        if source_epoch is None or self._source is None:
            self.verdict = "none"  # nothing prepared, or nothing to copy from
            self.discard()
            return False
        if self._source != source_epoch:
            self.verdict = "stale_term"  # taken from a term that is no longer the newest
            self.discard()
            return False
        source = self._layout.term_checkpoint(self._source)
        try:
            # What the copy holds, read from the disk rather than remembered: the last catch-up then leaves the
            # source's tree whatever happened to the folder since the follower's rounds.
            self._files, self._dirs = {}, set()
            _list_tree(self.folder, "", self._files, self._dirs)
            linked = self._mirror(source)
            if committed is not None and not self._holds_batch(source, committed):
                self.verdict = "batch_differs"
                self.discard()
                return False
            for path, inode in self._unsynced:
                _synced(path, inode)
            os.replace(self.folder, into)  # onto the empty folder: its name stays, for ``newer_term_started``
            for rel in sorted(self._dirs, key=len, reverse=True):
                fsync(into / rel if rel else into, directory=True)
        except BaseException:
            self.discard()
            raise
        self.linked_at_take = len(linked)
        self.verdict = "used"
        self._source, self._files, self._dirs, self._unsynced = None, {}, set(), set()
        return True

    def _holds_batch(self, source: Path, batch: int) -> bool:
        """Whether the copy holds batch ``batch``'s offset and commit files as ``source``'s own files (or, for a
        batch Spark had not committed yet, holds no commit file either)."""
        for name in (f"offsets/{batch}", f"commits/{batch}"):
            theirs, ours = _inode(source / name), _inode(self.folder / name)
            if theirs != ours or (ours is None and name.startswith("offsets")):
                return False
        return True

    def _mirror(self, source: Path) -> list[Path]:
        """Make the copy hold, name for name, the files ``source`` holds now; returns the links made."""
        files: dict[str, int] = {}
        dirs: set[str] = set()
        _list_tree(source, "", files, dirs)
        for rel in sorted(dirs, key=len):
            (self.folder / rel if rel else self.folder).mkdir(parents=True, exist_ok=True)
        linked: list[Path] = []
        for rel in self._files.keys() - files.keys():  # gone from the source (purged, renamed away)
            with contextlib.suppress(FileNotFoundError):
                (self.folder / rel).unlink()
            del self._files[rel]
        for rel, inode in files.items():
            if self._files.get(rel) == inode:
                continue
            path = self.folder / rel
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            self._files.pop(rel, None)
            try:
                os.link(source / rel, path)
            except FileNotFoundError:
                continue  # renamed or deleted meanwhile: not part of any state
            self._files[rel] = path.stat().st_ino
            self._unsynced.add((path, self._files[rel]))
            linked.append(path)
        for rel in sorted(self._dirs - dirs, key=len, reverse=True):
            with contextlib.suppress(OSError):
                (self.folder / rel).rmdir()
        self._dirs = dirs
        return linked


def _synced(path: Path, inode: int) -> bool:
    """fsync ``path`` if it is still the file ``inode`` (it may have been linked again since, or dropped); True
    when that file needs no sync any more."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True  # dropped from the copy: nothing of it is a term's
    try:
        if os.fstat(fd).st_ino != inode:
            return False  # linked again since: the new link is pending on its own
        os.fsync(fd)
        return True
    finally:
        os.close(fd)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _list_tree(folder: Path, rel: str, files: dict[str, int], dirs: set[str]) -> None:
    """Each file under ``folder`` with its inode, and each folder, as ``_link_tree`` would copy them."""
    dirs.add(rel)
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return
    for entry in entries:
        name = f"{rel}/{entry.name}" if rel else entry.name
        if entry.is_dir(follow_symlinks=False):
            if not rel and (epoch_of(entry.name) is not None or entry.name.startswith(".")):
                continue
            _list_tree(Path(entry.path), name, files, dirs)
        else:
            files[name] = entry.inode()


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
