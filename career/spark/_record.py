"""The commit record: read back from ZooKeeper, checked against the data root's layout before anything acts on it;
written, kept under the size ZooKeeper takes.

Every path a commit record names — the staged folders a roll-forward renames and deletes, the part files its Delta
step adds, the order and retry snapshots a batch reads, the queue files it marks consumed — is one the layout builds
from the record's own queue, epoch and batch. Anyone who can write ``/tenure/<group>/commit`` (its ACL is open unless
the group runs with ``--zk-auth``) could otherwise name ``../../etc`` or an absolute path, and a leader's roll-forward
would move and delete files there. So a record whose paths are not exactly the layout's is refused, whole, before a
file is touched (``docs/operating/security.md``).

A record ZooKeeper refuses for its size (``jute.maxbuffer``, 1 MiB by default: the server drops the connection, the
commit's outcome is unknown, and every later term tries again) would stop the group for good. The queue source
bounds the names of a batch's files (``_intake.RECORD_NAMES_BYTES``), which keeps a record a fraction of that;
:func:`check_size` refuses the rest before the commit, with the fix.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tenure.career.queue import is_hidden
from tenure.career.spark._errors import CommitRecordError, SparkCareerError
from tenure.career.spark._layout import Layout

__all__ = ["MAX_RECORD_BYTES", "check_record", "check_size"]

MAX_RECORD_BYTES = 1_000_000
"""The largest commit record sent: ZooKeeper's default ``jute.maxbuffer`` (1 048 575 bytes) less room for the rest
of the transaction (the check of the leader's node, the paths, the headers)."""

#: A snapshot a record names (``order``, ``retry``): the one part file of a batch's staging, published.
_SNAPSHOT = re.compile(r"batch-(\d{12})-part-00000\.parquet")


def check_record(layout: Layout, record: Mapping[str, Any] | None) -> None:
    """Refuse a commit record that names a path the layout of its queue would not build for its own epoch and batch,
    or that is another queue's (its ``queue``: absent in a topic of one queue's records, which are queue 0's).

    A record without a batch (none yet, or another career's) names no path and passes.

    Raises:
        CommitRecordError: one line naming the field, what it holds, what the layout expects, and the fix.
    """
    if record is None or record.get("batch_id") is None:
        return
    batch, epoch = record.get("batch_id"), record.get("epoch")
    if not _is_count(batch) or not _is_count(epoch):
        raise _refused(f"its batch_id {batch!r} and epoch {epoch!r} are not both whole numbers")
    assert isinstance(batch, int) and isinstance(epoch, int)
    queue = record.get("queue", 0)
    if queue != layout.index:
        raise _refused(f"it is the record of queue {queue!r}, and this is queue {layout.index}'s")
    _check_staged(layout, record.get("staged"), epoch, batch)
    _check_parts(layout, record.get("parts"), batch)
    for field, folder in (("order", layout.order), ("retry", layout.retry)):
        if record.get(field) is not None:
            _check_snapshot(layout, field, record[field], folder, batch)
    published = record.get("published_path")
    expected = f"{layout.relative(layout.table)}/{layout.published_name(layout.table, batch, '*.parquet')}"
    if published is not None and published != expected:
        raise _refused(f"its published_path is {published!r}, not {expected!r} (batch {batch})")
    clock = record.get("clock")
    if clock is not None and not (isinstance(clock, (int, float)) and not isinstance(clock, bool)
                                  and math.isfinite(clock) and clock >= 0):
        raise _refused(f"its clock is {clock!r}, not a count of seconds")
    files = record.get("files")
    if files is not None and (not isinstance(files, list) or not all(_is_name(n) for n in files)):
        bad = files if not isinstance(files, list) else next(n for n in files if not _is_name(n))
        raise _refused(f"it names {bad!r} among the queue files its batch read: not a file name in landing/")


def check_size(record: Mapping[str, Any]) -> None:
    """Refuse to send a commit record over :data:`MAX_RECORD_BYTES` (encoded as the fence encodes it).

    Raises:
        SparkCareerError: the size, what fills it and the fix.
    """
    size = len(json.dumps(record, sort_keys=True, separators=(",", ":")))
    if size <= MAX_RECORD_BYTES:
        return
    parts = sum(len(names) for names in (record.get("parts") or {}).values())
    raise SparkCareerError(
        f"batch {record.get('batch_id')}'s commit record would be {size} bytes, over the {MAX_RECORD_BYTES} ZooKeeper "
        f"takes (jute.maxbuffer): it names {len(record.get('files') or [])} queue files and {parts} part files. "
        "Lower --shuffle-partitions (each part file adds its name); a batch an earlier release planned with more "
        "files is planned again by the next term")


def _check_staged(layout: Layout, staged: Any, epoch: int, batch: int) -> None:
    if staged is None:
        return
    if not isinstance(staged, Mapping):
        raise _refused(f"its staged field is {staged!r}, not a map of outputs to staging folders")
    outputs = layout.outputs()
    for name, stored in staged.items():
        if name not in outputs:
            raise _refused(f"it stages {name!r}, which is no output of the data root ({', '.join(outputs)})")
        folder = layout.staging(outputs[name], epoch, batch)
        if stored != layout.relative(folder):
            raise _refused(f"its staged path for {name} is {stored!r}, not {layout.relative(folder)!r} (batch {batch} "
                           f"of epoch {epoch})")
        _check_inside(folder, outputs[name], f"its staged path for {name}, {stored!r},")


def _check_parts(layout: Layout, parts: Any, batch: int) -> None:
    if parts is None:
        return
    if not isinstance(parts, Mapping):
        raise _refused(f"its parts field is {parts!r}, not a map of outputs to part files")
    outputs = layout.delta_outputs()
    for name, names in parts.items():
        if name not in outputs or not isinstance(names, list):
            raise _refused(f"its parts name {name!r}: {names!r}, not part files of a Delta output")
        prefix = layout.published_name(outputs[name], batch, "")
        for part in names:
            if not (_is_name(part) and part.startswith(prefix) and not is_hidden(part.removeprefix(prefix))
                    and part != prefix):
                raise _refused(f"it names {part!r} among the parts of {name}: not a part file of batch {batch} "
                               f"({prefix}….parquet)")
            _check_inside(outputs[name] / part, outputs[name], f"its part {part!r} of {name}")


def _check_snapshot(layout: Layout, field: str, stored: Any, folder: Path, batch: int) -> None:
    """``order`` and ``retry`` name the snapshot of this batch or of an earlier one (carried over unchanged)."""
    name = stored.removeprefix(f"{layout.relative(folder)}/") if isinstance(stored, str) else ""
    match = _SNAPSHOT.fullmatch(name)
    if not (isinstance(stored, str) and match and stored == layout.relative(folder / name)
            and int(match.group(1)) <= batch):
        raise _refused(f"its {field} snapshot is {stored!r}, not {layout.relative(folder)}/"
                       f"{layout.published_name(folder, batch, 'part-00000.parquet')} or an earlier batch's")
    _check_inside(folder / name, folder, f"its {field} snapshot {stored!r}")


def _check_inside(path: Path, base: Path, what: str) -> None:
    """The path, with every symbolic link on its way resolved, is still under ``base`` (itself resolved: an
    output folder may be a link to another disk), so no link planted in the data root leads a move elsewhere."""
    real, real_base = os.path.realpath(path), os.path.realpath(base)
    if os.path.commonpath([real, real_base]) != real_base:
        raise _refused(f"{what} leads out of {base} through a symbolic link, to {real}")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_name(value: Any) -> bool:
    """One path component: no separator, no NUL, not ``.`` or ``..``."""
    return isinstance(value, str) and value not in ("", ".", "..") and "/" not in value and "\0" not in value


def _refused(why: str) -> CommitRecordError:
    return CommitRecordError(
        f"the group's commit record (/tenure/<group>/commit) is not one tenure wrote: {why}; this replica acts on "
        "none of it. Close the group's ZooKeeper ACLs (--zk-auth, docs/operating/security.md) and set the record "
        "back to the last one a leader committed")
