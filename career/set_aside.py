"""The ``set-aside/`` folder's contract: what a poison batch leaves there, and how its records are replayed.

Shared by the consumer (which sets records aside and replays them), ``tenure replay`` (which asks for a replay)
and ``tenure verify`` (which audits both). Pure Python, so operator tools import it cheaply.

For a batch ``B`` set aside (each name prefixed ``batch-<B, 12 digits>-``, as every published file is):

- ``<name>`` — the records set aside from the queue file ``<name>``: the whole file when the batch was set aside
  whole; when it was split, the records that failed, one JSON line each (the manifest's ``lines`` names the lines
  of the source they came from); a replayed record that failed again is under the set-aside file it came from.
- ``manifest.json`` — the batch, the epoch, the files, the record count, the attempts and the last error,
  ``split`` and ``lines``.
- ``replay.json`` — an operator's request to replay the batch (``tenure replay``), until a batch commits it.
- ``replayed.json`` — the replay done: the batch that wrote the records (``in_batch``). From then on the records
  count as the output's (written, or set aside again by that batch), not as set aside.

A replay feeds the set-aside records (not their bad lines: bad input stays where it is) into the next batch the
leader commits, beside what it read from the queue, past the deduplication state and the per-key order marks:
the keys' order is re-opened for exactly those records, which are written then (or retried, dead-lettered, or set
aside again, as any record). The commit record names the replayed batches, so each replay is written once.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenure.career._durable import fsync
from tenure.career.queue import DEFAULT_MAX_LINE_BYTES, classify_line

__all__ = ["MANIFEST", "REPLAYED", "REPLAY_REQUEST", "ReplayRecord", "SetAsideBatch", "mark_replayed",
           "pending_replays", "published", "read_set_aside", "replay_records", "write_json"]

MANIFEST = "manifest.json"
REPLAY_REQUEST = "replay.json"
REPLAYED = "replayed.json"
_MANIFEST = re.compile(r"batch-(\d+)-manifest\.json")
_REQUEST = re.compile(r"batch-(\d+)-replay\.json")


def published(batch_id: int, name: str) -> str:
    """A set-aside file's published name (``batch-<B>-<name>``, as ``published_name`` names every output's)."""
    return f"batch-{batch_id:012d}-{name}"


@dataclass(frozen=True)
class SetAsideBatch:
    """One set-aside batch as its manifest describes it, and whether it was replayed (in which batch)."""

    batch_id: int
    manifest: dict[str, Any]
    replayed_in: int | None
    requested: bool

    def files(self, folder: Path) -> list[Path]:
        """The batch's set-aside files that are there, in the manifest's order."""
        paths = [folder / published(self.batch_id, str(name)) for name in self.manifest.get("files", [])]
        return [path for path in paths if path.is_file()]


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically: a hidden file, fsynced, renamed, the folder fsynced."""
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    with partial.open("w") as handle:
        handle.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    partial.replace(path)
    fsync(path.parent, directory=True)


def read_set_aside(folder: Path) -> dict[int, SetAsideBatch]:
    """Every batch set aside in ``folder`` (``set-aside/``), by batch id."""
    found: dict[int, SetAsideBatch] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("batch-*-manifest.json")):
        match = _MANIFEST.fullmatch(path.name)
        if match is None:
            continue
        batch = int(match.group(1))
        done = folder / published(batch, REPLAYED)
        replayed_in = int(json.loads(done.read_text())["in_batch"]) if done.is_file() else None
        found[batch] = SetAsideBatch(batch, json.loads(path.read_text()), replayed_in,
                                     (folder / published(batch, REPLAY_REQUEST)).is_file())
    return found


def pending_replays(folder: Path) -> list[int]:
    """The set-aside batches an operator asked to replay that no batch has replayed yet, in order (one listing of
    the requests: the leader asks before each batch)."""
    if not folder.is_dir():
        return []
    asked = (_REQUEST.fullmatch(path.name) for path in folder.glob(f"batch-*-{REPLAY_REQUEST}"))
    return sorted(batch for batch in (int(match.group(1)) for match in asked if match is not None)
                  if not (folder / published(batch, REPLAYED)).is_file())


def mark_replayed(folder: Path, batch_id: int, *, in_batch: int, records: int) -> None:
    """Record that ``in_batch`` (committed) replayed set-aside batch ``batch_id``, and drop the request
    (idempotent: a re-run after a crash finds it done)."""
    done = folder / published(batch_id, REPLAYED)
    if not done.is_file():
        write_json(done, {"batch_id": batch_id, "in_batch": in_batch, "records": records, "replayed_at": time.time()})
    (folder / published(batch_id, REPLAY_REQUEST)).unlink(missing_ok=True)


@dataclass(frozen=True)
class ReplayRecord:
    """A set-aside record to replay: where it is (the set-aside file, its line there) and the record."""

    source: str
    line: int
    record: dict[str, Any]


def replay_records(folder: Path, batch_id: int, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> list[ReplayRecord]:
    """The records of set-aside batch ``batch_id``, in file and line order (its bad lines are left out)."""
    batch = read_set_aside(folder).get(batch_id)
    if batch is None:
        return []
    found: list[ReplayRecord] = []
    for path in batch.files(folder):
        data = path.read_bytes()
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        for number, raw in enumerate(lines, start=1):
            record, _reason = classify_line(raw, max_line_bytes)
            if record is not None:
                found.append(ReplayRecord(str(path), number, record))
    return found
