"""A FUSE file system that loses every write not made durable: power-loss tests for tenure's fsync discipline.

tenure must lose nothing it committed when the machine loses power. A real disk's volatile cache makes that hard to
test, so this module simulates the worst case: a disk that keeps exactly what was made durable with ``fsync`` and
nothing else.

The model
---------
* While powered, the mount mirrors a *backing* directory (passthrough): reads and writes go straight to the backing
  files' descriptors, so every process sees an ordinary file system.
* Beside it the daemon keeps the *durable image*:

  - per file (an inode: hard links share it), its content and metadata (mode, owner, atime, mtime) as of its last
    ``fsync`` or ``fdatasync`` (both count the same, metadata included). A file never fsynced has no durable
    content: after a cut it is empty if a durable directory entry names it (with the mode, owner and mtime it had
    when that directory was fsynced), or absent;
  - per directory, its entries (name → inode) as of the directory's last ``fsync``
    (``os.fsync(os.open(d, os.O_RDONLY | os.O_DIRECTORY))``), and its mode and mtime then. ``create``, ``mkdir``,
    ``symlink``, ``mknod``, ``rename``, ``unlink``, ``rmdir`` and ``link`` change only the live entries; they become
    durable when the directory they change is fsynced. A rename across directories needs both fsynced: the source
    alone drops the name, the destination alone adds it (a file then comes back under both names, hard-linked);
  - a symbolic link's target is durable with its directory entry. ``utime``, ``chmod`` and ``chown`` are metadata
    of the file: durable with the file's next ``fsync``.

* :meth:`PowerLossFS.power_cut` stops the daemon at once (the kernel answers every later request to the old mount
  with ``ENOTCONN``; descriptors open there stay dead), lazily unmounts, rewrites the backing directory to exactly
  the durable image (lost files removed, contents and metadata rolled back, renames and unlinks undone, hard links
  re-made) and mounts it again on the same mount point. The test then restarts its processes there.

Usage::

    with PowerLossFS(tmp_path / "backing", tmp_path / "mnt") as fs:
        ...  # run processes against fs.mount
        fs.power_cut()
        ...  # restart them, check that nothing committed was lost

or as a pytest fixture that skips, naming the fix, where FUSE is unavailable::

    @pytest.fixture
    def fs(tmp_path: Path) -> Iterator[PowerLossFS]:
        with powerloss_fs(tmp_path / "backing", tmp_path / "mnt") as mounted:
            yield mounted

The daemon is a subprocess (``python -m tests._powerloss BACKING MOUNT``) so a crash or a hang in FUSE cannot take
the test process with it; the controller talks to it over an inherited socket. Reads and writes cost one Python
call on the backing descriptor (some 800 MB/s); an fsync copies the whole file (a reflink where the backing file
system can). Attributes are not cached by the kernel (a ``stat`` is a round trip, about 0.1 ms), because libfuse
gives each hard link a kernel inode of its own and a cached size would go stale. It needs ``/dev/fuse``, fusermount
(Debian ``fuse3``), libfuse 2 (Debian ``libfuse2``, which fusepy loads) and fusepy; :func:`unavailable_reason` names
the missing piece and its fix, and :class:`PowerLossFS` raises :class:`PowerLossUnavailable` with it.

What the model does not cover
-----------------------------
* Lost writes are all or nothing per file: everything since the last fsync is gone, never a part of it, unless the
  cut asks for ``torn`` files: then a file changed since its last fsync comes back with the first half of its live
  content (pages that reached the disk early), whether that half is a whole line or not. A real disk may also keep
  a later write and lose an earlier one, which is not simulated.
* Directory entries are per-directory snapshots taken whole at the directory's fsync. A journalling file system
  (ext4, XFS) also commits a rename or a create when *any* fsync flushes the journal, and a rename atomically on both
  sides; this model is stricter: only an fsync of the directory itself counts, unless the cut asks for ``journal``:
  then every live name survives it, a file never fsynced as an empty one (ext4's zero-length files after a crash).
  A directory renamed across parents with only one parent fsynced, or reachable twice, is restored only where a
  depth-first walk in name order meets it first.
* ``sync``, ``syncfs`` and ``sync_file_range`` make nothing durable (FUSE is not told of them). ``O_SYNC`` and
  ``O_DSYNC`` writes are durable because the kernel sends an ``fsync`` after each. ``fdatasync`` also makes the
  metadata durable (more lenient than POSIX).
* Not implemented: extended attributes and ACLs, ``fallocate`` (glibc's ``posix_fallocate`` falls back to writing),
  ``RENAME_EXCHANGE``/``RENAME_NOREPLACE``, I/O errors and ``ENOSPC``. ``O_DIRECT`` bypasses the kernel's cache of
  the mount only: like any write, a direct one is durable at the next fsync. POSIX and ``flock`` locks work
  (the kernel keeps them locally) and, like on any file system, do not survive a cut. ``mmap`` writes count once
  the kernel writes them back and they are fsynced (``msync(MS_SYNC)``).
* An fsync still in flight when the cut happens may or may not be durable (as on a real disk). Inode numbers,
  ctimes and directory order change across a cut. Nothing may change the backing directory behind the mount: the
  daemon tells inodes apart by the backing inode numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes.util
import errno
import importlib.util
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEV_FUSE = Path("/dev/fuse")
IMAGE = "image.json"
BLOBS = "blobs"
LOG = "daemon.log"
ROOT_ID = 1

log = logging.getLogger(__name__)


class PowerLossUnavailable(RuntimeError):
    """FUSE cannot be used on this machine; the message is one line naming the fix (tests skip with it)."""


# ─────────────────────────────────────────────── the durable image ───────────────────────────────────────────────


@dataclass
class Node:
    """One inode's durable state: a file's content (a blob) or a directory's entries, and its metadata."""

    kind: str  # "file", "dir", "symlink" or "other" (a FIFO, socket or device node)
    mode: int
    uid: int
    gid: int
    atime_ns: int
    mtime_ns: int
    rdev: int = 0
    blob: str | None = None  # a file's content, a name under BLOBS; None: empty (never fsynced)
    target: str | None = None  # a symlink's
    entries: dict[str, int] = field(default_factory=dict)  # a directory's: name → node id

    @classmethod
    def of(cls, st: os.stat_result, target: str | None = None) -> Node:
        """A record from a stat, without content: a file empty, a directory without entries."""
        if stat.S_ISDIR(st.st_mode):
            kind = "dir"
        elif stat.S_ISREG(st.st_mode):
            kind = "file"
        elif stat.S_ISLNK(st.st_mode):
            kind = "symlink"
        else:
            kind = "other"
        return cls(kind=kind, mode=st.st_mode, uid=st.st_uid, gid=st.st_gid, atime_ns=st.st_atime_ns,
                   mtime_ns=st.st_mtime_ns, rdev=st.st_rdev, target=target)

    def with_meta(self, st: os.stat_result) -> Node:
        """This record with the metadata of ``st`` (content and entries kept)."""
        return Node(kind=self.kind, mode=st.st_mode, uid=st.st_uid, gid=st.st_gid, atime_ns=st.st_atime_ns,
                    mtime_ns=st.st_mtime_ns, rdev=st.st_rdev, blob=self.blob, target=self.target,
                    entries=self.entries)


