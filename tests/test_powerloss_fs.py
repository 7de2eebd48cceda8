"""The power-loss file system (tests/_powerloss.py) keeps exactly what was made durable, and loses the rest.

Each test writes through the mount, cuts the power and checks what came back against the model in the module's
docstring; each would fail if the file system kept too much (a disk that never loses anything) or too little.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tenure.career._durable import fsync
from tenure.service.ops._produce._atomic import fsync_dir
from tests import _powerloss
from tests._powerloss import PowerLossFS, PowerLossUnavailable, powerloss_fs


def fsync_file(path: Path) -> None:
    """fsync a file (what counts is the inode, not how it was opened)."""
    fsync(path)


def write_durable(path: Path, data: bytes) -> None:
    """Write a file, fsync it, fsync its directory: the one way to commit a new file."""
    path.write_bytes(data)
    fsync_file(path)
    fsync_dir(path.parent)


def test_a_fsynced_file_in_a_fsynced_directory_survives(fs: PowerLossFS) -> None:
    """A file fsynced in a fsynced directory survives a power cut; a file never synced beside it does not."""
    write_durable(fs.mount / "kept", b"committed")
    (fs.mount / "lost").write_bytes(b"never synced")  # the control: the cut really lost something

    fs.power_cut()

    assert (fs.mount / "kept").read_bytes() == b"committed"
    assert not (fs.mount / "lost").exists()
    assert sorted(os.listdir(fs.backing)) == ["kept"]


def test_what_the_backing_held_before_the_first_mount_is_durable(tmp_path: Path) -> None:
    """What the backing folder held before the first mount is durable: an unsynced overwrite is undone by the cut."""
    (tmp_path / "backing" / "sub").mkdir(parents=True)
    (tmp_path / "backing" / "sub" / "seed").write_bytes(b"seed")
    with powerloss_fs(tmp_path / "backing", tmp_path / "mnt") as fs:
        (fs.mount / "sub" / "seed").write_bytes(b"overwritten, not synced")
        fs.power_cut()
        assert (fs.mount / "sub" / "seed").read_bytes() == b"seed"


def test_a_file_never_fsynced_is_absent_when_its_directory_was_not_fsynced(fs: PowerLossFS) -> None:
    """Files whose directory was never fsynced are gone after a cut, even one whose own data was fsynced: a file's fsync
    does not make its name durable."""
    (fs.mount / "unsynced").write_bytes(b"data")
    (fs.mount / "synced").write_bytes(b"data")
    fsync_file(fs.mount / "synced")  # the file's own fsync does not make its name durable

    fs.power_cut()

    assert os.listdir(fs.mount) == []


def test_a_file_never_fsynced_is_empty_when_only_its_directory_was_fsynced(fs: PowerLossFS) -> None:
    """A file whose directory was fsynced but not the file itself is there after a cut, empty."""
    (fs.mount / "f").write_bytes(b"data")
    fsync_dir(fs.mount)

    fs.power_cut()

    assert (fs.mount / "f").read_bytes() == b""


def test_an_append_after_the_fsync_is_lost_the_earlier_content_stays(fs: PowerLossFS) -> None:
    """An append after a file's fsync is lost by a cut and the earlier content stays; an append made durable with
    fdatasync stays."""
    for name in ("lost_tail", "kept_tail"):
        write_durable(fs.mount / name, b"first\n")
    for name in ("lost_tail", "kept_tail"):
        fd = os.open(fs.mount / name, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"second\n")
            if name == "kept_tail":
                os.fdatasync(fd)  # fdatasync counts as fsync
        finally:
            os.close(fd)
        assert (fs.mount / name).read_bytes() == b"first\nsecond\n"

    fs.power_cut()

    assert (fs.mount / "lost_tail").read_bytes() == b"first\n"
    assert (fs.mount / "kept_tail").read_bytes() == b"first\nsecond\n"


def test_a_journal_cut_keeps_every_name_and_empties_what_was_never_fsynced(fs: PowerLossFS) -> None:
    """``journal``: names survive without a directory fsync (a renamed file, a new folder and its file, an unlink),
    contents do not: a file never fsynced is empty, a fsynced one whole (ext4's zero-length files)."""
    (fs.mount / "sub").mkdir()
    (fs.mount / "sub" / "never_synced").write_bytes(b"lost data")
    (fs.mount / "synced").write_bytes(b"kept data")
    fsync_file(fs.mount / "synced")
    write_durable(fs.mount / "doomed", b"x")
    (fs.mount / ".tmp").write_bytes(b"renamed")
    os.replace(fs.mount / ".tmp", fs.mount / "renamed")
    (fs.mount / "doomed").unlink()

    fs.power_cut(journal=True)

    assert sorted(os.listdir(fs.mount)) == ["renamed", "sub", "synced"]
    assert (fs.mount / "sub" / "never_synced").read_bytes() == b""
    assert (fs.mount / "renamed").read_bytes() == b""
    assert (fs.mount / "synced").read_bytes() == b"kept data"


def test_a_torn_cut_keeps_the_first_half_of_what_changed_since_the_fsync(fs: PowerLossFS) -> None:
    """``torn``: a durable file written since its last fsync keeps the first half of its live content; one whose
    name is not durable is still gone, and one whose content did not change (its times did) is whole."""
    write_durable(fs.mount / "appended", b"0123")
    with open(fs.mount / "appended", "ab") as handle:
        handle.write(b"456789")
    (fs.mount / "new").write_bytes(b"abcdefgh")
    fsync_dir(fs.mount)
    write_durable(fs.mount / "unchanged", b"whole")
    os.utime(fs.mount / "unchanged", (1, 1))  # its times alone: no content to tear
    (fs.mount / "nameless").write_bytes(b"never named durably")

    fs.power_cut(torn=True)

    assert (fs.mount / "appended").read_bytes() == b"01234"
    assert (fs.mount / "new").read_bytes() == b"abcd"
    assert (fs.mount / "unchanged").read_bytes() == b"whole"
    assert not (fs.mount / "nameless").exists()


def test_a_truncate_counts_only_once_fsynced(fs: PowerLossFS) -> None:
    """A truncate is undone by a cut unless the file was fsynced after it."""
    write_durable(fs.mount / "a", b"x" * 1000)
    write_durable(fs.mount / "b", b"x" * 1000)
    os.truncate(fs.mount / "a", 10)
    os.truncate(fs.mount / "b", 10)
    fsync_file(fs.mount / "b")

    fs.power_cut()

    assert (fs.mount / "a").stat().st_size == 1000
    assert (fs.mount / "b").read_bytes() == b"x" * 10


def test_a_rename_without_a_directory_fsync_is_undone(fs: PowerLossFS) -> None:
    """A rename whose directory was not fsynced is undone by a cut (the old name is back with its content), even when
    the file was fsynced under its new name."""
    write_durable(fs.mount / "old", b"content")
    os.rename(fs.mount / "old", fs.mount / "new")
    fsync_file(fs.mount / "new")  # the file's fsync does not carry its new name

    fs.power_cut()

    assert os.listdir(fs.mount) == ["old"]
    assert (fs.mount / "old").read_bytes() == b"content"


def test_rename_over_a_file_replaces_it_only_once_the_directory_is_fsynced(fs: PowerLossFS) -> None:
    """The atomic-replace idiom: write a temporary file, fsync it, rename it over the target, fsync the directory."""
    write_durable(fs.mount / "target", b"v1")
    (fs.mount / ".tmp").write_bytes(b"v2")
    fsync_file(fs.mount / ".tmp")
    os.replace(fs.mount / ".tmp", fs.mount / "target")
    assert (fs.mount / "target").read_bytes() == b"v2"

    fs.power_cut()
    assert os.listdir(fs.mount) == ["target"]
    assert (fs.mount / "target").read_bytes() == b"v1"

    (fs.mount / ".tmp").write_bytes(b"v2")
    fsync_file(fs.mount / ".tmp")
    os.replace(fs.mount / ".tmp", fs.mount / "target")
    fsync_dir(fs.mount)

    fs.power_cut()
    assert os.listdir(fs.mount) == ["target"]
    assert (fs.mount / "target").read_bytes() == b"v2"


def test_an_unlink_without_a_directory_fsync_is_undone(fs: PowerLossFS) -> None:
    """An unlink whose directory was not fsynced is undone by a cut; with the directory fsynced it stays done."""
    write_durable(fs.mount / "f", b"content")
    os.unlink(fs.mount / "f")

    fs.power_cut()
    assert (fs.mount / "f").read_bytes() == b"content"

    os.unlink(fs.mount / "f")
    fsync_dir(fs.mount)

    fs.power_cut()
    assert os.listdir(fs.mount) == []


def test_a_rename_across_directories_needs_both_directories_fsynced(fs: PowerLossFS) -> None:
    """A rename across directories survives a cut once both are fsynced; with only the destination fsynced the file is
    under both names (one inode), with only the source it is in neither."""
    src, dst = fs.mount / "src", fs.mount / "dst"
    src.mkdir()
    dst.mkdir()
    fsync_dir(fs.mount)
    write_durable(src / "f", b"f")
    write_durable(src / "g", b"g")
    os.rename(src / "f", dst / "f")
    fsync_dir(src)
    fsync_dir(dst)

    fs.power_cut()
    assert (os.listdir(src), os.listdir(dst)) == (["g"], ["f"])
    assert (dst / "f").read_bytes() == b"f"

    os.rename(src / "g", dst / "g")
    fsync_dir(dst)  # only the destination: the old name is back too, the same inode under both names

    fs.power_cut()
    assert (src / "g").read_bytes() == (dst / "g").read_bytes() == b"g"
    assert (src / "g").stat().st_ino == (dst / "g").stat().st_ino

    os.rename(dst / "f", src / "f")
    fsync_dir(dst)  # only the source: the file is in no durable directory, lost

    fs.power_cut()
    assert (sorted(os.listdir(src)), sorted(os.listdir(dst))) == (["g"], ["g"])


def test_a_hard_link_follows_its_directory_fsync(fs: PowerLossFS) -> None:
    """A new hard link is lost by a cut unless its directory was fsynced; then both names are one inode with two links.
    """
    write_durable(fs.mount / "f", b"content")
    os.link(fs.mount / "f", fs.mount / "g")
    assert (fs.mount / "g").stat().st_ino == (fs.mount / "f").stat().st_ino

    fs.power_cut()
    assert os.listdir(fs.mount) == ["f"]

    os.link(fs.mount / "f", fs.mount / "g")
    fsync_dir(fs.mount)

    fs.power_cut()
    f, g = (fs.mount / "f").stat(), (fs.mount / "g").stat()
    assert (f.st_ino, f.st_nlink) == (g.st_ino, 2)
    (fs.mount / "g").write_bytes(b"through g")
    assert (fs.mount / "f").read_bytes() == b"through g"


def test_mtime_and_mode_are_durable_with_the_file_fsync(fs: PowerLossFS) -> None:
    """A file's mtime and mode survive a cut once the file is fsynced, and changes made after that fsync are undone."""
    write_durable(fs.mount / "f", b"content")
    synced_ns = 1_500_000_000_123_456_789
    os.utime(fs.mount / "f", ns=(synced_ns, synced_ns))
    os.chmod(fs.mount / "f", 0o640)
    fsync_file(fs.mount / "f")

    fs.power_cut()
    st = (fs.mount / "f").stat()
    assert (st.st_mtime_ns, st.st_mode & 0o777) == (synced_ns, 0o640)

    os.utime(fs.mount / "f", ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    os.chmod(fs.mount / "f", 0o600)

    fs.power_cut()
    st = (fs.mount / "f").stat()
    assert (st.st_mtime_ns, st.st_mode & 0o777) == (synced_ns, 0o640)


def test_a_new_directory_needs_its_parent_fsynced_and_its_own(fs: PowerLossFS) -> None:
    """A new directory is lost by a cut unless its parent was fsynced, and its entries unless it was fsynced itself."""
    (fs.mount / "d").mkdir()
    write_durable(fs.mount / "d" / "f", b"content")  # d's entries durable, d itself not yet

    fs.power_cut()
    assert os.listdir(fs.mount) == []

    (fs.mount / "d").mkdir()
    (fs.mount / "d" / "f").write_bytes(b"content")
    fsync_file(fs.mount / "d" / "f")
    fsync_dir(fs.mount)  # d exists from now on, without entries until its own fsync

    fs.power_cut()
    assert os.listdir(fs.mount / "d") == []


def test_a_symlink_follows_its_directory_fsync(fs: PowerLossFS) -> None:
    """A symlink survives a cut once its directory is fsynced, still pointing at its target; one made after the fsync is
    lost."""
    write_durable(fs.mount / "target", b"content")
    os.symlink("target", fs.mount / "kept")
    fsync_dir(fs.mount)
    os.symlink("target", fs.mount / "lost")

    fs.power_cut()

    listing = {e.name: (e.is_symlink(), e.is_file(follow_symlinks=False), e.inode()) for e in os.scandir(fs.mount)}
    assert listing == {"kept": (True, False, (fs.mount / "kept").lstat().st_ino),
                       "target": (False, True, (fs.mount / "target").lstat().st_ino)}
    assert os.readlink(fs.mount / "kept") == "target"
    assert (fs.mount / "kept").read_bytes() == b"content"


_WRITER = """
import os, sys
path, chunks = sys.argv[1], int(sys.argv[2])
chunk = os.path.basename(path).encode() * (65536 // len(os.path.basename(path)))
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
for _ in range(chunks):
    os.write(fd, chunk)
os.fsync(fd)
dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
os.fsync(dfd)
os.close(dfd)
os.write(fd, b"unsynced tail")
os.close(fd)
"""


def test_two_processes_write_different_files_concurrently(fs: PowerLossFS) -> None:
    """Two processes writing files of their own at once through the mount each get every byte, durable after a cut."""
    chunks = 64  # 4 MiB each, in 64 KiB writes
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(fs.mount / name), str(chunks)])
               for name in ("alpha", "omega")]
    assert [w.wait(60) for w in writers] == [0, 0]
    sizes = {name: (fs.mount / name).stat().st_size for name in ("alpha", "omega")}
    assert sizes == {"alpha": chunks * 65535 + 13, "omega": chunks * 65535 + 13}

    fs.power_cut()

    for name in ("alpha", "omega"):
        assert (fs.mount / name).read_bytes() == name.encode() * (65536 // 5) * chunks


def test_a_large_file_round_trips_and_statvfs_answers(fs: PowerLossFS) -> None:
    """A 24 MiB durable file reads back whole after a cut, an unsynced overwrite in its middle undone, and ``statvfs``
    of the mount answers."""
    data = os.urandom(24 << 20)
    write_durable(fs.mount / "big", data)
    with open(fs.mount / "big", "r+b") as f:
        f.seek(5 << 20)
        f.write(b"\0" * 4096)  # an overwrite in the middle, not synced

    fs.power_cut()

    assert hashlib.sha256((fs.mount / "big").read_bytes()).digest() == hashlib.sha256(data).digest()
    st = os.statvfs(fs.mount)
    assert st.f_bsize > 0 and st.f_blocks > 0


def test_a_descriptor_open_at_the_cut_dies_and_the_durable_state_outlives_several_cuts(fs: PowerLossFS) -> None:
    """A file descriptor open across a cut fails afterwards, as a crashed process's would, and the durable state
    outlives several cuts in a row (each counted)."""
    write_durable(fs.mount / "durable", b"durable")
    fd = os.open(fs.mount / "durable", os.O_WRONLY | os.O_APPEND)
    try:
        fs.power_cut()
        with pytest.raises(OSError):
            os.write(fd, b"after the cut")
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)  # the close's flush may fail too
    (fs.mount / "second").write_bytes(b"lost")

    fs.power_cut()

    assert os.listdir(fs.mount) == ["durable"]
    assert (fs.mount / "durable").read_bytes() == b"durable"
    assert fs.cuts == 2


