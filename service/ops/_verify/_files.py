"""The files ``tenure verify`` reads: queue files and their lines, what the group has read of them (its marks
and checkpoint), published Parquet, and the data root check.

A queue file is named in the audit by its name, with its queue in a topic of several queues (:func:`qualified`):
two queues may hold files of one name."""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote_to_bytes, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake.exceptions import DeltaError

from tenure.career.identity import read_topic
from tenure.career.output import TABLE, has_version, snapshot_files
from tenure.career.queue import (
    QUEUES_FOLDER,
    FileIdentity,
    QueueLayout,
    is_hidden,
    is_queue_file,
    mark_covers,
    read_mark,
)
from tenure.errors import TenureError

__all__ = [
    "DEFAULT_GROUP",
    "Consumption",
    "VerifyError",
    "base_name",
    "check_data_root",
    "find_group",
    "iter_lines",
    "iter_queue_files",
    "newest_checkpoint",
    "output_files",
    "parquet_files",
    "qualified",
    "read_columns",
    "read_consumption",
]

DEFAULT_GROUP = "default"
"""The group ``verify`` audits when none is named and the queue holds no single group's marks."""


class VerifyError(TenureError):
    """The output cannot be audited: not a data root, or a Parquet file unreadable or lacking a required column."""


def iter_queue_files(queue_dir: str | os.PathLike[str] | QueueLayout) -> Iterator[Path]:
    """Yield every queue file under ``landing/`` and ``archive/``, recursively, in a stable order: of one queue, or of
    every queue of the topic in a folder (by number), as its ``_topic.json`` says (one queue without one).

    Queue files and hidden names are as :mod:`tenure.career.queue` defines them; hidden folders on the way are skipped
    too, as Spark's file source skips them: they are files still being written, or internal folders. So is a folder
    under a queue file's name: the consumer refuses it as an entry (``not_a_file``) and reads nothing in it.

    Args:
        queue_dir: one queue, or the folder of a topic: the data root, or a shared queue folder.
    """
    if isinstance(queue_dir, QueueLayout):
        queues = [queue_dir]
    else:
        topic = read_topic(Path(queue_dir))
        queues = QueueLayout.each(Path(queue_dir), 1 if topic is None else topic.queues)
    for queue in queues:
        for top in (queue.landing, queue.archive):
            if not top.is_dir():
                continue
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = sorted(d for d in dirnames if not is_hidden(d) and not is_queue_file(d))
                for name in sorted(filenames):
                    if is_queue_file(name):
                        yield Path(dirpath) / name


def qualified(name: str, queue: int, queues: int) -> str:
    """How the audit names queue file ``name`` of queue ``queue`` of a topic of ``queues``: as it is in a topic of
    one queue, ``queues/<k>/<name>`` in a topic of more (quarantine rows and set-aside files say their queue too)."""
    return name if queues == 1 else f"{QUEUES_FOLDER}/{queue}/{name}"


@dataclass(frozen=True)
class Consumption:
    """Which queue files one group has read: archived, marked consumed by it, or named by a batch its newest
    Spark checkpoint has committed. Ids only in files it has not read are waiting (lag), not lost."""

    group: str
    marks: dict[str, FileIdentity]
    """The group's marks: file name → the identity of the file consumed under it. Another file under a marked
    name is a new file, not read yet (the queue source's rule, :func:`tenure.career.queue.mark_covers`)."""
    committed: dict[str, set[FileIdentity | None]]
    """The files the committed batches of the group's newest checkpoint read: name → their identities as
    admitted (``None``: a batch of Spark's file source, which records none)."""

    def has_read(self, name: str, identity: FileIdentity, *, archived: bool) -> bool:
        """Whether the group has read the queue file ``name`` of ``identity``, found in ``archive/``
        (``archived``) or ``landing/``."""
        admitted = self.committed.get(name, set())
        if archived or None in admitted or any(i is not None and i.same(identity) for i in admitted):
            return True
        marked = self.marks.get(name)
        return marked is not None and mark_covers(marked, identity)


def find_group(queues: list[QueueLayout]) -> str:
    """The group an audit reads the consumption of when none is named: the only group with a marks folder in the
    topic's queues, else :data:`DEFAULT_GROUP`."""
    found: set[str] = set()
    for queue in queues:
        try:
            found.update(e.name for e in os.scandir(queue.consumed) if e.is_dir() and not is_hidden(e.name))
        except FileNotFoundError:
            continue
    return found.pop() if len(found) == 1 else DEFAULT_GROUP


def read_consumption(queue: QueueLayout, checkpoint: Path, group: str) -> Consumption:
    """What ``group`` has read of ``queue``, from its marks and the queue's Spark checkpoints (``checkpoint``, the
    folder of its terms' own).

    Read before the queue and the output: a file read later counts as waiting, never as lost.
    """
    marks: dict[str, FileIdentity] = {}
    try:
        entries = [e for e in os.scandir(queue.marks(group)) if not is_hidden(e.name)]
    except FileNotFoundError:
        entries = []
    for entry in entries:
        try:
            marks[entry.name] = read_mark(Path(entry.path))
        except FileNotFoundError:  # its file archived and the mark removed meanwhile: archive/ says it is read
            continue
    newest = newest_checkpoint(checkpoint)
    committed = {} if newest is None else _committed_files(newest)
    return Consumption(group, marks, committed)


_TERM_FOLDER = re.compile(r"epoch=(\d+)")