@dataclass
class Image:
    """The durable image: every node by id, the next free id, and (after a restore) backing inode → node id."""

    nodes: dict[int, Node]
    next_id: int
    inos: dict[int, int] = field(default_factory=dict)

    def save(self, state: Path) -> None:
        """Write atomically to ``state/image.json``."""
        data = {"next_id": self.next_id, "nodes": {str(k): asdict(v) for k, v in self.nodes.items()},
                "inos": {str(k): v for k, v in self.inos.items()}}
        tmp = state / f".{IMAGE}.{uuid.uuid4().hex}"
        tmp.write_text(json.dumps(data))
        os.replace(tmp, state / IMAGE)

    @classmethod
    def load(cls, state: Path) -> Image:
        """Read ``state/image.json``."""
        data = json.loads((state / IMAGE).read_text())
        return cls(nodes={int(k): Node(**v) for k, v in data["nodes"].items()}, next_id=int(data["next_id"]),
                   inos={int(k): int(v) for k, v in data["inos"].items()})


def _copy_fd(src: int, dst: int) -> None:
    """Copy all of ``src`` (at offset 0) to ``dst`` in the kernel (a reflink where the file system can)."""
    try:
        while os.copy_file_range(src, dst, 1 << 30):
            pass
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
        os.lseek(src, 0, os.SEEK_SET)
        os.lseek(dst, 0, os.SEEK_SET)
        os.ftruncate(dst, 0)
        while chunk := os.read(src, 1 << 20):
            os.write(dst, chunk)


