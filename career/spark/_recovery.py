"""Empty or torn files a power loss left in a term's Spark checkpoint and in the Delta logs, found at inauguration.

tenure makes durable what it relies on before relying on it (``CheckpointSync``, ``career.output``'s log fsyncs), so
after a power loss only files written since their last sync can come back empty or torn (a file system that keeps a
name but not yet the data behind it, or part of it): Spark's newest offsets, commit and state files, the newest
entries of a Delta log. Spark and delta-rs stop at such a file for good. Each is either rebuilt by a re-run — the
file is removed, and with it what was written after it — or, when what ZooKeeper has committed relies on it, the
term is refused with one line naming the file and the fix. A batch an earlier release planned past what a commit
record holds is planned anew the same way.

A checkpoint file is checked against its Hadoop checksum (``.<name>.crc``: CRC32 per 512-byte chunk), else by its
content (Spark's logs are a version line and JSON lines); a Delta log entry by its JSON lines.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import struct
import uuid
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from tenure.career._durable import fsync
from tenure.career.output import DELTA_LOG
from tenure.career.spark._errors import TornFileError
from tenure.career.spark._intake import RECORD_NAMES_BYTES, batch_files, record_bytes

__all__ = ["repair_checkpoint", "repair_delta_log"]

#: How many of the newest offsets, commits and state versions are checked: only files written since the last
#: sync can be torn, and a sync runs at every batch's start and once a batch is in the commit log.
_NEWEST = 3
_CHANGELOG = re.compile(r"(\d+)\.changelog")
_SNAPSHOT = re.compile(r"(\d+)\.zip")
_ENTRY = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"\d{20}\.checkpoint\.parquet")
_SST_MAGIC = struct.pack("<Q", 0x88E241B785F4CFF7)  # RocksDB's block-based table footer ends with it


def repair_checkpoint(checkpoint: Path, committed: int | None) -> list[str]:
    """Remove what a power loss left torn in ``checkpoint`` (a term's own copy), and what was written after it, so
    that Spark plans or re-runs from the last batch whose files are whole; returns the removed files.

    A torn ``offsets/<B>`` makes Spark plan batch ``B`` anew, a torn ``commits/<B>`` or state version ``B+1``
    (written by batch ``B``) re-run batch ``B`` (the state's ``_metadata``, written by the first batch: batch 0, on
    no state); a torn snapshot (``<v>.zip``) falls back on the one before and the changelogs Spark keeps; a torn
    ``metadata`` is written anew (the query's id, which no state refers to). A batch ZooKeeper has not committed
    that an earlier release planned with more files than a commit record holds (``_intake.RECORD_NAMES_BYTES``) is
    planned anew too.

    Raises:
        TornFileError: the torn file is one that ``committed`` (ZooKeeper's committed batch) relies on, or one no
            re-run rebuilds: restore it from a backup.
    """
    removed: list[str] = []
    # Roll back to: offsets up to keep_offsets, commits and state versions up to keep_state (version v is the
    # state after batch v-1, so Spark re-runs batch keep_state, or plans it when its offsets go too).
    keep_offsets = keep_state = None
    cause: Path | None = None

    def roll_back(offsets: int, state: int, path: Path) -> None:
        nonlocal keep_offsets, keep_state, cause
        if keep_offsets is None or offsets < keep_offsets or keep_state is None or state < keep_state:
            cause = path
        keep_offsets, keep_state = _lower(keep_offsets, offsets), _lower(keep_state, state)

    for batch, path in _newest(checkpoint / "offsets", _batch_name):
        if not _intact(path, lines=3) or ((committed is None or batch > committed)
                                          and _names_bytes(checkpoint, batch) > RECORD_NAMES_BYTES):
            roll_back(batch - 1, batch, path)  # plan the batch anew (also one an earlier release planned too big)
    for batch, path in _newest(checkpoint / "commits", _batch_name):
        if not _intact(path, lines=2):
            roll_back(batch, batch, path)  # run the batch again
    partitions = [p for op in _folders(checkpoint / "state") for p in _folders(op)]
    for partition in partitions:
        for version, path in _newest(partition, _numbered(_CHANGELOG)):
            if not _intact(path):
                roll_back(version - 1, version - 1, path)  # run again the batch that wrote it
        for _version, path in _newest(partition, _numbered(_SNAPSHOT)):
            if not _intact(path):  # the snapshot before it, and the changelogs since, hold the same state
                removed += _remove(path, checkpoint)
        for path in sorted((partition / "SSTs").glob("*.sst")):
            if not _sst_complete(path):
                raise _torn(path, "the state's snapshots are built on it")
    metadata = checkpoint / "metadata"
    if not _intact(metadata, lines=1):  # the query's id, which nothing else refers to: a new one
        removed += _remove(metadata, checkpoint)
        metadata.write_text(json.dumps({"id": str(uuid.uuid4())}))
        fsync(metadata)
    for path in [*(checkpoint / "state").glob("*/_metadata/*"), *(checkpoint / "state").glob("*/*/_metadata/*")]:
        if path.is_file() and not _intact(path, lines=2 if path.name == "metadata" else 0):
            roll_back(0, 0, path)  # written by the first batch: run it again, on no state
    if keep_offsets is not None and keep_state is not None and cause is not None:
        if committed is not None and committed > keep_offsets:
            raise _torn(cause, f"ZooKeeper has committed batch {committed}, which it records")
        for batch, path in _all(checkpoint / "offsets", _batch_name):
            if batch > keep_offsets:
                removed += _remove(path, checkpoint)
        for batch, path in _all(checkpoint / "commits", _batch_name):
            if batch >= keep_state:
                removed += _remove(path, checkpoint)
        if keep_state == 0:  # Spark runs a first batch on an empty state folder only
            removed += _remove_tree(checkpoint / "state", checkpoint)
        for partition in partitions if keep_state else ():
            for version, path in [*_all(partition, _numbered(_CHANGELOG)), *_all(partition, _numbered(_SNAPSHOT))]:
                if version > keep_state:
                    removed += _remove(path, checkpoint)
    for folder in {(checkpoint / name).parent for name in removed}:
        with contextlib.suppress(FileNotFoundError):  # a folder removed whole
            fsync(folder, directory=True)
    if removed:
        fsync(checkpoint, directory=True)
    return sorted(removed)


def repair_delta_log(table: Path) -> list[str]:
    """Remove the entries at the end of ``table``'s Delta log that a power loss left empty or torn, with a log
    checkpoint that is torn or names a removed entry; returns what was removed. tenure fsyncs its own entries
    before going on, and any other writer's (a compaction's) at its next commit, so only the newest can be torn;
    a committed batch whose version went is published again by the roll-forward.

    The log is not listed (it holds an entry per batch for a week): its newest entry is found from the checkpoint
    ``_last_checkpoint`` names, as a Delta reader finds it; only without a whole one is the folder listed.
    """
    log = table / DELTA_LOG
    if not log.is_dir():
        return []
    removed: list[str] = []
    last = log / "_last_checkpoint"
    start = _checkpoint_version(log)
    if start is None:
        removed += _remove(last, table)
        names = os.listdir(log)
        newest = max((int(m.group(1)) for name in names if (m := _ENTRY.fullmatch(name))), default=-1)
        for name in sorted(n for n in names if _CHECKPOINT.fullmatch(n))[-1:]:  # a reader takes the newest
            if not _parquet_whole(log / name):
                removed += _remove(log / name, table)
    else:
        newest = start
        while (log / f"{newest + 1:020d}.json").exists():
            newest += 1
    while newest >= 0 and not _whole_entry(log / f"{newest:020d}.json"):
        removed += _remove(log / f"{newest:020d}.json", table)
        removed += _remove(log / f"{newest:020d}.checkpoint.parquet", table)
        newest -= 1
    if start is not None and start > newest:
        removed += _remove(last, table)
    if removed:
        fsync(log, directory=True)
    return removed


def _checkpoint_version(log: Path) -> int | None:
    """The version of the log checkpoint ``_last_checkpoint`` names, when both are whole (else None)."""
    try:
        version = int(json.loads((log / "_last_checkpoint").read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):  # absent, empty, torn: the log is listed instead
        return None
    return version if _parquet_whole(log / f"{version:020d}.checkpoint.parquet") else None


def _parquet_whole(path: Path) -> bool:
    try:
        pq.read_metadata(path)  # its footer is written last
    except (OSError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class _Sums:
    """A Hadoop checksum file: CRC32 of each ``chunk`` bytes."""

    chunk: int
    sums: tuple[int, ...]

    @classmethod
    def read(cls, path: Path) -> _Sums | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) < 8 or data[:4] != b"crc\0" or (len(data) - 8) % 4:
            return None
        chunk = struct.unpack(">i", data[4:8])[0]
        if chunk <= 0:
            return None
        return cls(chunk, struct.unpack(f">{(len(data) - 8) // 4}I", data[8:]))

    def match(self, data: bytes) -> bool:
        chunks = [data[i:i + self.chunk] for i in range(0, len(data), self.chunk)]
        return len(chunks) == len(self.sums) and all(zlib.crc32(c) == s for c, s in zip(chunks, self.sums,
                                                                                         strict=True))


def _intact(path: Path, *, lines: int = 0) -> bool:
    """Whether a checkpoint file is whole. Its checksum decides when it matches; otherwise its content does (the
    checksum may be the torn one): a Spark log (``lines``: at least that many) is a version line and JSON lines, a
    state changelog a complete LZ4 block stream, a snapshot a readable zip, an SST file ends with RocksDB's magic
    number; any other file is whole when its checksum matches or, without a usable one, when it is not empty. A
    whole file's checksum that does not match is removed: Hadoop would refuse the file for it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return True
    crc = path.with_name(f".{path.name}.crc")
    sums = _Sums.read(crc)
    if sums is not None and sums.match(data):
        return True
    check = _content_check(path.name, lines)
    if check is None:
        return sums is None and bool(data)
    whole = bool(data) and check(data)
    if whole:
        crc.unlink(missing_ok=True)
    return whole


def _content_check(name: str, lines: int) -> Callable[[bytes], bool] | None:
    """How to tell a whole file of this kind from its content alone (None: it cannot be told)."""
    if lines:
        return lambda data: _log_lines(data, lines)
    if _CHANGELOG.fullmatch(name):
        return _lz4_complete
    if _SNAPSHOT.fullmatch(name):
        return _zip_complete
    return None


def _names_bytes(checkpoint: Path, batch: int) -> int:
    """What the names of the files ``batch`` is planned to read take in its commit record."""
    return sum(record_bytes(name) for name in batch_files(checkpoint, batch))


def _log_lines(data: bytes, minimum: int) -> bool:
    """A Spark metadata log (``v1``, then JSON lines), or a JSON document (the checkpoint's ``metadata``)."""
    text = data.decode("utf-8", "replace").split("\n")
    versioned = re.fullmatch(r"v\d+", text[0]) is not None
    body = [line for line in (text[1:] if versioned else text) if line]
    return (versioned or minimum == 1) and len(body) + versioned >= minimum and all(_json(line) for line in body)


def _lz4_complete(data: bytes) -> bool:
    """Whether ``data`` is a whole stream of LZ4 blocks (Spark's ``LZ4BlockOutputStream``): blocks of a 21-byte
    header (``LZ4Block``, a token, compressed and original lengths, a checksum) and their bytes, ending with the
    empty block that closes the stream."""
    at = 0
    while at + 21 <= len(data) and data[at:at + 8] == b"LZ4Block":
        compressed, original = (int(n) for n in struct.unpack("<ii", data[at + 9:at + 17]))
        at += 21 + compressed
        if compressed == 0 and original == 0:
            return at == len(data)
    return False


def _sst_complete(path: Path) -> bool:
    """Whether an SST file ends with RocksDB's table magic number (its footer is written last); read from the end,
    so that a large state costs no read of its data."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 8))
            return handle.read() == _SST_MAGIC
    except FileNotFoundError:
        return True


def _zip_complete(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return archive.testzip() is None
    except (zipfile.BadZipFile, OSError, EOFError):
        return False


def _json(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _whole_entry(path: Path) -> bool:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return True
    return bool(text.strip()) and all(_json(line) for line in text.splitlines() if line.strip())


def _batch_name(name: str) -> int | None:
    return int(name) if name.isdigit() else None


def _numbered(regex: re.Pattern[str]) -> Callable[[str], int | None]:
    def number(name: str) -> int | None:
        match = regex.fullmatch(name)
        return int(match.group(1)) if match else None
    return number


def _all(folder: Path, number: Callable[[str], int | None]) -> list[tuple[int, Path]]:
    """The files of ``folder`` that ``number`` gives a number, by number."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted((n, folder / name) for name in names if (n := number(name)) is not None)


def _newest(folder: Path, number: Callable[[str], int | None]) -> list[tuple[int, Path]]:
    return _all(folder, number)[-_NEWEST:]


def _folders(folder: Path) -> list[Path]:
    try:
        return sorted(Path(e.path) for e in os.scandir(folder) if e.is_dir() and not e.name.startswith(("_", ".")))
    except FileNotFoundError:
        return []


def _lower(current: int | None, value: int) -> int:
    return value if current is None else min(current, value)


def _remove(path: Path, root: Path) -> list[str]:
    """Delete ``path`` and its checksum; its name relative to ``root``, or nothing if it was not there."""
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
    try:
        path.unlink()
    except FileNotFoundError:
        return []
    return [path.relative_to(root).as_posix()]


def _remove_tree(folder: Path, root: Path) -> list[str]:
    """Delete ``folder`` and everything in it; the files' names relative to ``root``."""
    names = [(Path(d) / f).relative_to(root).as_posix() for d, _dirs, files in os.walk(folder) for f in files
             if not f.startswith(".")]
    shutil.rmtree(folder, ignore_errors=True)
    return names


def _torn(path: Path, why: str) -> TornFileError:
    return TornFileError(
        f"{path} is empty or torn (a power loss before it was synced) and cannot be rebuilt: {why}. Restore it "
        "from a backup of the data root, then start the replica again "
        "(docs/concepts/guarantees.md#guarantees-and-their-limits)")