def newest_checkpoint(folder: Path) -> Path | None:
    """The newest term's Spark checkpoint (``epoch=<e>``, the highest ``e``: a stale term's later writes to its
    own folder commit nothing), or the flat one of a tenure before per-term folders; None when there is none."""
    try:
        terms = {int(m.group(1)): Path(e.path) for e in os.scandir(folder)
                 if e.is_dir() and (m := _TERM_FOLDER.fullmatch(e.name))}
    except FileNotFoundError:
        return None
    if terms:
        return terms[max(terms)]
    return folder if (folder / "offsets").is_dir() else None


def _committed_files(checkpoint: Path) -> dict[str, set[FileIdentity | None]]:
    """The queue files (name → identities) named by every batch ``checkpoint`` has committed (``commits/<B>``)
    whose offsets it still holds (Spark keeps the last ones; older batches' files are marked or archived by
    then)."""
    from tenure.career.spark._intake import admitted_entries  # imports pyspark: only with a checkpoint

    try:
        batches = [int(e.name) for e in os.scandir(checkpoint / "commits") if e.name.isdigit()]
    except FileNotFoundError:
        return {}
    found: dict[str, set[FileIdentity | None]] = {}
    for batch in batches:
        for name, identity in admitted_entries(checkpoint, batch):
            found.setdefault(name, set()).add(identity)
    return found


def iter_lines(path: Path) -> Iterator[bytes]:
    """The lines of a file split on ``\\n`` (the final line needs no terminator); an empty file has none."""
    with path.open("rb") as handle:
        for line in handle:
            yield line[:-1] if line.endswith(b"\n") else line


def base_name(source_file: str) -> str:
    """A quarantine ``source_file`` (a path, or a ``file:`` URI as from ``input_file_name()``) → base name (the
    bytes of a name that is not UTF-8 as ``os.fsdecode`` gives them, as a listing of the folder does)."""
    if source_file.startswith("file:"):
        source_file = os.fsdecode(unquote_to_bytes(urlparse(source_file).path))
    return posixpath.basename(source_file.rstrip("/"))


def output_files(folder: Path) -> list[Path]:
    """The Parquet files a reader of the output ``folder`` sees, by path: the active files of its Delta table's
    newest version (whatever table maintenance compacted or vacuumed), or, for a folder that is no Delta table
    yet (a data root written before the outputs were), every published file in it."""
    if not has_version(folder):
        return parquet_files(folder)
    try:
        return sorted(folder / name for name in snapshot_files(folder))
    except DeltaError as exc:
        raise VerifyError(f"cannot read the Delta log of {folder}: {str(exc).splitlines()[0]}: after a power loss, "
                          "start a replica first (its inauguration removes a log entry the loss tore)") from exc


def parquet_files(folder: Path) -> list[Path]:
    """Published Parquet files under ``folder`` (hidden files and folders skipped), by path."""
    if not folder.is_dir():
        return []
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not is_hidden(d)]
        found.extend(Path(dirpath) / n for n in filenames if n.endswith(".parquet") and not is_hidden(n))
    return sorted(found)


def check_data_root(data_root: str | os.PathLike[str], queue_dir: str | os.PathLike[str] | None = None) -> None:
    """Refuse a path that is not a data root (or a queue) before an audit reads it as merely empty.

    A data root is a directory holding at least one of ``landing/``, ``archive/``, ``queues/`` (a topic of several
    queues) and ``table/``; with ``queue_dir``, the data root need only be a directory and the queue must hold
    ``landing/``, ``archive/`` or ``queues/``.
    (:func:`~tenure.service.ops._verify.verify` itself reads an absent folder as empty: a consumer that is starting
    has none yet.)

    Raises:
        VerifyError: naming the path, what is wrong with it and the flag to fix.
    """
    root = Path(data_root)
    queue = None if queue_dir is None else Path(queue_dir)
    for path, what, flag in ((root, "data root", "--data-root"), (queue, "queue dir", "--queue-dir")):
        if path is not None and not path.is_dir():
            problem = "is not a directory" if path.exists() else "does not exist"
            raise VerifyError(f"{what} {path} {problem}: check {flag}")
    if queue is not None:
        if not _holds_queue(queue):
            raise VerifyError(f"queue dir {queue} is not a queue (no landing/, archive/ or queues/ in it): check "
                              "--queue-dir")
    elif not (_holds_queue(root) or (root / TABLE).is_dir()):
        raise VerifyError(f"{root} is not a data root (no landing/, archive/, queues/ or table/ in it): check "
                          "--data-root")


def _holds_queue(path: Path) -> bool:
    queue = QueueLayout(path)
    return queue.landing.is_dir() or queue.archive.is_dir() or (path / QUEUES_FOLDER).is_dir()


def read_columns(path: Path, columns: list[str], optional: tuple[str, ...] = ()) -> pa.Table:
    """``columns`` of a Parquet file, plus those of ``optional`` it has; a missing one of ``columns`` raises."""
    try:
        names = set(pq.read_schema(path).names)
        missing = [c for c in columns if c not in names]
        if missing:
            skippable = [c for c in missing if c in ("ts", "payload")]  # a transform may drop them
            hint = f": pass --ignore-field {skippable[0]} if the pipeline drops it" if skippable else ""
            raise VerifyError(f"{path} lacks column(s) {', '.join(missing)}; has {', '.join(sorted(names))}{hint}")
        return pq.read_table(path, columns=[*columns, *(c for c in optional if c in names)])
    except (OSError, pa.ArrowException) as exc:
        raise VerifyError(f"cannot read {path}: {exc}") from exc