def _new_blob(state: Path, src: int, *, limit: int | None = None) -> str:
    """Copy the open file ``src`` (its first ``limit`` bytes, when given) into a new blob; its name."""
    name = uuid.uuid4().hex
    dst = os.open(state / BLOBS / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if limit is None:
            _copy_fd(src, dst)
        else:
            os.write(dst, os.pread(src, limit, 0))
    finally:
        os.close(dst)
    return name


def _changed(state: Path, node: Node, path: str, st: os.stat_result) -> bool:
    """Whether a live file's content differs from its durable node's (a change of its times alone is none)."""
    if node.blob is None:
        return st.st_size > 0
    blob = state / BLOBS / node.blob
    if blob.stat().st_size != st.st_size:
        return True
    with open(path, "rb") as live, blob.open("rb") as durable:
        while chunk := live.read(1 << 20):
            if chunk != durable.read(len(chunk)):
                return True
    return False


def _apply_meta(path: Path, node: Node) -> None:
    """Give ``path`` the node's owner, mode and times (the times last: chown and chmod change none of them)."""
    with contextlib.suppress(PermissionError):
        os.chown(path, node.uid, node.gid, follow_symlinks=False)
    if node.kind != "symlink":
        os.chmod(path, stat.S_IMODE(node.mode))
    os.utime(path, ns=(node.atime_ns, node.mtime_ns), follow_symlinks=False)


def adopt(backing: Path, state: Path) -> Image:
    """The first mount's durable image: everything in ``backing`` now, copied to blobs, as if fsynced."""
    (state / BLOBS).mkdir(parents=True, exist_ok=True)
    nodes: dict[int, Node] = {}
    inos: dict[int, int] = {}

    def node_of(path: Path, st: os.stat_result) -> int:
        if st.st_ino in inos:
            return inos[st.st_ino]
        nid = inos[st.st_ino] = len(inos) + ROOT_ID
        node = Node.of(st, target=os.readlink(path) if stat.S_ISLNK(st.st_mode) else None)
        if node.kind == "file":
            src = os.open(path, os.O_RDONLY)
            try:
                node.blob = _new_blob(state, src)
            finally:
                os.close(src)
        elif node.kind == "dir":
            node.entries = {e.name: node_of(Path(e.path), e.stat(follow_symlinks=False))
                            for e in os.scandir(path)}
        nodes[nid] = node
        return nid

    node_of(backing, backing.lstat())
    image = Image(nodes=nodes, next_id=len(inos) + ROOT_ID, inos=inos)
    image.save(state)
    return image


def restore(backing: Path, state: Path) -> Image:
    """Rewrite ``backing`` to exactly the durable image in ``state``; prune what it no longer reaches."""
    image = Image.load(state)
    for entry in os.scandir(backing):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    placed: dict[int, Path] = {}
    inos: dict[int, int] = {backing.lstat().st_ino: ROOT_ID}

    def build(dir_id: int, where: Path) -> None:
        for name, nid in sorted(image.nodes[dir_id].entries.items()):
            node, path = image.nodes[nid], where / name
            if nid in placed:
                if node.kind == "dir":
                    continue  # a directory reachable twice (half-synced renames): its first place only
                os.link(placed[nid], path, follow_symlinks=False)
                continue
            placed[nid] = path
            if node.kind == "dir":
                path.mkdir(mode=0o700)
                build(nid, path)
            elif node.kind == "file":
                dst = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    if node.blob is not None:
                        src = os.open(state / BLOBS / node.blob, os.O_RDONLY)
                        try:
                            _copy_fd(src, dst)
                        finally:
                            os.close(src)
                finally:
                    os.close(dst)
            elif node.kind == "symlink":
                os.symlink(node.target or "", path)
            else:
                os.mknod(path, node.mode, node.rdev)
            _apply_meta(path, node)
            inos[path.lstat().st_ino] = nid

    placed[ROOT_ID] = backing
    build(ROOT_ID, backing)
    _apply_meta(backing, image.nodes[ROOT_ID])
    image.nodes = {nid: image.nodes[nid] for nid in placed}
    keep = {node.blob for node in image.nodes.values() if node.blob}
    for blob in os.scandir(state / BLOBS):
        if blob.name not in keep:
            os.unlink(blob.path)
    image.inos = inos
    image.save(state)
    return image


# ─────────────────────────────────────────────── the FUSE daemon ───────────────────────────────────────────────


_ALIVE_AFTER_CUT = frozenset({"release", "releasedir", "destroy"})
_STAT_KEYS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_blksize", "st_blocks",
              "st_rdev")