def test_the_mount_is_gone_after_the_context_even_when_the_body_raised(tmp_path: Path) -> None:
    """When the test body raises inside the context, with a file still open on the mount, the mount is unmounted anyway,
    its daemon ended and its state removed, and the body's error propagates."""
    mount = tmp_path / "mnt"
    held: list[int] = []
    try:
        with pytest.raises(RuntimeError, match="the test body failed"), \
                powerloss_fs(tmp_path / "backing", mount) as fs:
            pid = fs.pid
            held.append(os.open(mount / "held", os.O_WRONLY | os.O_CREAT, 0o644))  # open: the mount is busy
            raise RuntimeError("the test body failed")
        assert pid is not None
        assert not _powerloss._mounted(mount)
        assert fs.pid is None
        assert not fs.state.exists()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)


def test_missing_prerequisites_fail_in_one_line_naming_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing ``/dev/fuse`` or ``fusermount`` fails in one line naming the fix, before anything is mounted."""
    monkeypatch.setattr(_powerloss, "DEV_FUSE", tmp_path / "fuse")
    with pytest.raises(PowerLossUnavailable, match=r"^\S+/fuse is missing: load the fuse module \(modprobe fuse\)"):
        PowerLossFS(tmp_path / "backing", tmp_path / "mnt").__enter__()
    monkeypatch.undo()

    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(PowerLossUnavailable, match=r"^fusermount is missing: apt-get install fuse3$"):
        PowerLossFS(tmp_path / "backing", tmp_path / "mnt").__enter__()
    assert not (tmp_path / "mnt").exists()