_STATVFS_KEYS = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
                 "f_flag", "f_namemax")


class Passthrough:
    """fusepy operations: passthrough to ``backing``, with the durable image kept beside it.

    Method names are FUSE's (fusepy registers an operation when the attribute exists), so every private attribute
    starts with an underscore. Namespace operations and the image's bookkeeping run under one lock, so a directory's
    fsync sees its entries at one moment; reads and writes take no lock. With ``raw_fi`` the ``fi`` arguments are
    fusepy's ``fuse_file_info`` structures, whose ``fh`` is the backing file descriptor.
    """

    use_ns = True  # fusepy: times in nanoseconds
    flag_nullpath_ok = 1  # an unlinked but open file still reaches read, write, fsync (by its descriptor)

    def __init__(self, backing: Path, state: Path, image: Image,
                 context: Callable[[], tuple[int, int, int]] | None = None) -> None:
        self._root = str(backing)
        self._state = state
        self._durable = image.nodes
        self._ids = dict(image.inos)  # backing inode number → node id, for the inodes alive now
        self._next_id = image.next_id
        self._context = context
        self._lock = threading.Lock()
        self._stripes = [threading.Lock() for _ in range(64)]  # one file's fsyncs in order
        self._dead = False

    def __call__(self, op: str, *args: Any) -> Any:
        """fusepy's dispatch: after the cut every request fails, as on a machine without power."""
        if self._dead and op not in _ALIVE_AFTER_CUT:
            raise OSError(errno.EIO, "power is off")
        return getattr(self, op)(*args)

    # ── bookkeeping ──

    def _full(self, path: str) -> str:
        return os.path.join(self._root, path.lstrip("/"))

    def _born(self, path: str) -> None:
        """A new inode at ``path``: a fresh node id (its backing inode number may be a dead one's), owned by the
        caller."""
        st = os.lstat(path)
        self._ids[st.st_ino] = self._next_id
        self._next_id += 1
        if self._context is not None:
            uid, gid, _ = self._context()
            if (uid, gid) != (st.st_uid, st.st_gid):
                with contextlib.suppress(PermissionError):
                    os.chown(path, uid, gid, follow_symlinks=False)

    def _node(self, ino: int) -> int:
        """The node id of a live backing inode (a new one for an inode made behind the mount's back)."""
        nid = self._ids.get(ino)
        if nid is None:
            nid = self._ids[ino] = self._next_id
            self._next_id += 1
        return nid

    def cut(self, *, journal: bool = False, torn: bool = False) -> None:
        """The power goes: refuse every later request and write the durable image for the controller.

        ``journal``: every live directory entry is durable, as if a journal had committed the namespace (a file
        never fsynced comes back empty). ``torn``: a durable file whose content changed since its last fsync comes
        back with the first half of what it held (pages that reached the disk early)."""
        with self._lock:
            self._dead = True
            if journal or torn:
                self._settle(journal=journal, torn=torn)
            Image(nodes=self._durable, next_id=self._next_id).save(self._state)

    def _settle(self, *, journal: bool, torn: bool) -> None:
        """Apply ``cut``'s options to the durable image, walking the live tree (under the lock)."""
        for folder, _dirs, files in os.walk(self._root):
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                if journal:
                    self._durable_entries(fd)
            finally:
                os.close(fd)
            for name in files if torn else ():
                path = os.path.join(folder, name)
                st = os.lstat(path)
                nid = self._ids.get(st.st_ino)
                if nid is None or nid not in self._durable:  # its name is not durable: gone after the cut
                    continue
                node = self._durable[nid]
                if node.kind != "file" or not _changed(self._state, node, path, st):
                    continue
                src = os.open(path, os.O_RDONLY)
                try:
                    blob = _new_blob(self._state, src, limit=st.st_size // 2)
                finally:
                    os.close(src)
                if node.blob:
                    os.unlink(self._state / BLOBS / node.blob)
                self._durable[nid] = Node.of(st)
                self._durable[nid].blob = blob

    # ── metadata ──

    def getattr(self, path: str | None, fi: Any = None) -> dict[str, int]:
        st = os.fstat(fi.fh) if fi else os.lstat(self._full(path or "/"))
        attrs = {key: getattr(st, key) for key in _STAT_KEYS}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def access(self, path: str, amode: int) -> None:
        if not os.access(self._full(path), amode):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))

    def readlink(self, path: str) -> str:
        return os.readlink(self._full(path))

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._full(path))
        return {key: getattr(st, key) for key in _STATVFS_KEYS}

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._full(path), stat.S_IMODE(mode))

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._full(path), uid, gid, follow_symlinks=False)

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
        if times is None:
            os.utime(self._full(path), follow_symlinks=False)
        else:
            os.utime(self._full(path), ns=times, follow_symlinks=False)

    def truncate(self, path: str | None, length: int, fi: Any = None) -> None:
        if fi:
            os.ftruncate(fi.fh, length)
        else:
            os.truncate(self._full(path or "/"), length)

    # ── the namespace: live entries only, durable at the directory's fsync ──

    def create(self, path: str, mode: int, fi: Any) -> int:
        full, flags = self._full(path), fi.flags & ~os.O_DIRECT
        with self._lock:
            try:
                fd = os.open(full, flags | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                if flags & os.O_EXCL:
                    raise
                fd = os.open(full, flags & ~os.O_CREAT)  # created meanwhile by another: open it, same inode
            else:
                self._born(full)
        fi.fh = fd
        return 0

    def mknod(self, path: str, mode: int, dev: int) -> None:
        with self._lock:
            os.mknod(self._full(path), mode, dev)
            self._born(self._full(path))

    def mkdir(self, path: str, mode: int) -> None:
        with self._lock:
            os.mkdir(self._full(path), mode)
            self._born(self._full(path))

    def symlink(self, path: str, target: str) -> None:
        with self._lock:
            os.symlink(target, self._full(path))
            self._born(self._full(path))

    def link(self, path: str, existing: str) -> None:
        with self._lock:
            os.link(self._full(existing), self._full(path), follow_symlinks=False)

    def rename(self, old: str, new: str) -> None:
        with self._lock:
            os.rename(self._full(old), self._full(new))

    def unlink(self, path: str) -> None:
        with self._lock:
            os.unlink(self._full(path))

    def rmdir(self, path: str) -> None:
        with self._lock:
            os.rmdir(self._full(path))

    # ── files ──

    def open(self, path: str, fi: Any) -> int:
        # O_DIRECT is the kernel's business on the mount; our buffers are not aligned for the backing disk's.
        fi.fh = os.open(self._full(path), fi.flags & ~os.O_DIRECT)
        return 0

    def read(self, path: str | None, size: int, offset: int, fi: Any) -> bytes:
        return os.pread(fi.fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fi: Any) -> int:
        return os.pwrite(fi.fh, data, offset)

    def flush(self, path: str | None, fi: Any) -> int:
        return 0  # close() makes nothing durable

    def release(self, path: str | None, fi: Any) -> int:
        os.close(fi.fh)
        return 0

    def fsync(self, path: str | None, datasync: int, fi: Any) -> int:
        """The file's content and metadata become durable: a copy of the backing file replaces its blob."""
        ino = os.fstat(fi.fh).st_ino
        with self._lock:
            nid = self._node(ino)
        with self._stripes[nid % len(self._stripes)]:
            src = os.open(f"/proc/self/fd/{fi.fh}", os.O_RDONLY)  # the same inode, readable, even if unlinked
            try:
                blob = _new_blob(self._state, src)
                st = os.fstat(src)
            finally:
                os.close(src)
            with self._lock:
                if self._dead:  # the cut came first: this fsync never returned
                    os.unlink(self._state / BLOBS / blob)
                    raise OSError(errno.EIO, "power is off")
                old = self._durable.get(nid)
                self._durable[nid] = Node.of(st)
                self._durable[nid].blob = blob
                if old is not None and old.blob:
                    os.unlink(self._state / BLOBS / old.blob)
        return 0

    # ── directories ──

    def opendir(self, path: str) -> int:
        return os.open(self._full(path), os.O_RDONLY | os.O_DIRECTORY)

    def readdir(self, path: str | None, fh: int) -> list[str | tuple[str, dict[str, int], int]]:
        """The entries with their inode numbers and types (from the backing directory's listing, no stat), so a
        listing's ``d_ino`` and ``d_type`` are right."""
        listing: list[str | tuple[str, dict[str, int], int]] = [".", ".."]
        with os.scandir(self._full(path) if path is not None else fh) as entries:
            for entry in entries:
                if entry.is_symlink():
                    kind = stat.S_IFLNK
                elif entry.is_dir(follow_symlinks=False):
                    kind = stat.S_IFDIR
                elif entry.is_file(follow_symlinks=False):
                    kind = stat.S_IFREG
                else:
                    kind = stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
                listing.append((entry.name, {"st_ino": entry.inode(), "st_mode": kind}, 0))
        return listing

    def releasedir(self, path: str | None, fh: int) -> int:
        os.close(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        """The directory's entries and metadata become durable; an entry's new inode exists from now on (a file
        empty until its own fsync, a directory without entries until its own)."""
        with self._lock:
            self._durable_entries(fh)
        return 0

    def _durable_entries(self, fh: int) -> None:
        """Make the live entries and metadata of the open directory ``fh`` durable (under the lock)."""
        st = os.fstat(fh)
        entries: dict[str, int] = {}
        with os.scandir(fh) as listing:
            for entry in listing:
                est = entry.stat(follow_symlinks=False)
                nid = entries[entry.name] = self._node(est.st_ino)
                if nid not in self._durable:
                    target = os.readlink(entry.name, dir_fd=fh) if entry.is_symlink() else None
                    self._durable[nid] = Node.of(est, target)
        nid = self._node(st.st_ino)
        old = self._durable.get(nid)
        node = old.with_meta(st) if old is not None else Node.of(st)
        node.entries = entries
        self._durable[nid] = node


def serve(backing: Path, mount: Path, state: Path, control_fd: int | None) -> None:
    """Mount and serve until unmounted; ``control_fd`` (a socket) takes ``cut`` and answers ``ok``."""
    import fuse  # type: ignore[import-untyped]

    backing, mount, state = backing.resolve(), mount.resolve(), state.resolve()
    os.umask(0)  # the kernel has applied the caller's umask to the modes it sends
    image = Image.load(state) if (state / IMAGE).exists() else adopt(backing, state)
    ops = Passthrough(backing, state, image, context=fuse.fuse_get_context)
    if control_fd is not None:
        control = socket.socket(fileno=control_fd)
        threading.Thread(target=_control, args=(control, ops, mount), name="control", daemon=True).start()
    # attr_timeout=0: libfuse's high-level API gives each hard link a kernel inode of its own, so a size or mtime
    # cached for one name would go stale when a write comes through another.
    options: dict[str, Any] = {"big_writes": True, "use_ino": True, "hard_remove": True, "attr_timeout": 0}
    if os.geteuid() == 0:
        options["allow_other"] = True  # a Spark JVM or worker running as another user reaches it too
    fuse.FUSE(ops, str(mount), raw_fi=True, foreground=True, nothreads=False, fsname="powerloss", **options)


def _control(control: socket.socket, ops: Passthrough, mount: Path) -> None:
    """Answer the controller's ``cut``; when it goes away without unmounting, unmount and leave."""
    with control, control.makefile("rwb", buffering=0) as stream:
        for line in stream:
            words = line.split()
            if words[:1] == [b"cut"]:
                try:
                    ops.cut(journal=b"journal" in words, torn=b"torn" in words)
                    stream.write(b"ok\n")
                except Exception as exc:
                    log.exception("cut failed")
                    stream.write(f"error {exc!r}\n".encode())
    subprocess.run([_fusermount() or "fusermount", "-u", "-z", str(mount)], check=False, capture_output=True)
    time.sleep(2)
    os._exit(0)


# ─────────────────────────────────────────────── the controller ───────────────────────────────────────────────


def _fusermount() -> str | None:
    return shutil.which("fusermount3") or shutil.which("fusermount")


def unavailable_reason() -> str | None:
    """Why FUSE cannot be used here, in one line with the fix; None when it can."""
    if not sys.platform.startswith("linux"):
        return f"power-loss tests need Linux FUSE, not {sys.platform}"
    if not DEV_FUSE.exists():
        return f"{DEV_FUSE} is missing: load the fuse module (modprobe fuse) or give the container --device /dev/fuse"
    if not os.access(DEV_FUSE, os.R_OK | os.W_OK):
        return f"{DEV_FUSE} is not readable and writable by uid {os.geteuid()}: run as root or chmod 666 /dev/fuse"
    if _fusermount() is None:
        return "fusermount is missing: apt-get install fuse3"
    if importlib.util.find_spec("fuse") is None:
        return "fusepy is missing: pip install -e '.[test]' (or pip install fusepy)"
    if ctypes.util.find_library("fuse") is None:
        return "libfuse.so.2 (which fusepy loads) is missing: apt-get install libfuse2"
    return None


def _mounted(path: Path) -> bool:
    """Whether a file system is mounted at ``path`` (from /proc: a dead FUSE mount fails every stat)."""
    target = str(path)
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            where = line.split(" ")[1]
            for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
                where = where.replace(code, char)
            if where == target:
                return True
    return False


class PowerLossFS:
    """Controller of one power-loss mount, a context manager: mounts on enter, unmounts on exit (even on failure).

    ``backing`` is the real directory (created if missing; what it holds at the first mount is durable),
    ``mount`` the mount point (created if missing), ``state`` where the durable image lives (by default a
    sibling of ``backing``, removed on exit).
    """

    def __init__(self, backing: Path | str, mount: Path | str, *, state: Path | str | None = None,
                 timeout_s: float = 30.0) -> None:
        self.backing = Path(backing).absolute()
        self.mount = Path(mount).absolute()
        self.state = Path(state).absolute() if state is not None else self.backing.with_name(
            self.backing.name + ".durable")
        self._own_state = state is None
        self.timeout_s = timeout_s
        self.cuts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        paths = (self.backing, self.mount, self.state)
        for a in paths:
            for b in paths:
                if a is not b and (a == b or a.is_relative_to(b)):
                    raise ValueError(f"{a} and {b} must not contain each other")

    @property
    def pid(self) -> int | None:
        """The daemon's process id while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def __enter__(self) -> PowerLossFS:
        reason = unavailable_reason()
        if reason is not None:
            raise PowerLossUnavailable(reason)
        if _mounted(self.mount):
            raise RuntimeError(f"{self.mount} is already a mount point: fusermount -u {self.mount}")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        if self._own_state and self.state.exists():
            shutil.rmtree(self.state)
        (self.state / BLOBS).mkdir(parents=True, exist_ok=True)
        try:
            adopt(self.backing, self.state)
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def power_cut(self, *, journal: bool = False, torn: bool = False) -> None:
        """Lose everything not durable: stop the daemon dead, unmount, rewrite the backing directory to the durable
        image, mount again on the same mount point.

        ``journal``: keep every name as it was (a journalling file system that committed the namespace), files
        never fsynced empty. ``torn``: a file changed since its last fsync keeps the first half of its content."""
        if self._proc is None or self._control is None:
            raise RuntimeError("not mounted")
        self._control.sendall(b" ".join([b"cut", *([b"journal"] if journal else []), *([b"torn"] if torn else [])])
                              + b"\n")
        with self._control.makefile("rb") as reader:
            answer = reader.readline().strip()
        if answer != b"ok":
            raise RuntimeError(f"the daemon could not cut: {answer.decode(errors='replace') or 'no answer'}"
                               f"{self._log_tail()}")
        self._stop(kill=True)
        restore(self.backing, self.state)
        self.cuts += 1
        self._start()

    def close(self) -> None:
        """Unmount (lazily when busy) and stop the daemon; remove the state when it is ours. Safe to repeat."""
        try:
            self._stop(kill=False)
        finally:
            if self._own_state:
                shutil.rmtree(self.state, ignore_errors=True)

    # ── internals ──

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        with open(self.state / LOG, "ab") as logfile:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests._powerloss", str(self.backing), str(self.mount),
                 "--state", str(self.state), "--control-fd", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=logfile, stderr=subprocess.STDOUT,
                env=env, cwd=REPO)
        theirs.close()
        ours.settimeout(self.timeout_s)
        self._control = ours
        # Here, not at the top: the daemon (`python -m tests._powerloss`) would import the product's service too.
        from tenure.service.local import wait_for

        proc = self._proc
        try:
            wait_for(lambda: _mounted(self.mount) or proc.poll() is not None, self.timeout_s,
                     f"{self.mount} to be mounted", interval_s=0.01)
        except TimeoutError:
            self._stop(kill=True)
            raise RuntimeError(f"{self.mount} not mounted after {self.timeout_s:g} s{self._log_tail()}") from None
        if not _mounted(self.mount):  # the daemon exited
            tail = self._log_tail()
            self._stop(kill=True)
            if "fuse:" in tail or "fusermount" in tail:
                raise PowerLossUnavailable(f"mounting FUSE failed, run as root with /dev/fuse:{tail}")
            raise RuntimeError(f"the power-loss daemon exited with {proc.returncode}:{tail}")
        os.stat(self.mount)  # served, not only mounted

    def _stop(self, *, kill: bool) -> None:
        """Unmount and end the daemon: at once with ``kill`` (the power cut), else cleanly when not busy."""
        proc, self._proc = self._proc, None
        fusermount = _fusermount() or "fusermount"
        if proc is not None and proc.poll() is None:
            if kill:
                proc.kill()
            elif subprocess.run([fusermount, "-u", str(self.mount)], capture_output=True, check=False).returncode:
                proc.kill()  # busy (a file open there): lazy unmount below, and the connection dies with the daemon
            try:
                proc.wait(self.timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if _mounted(self.mount):
            subprocess.run([fusermount, "-u", "-z", str(self.mount)], capture_output=True, check=False)
        if self._control is not None:
            self._control.close()
            self._control = None
        if _mounted(self.mount):
            raise RuntimeError(f"{self.mount} is still mounted: fusermount -u -z {self.mount}")

    def _log_tail(self) -> str:
        try:
            lines = (self.state / LOG).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "".join(f"\n  {line}" for line in lines[-10:])


@contextlib.contextmanager
def powerloss_fs(backing: Path, mount: Path) -> Iterator[PowerLossFS]:
    """A pytest fixture's body: the mount, or a skip naming the fix when FUSE is unavailable."""
    import pytest

    with contextlib.ExitStack() as stack:
        try:
            fs = stack.enter_context(PowerLossFS(backing, mount))
        except PowerLossUnavailable as exc:
            pytest.skip(str(exc))
        yield fs


def main(argv: list[str] | None = None) -> None:
    """``python -m tests._powerloss BACKING MOUNT``: serve in the foreground (without a controller, no cut)."""
    parser = argparse.ArgumentParser(prog="python -m tests._powerloss", description=__doc__.split("\n")[0])
    parser.add_argument("backing", type=Path)
    parser.add_argument("mount", type=Path)
    parser.add_argument("--state", type=Path, help="the durable image's folder (default: BACKING.durable)")
    parser.add_argument("--control-fd", type=int, help="a socket inherited from the controller")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    state = args.state or args.backing.with_name(args.backing.name + ".durable")
    (state / BLOBS).mkdir(parents=True, exist_ok=True)
    serve(args.backing, args.mount, state, args.control_fd)


if __name__ == "__main__":
    main()
