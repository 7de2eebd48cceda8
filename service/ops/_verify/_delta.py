"""The audit of the Delta tables (``tenure.career.output``): every version one committed batch, no file outside one.

Reads each Delta output's log as its protocol defines it (``_delta_log/<version>.json``: one action a line, the
``add`` actions, the ``txn`` and the ``commitInfo`` that carries tenure's batch, epoch and replica), against the
published files in the folder and the epochs the rows carry. Table maintenance is the user's to run: a version
whose actions change no data (``dataChange`` false: ``OPTIMIZE`` rewriting batches into fewer files) is no batch
and is passed over, and a published file of a batch the table covers may have left its newest version (compacted
away, awaiting ``VACUUM``). An output folder without a Delta log (a data root written before the outputs were
Delta tables, and not adopted yet) is audited as plain Parquet only.

In a topic of several queues every queue's batches are versions of the same tables, each carrying its queue's
application id (``tenure-queue-<k>``): a version holds the files of one batch of that queue, and each queue's
versions follow its batch order, whatever the other queues' versions between them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenure.career.output import (
    DELTA_LOG,
    DELTA_OUTPUTS,
    QueueOutput,
    covered_batch,
    covers,
    is_delta_table,
    part_of,
    snapshot_files,
)
from tenure.career.queue import is_hidden

__all__ = ["DeltaAudit", "audit_delta"]

_BATCH, _EPOCH, _ADOPTED = "tenure.batch", "tenure.epoch", "tenure.adopted_batches"


@dataclass
class DeltaAudit:
    """What the audit found across the Delta outputs; each list holds examples, its length the count."""

    tables: int = 0
    versions: int = 0
    by_queue: dict[int, int] = field(default_factory=dict)
    """Versions per queue (by its application id)."""
    outside: list[str] = field(default_factory=list)
    """Published files of a batch the table's transaction version does not cover (a publish cut short)."""
    missing: list[str] = field(default_factory=list)
    """Files the newest version names that are not in the folder."""
    bad_versions: list[dict[str, Any]] = field(default_factory=list)
    """Versions that are not one batch: files of two batches, a batch in two versions, batches out of order, a
    transaction version other than the batch, or an epoch other than the one the batch's rows carry."""

    @property
    def problems(self) -> int:
        return len(self.outside) + len(self.missing) + len(self.bad_versions)


def audit_delta(root: Path, row_epochs: Mapping[str, set[tuple[int, int, int]]], queues: int = 1) -> DeltaAudit:
    """Audit ``root``'s Delta outputs, of a topic of ``queues``; ``row_epochs`` maps each output folder name to the
    ``(_queue, _batch, _epoch)`` triples its rows carry (the epoch each batch's version must name)."""
    audit = DeltaAudit()
    outputs = [QueueOutput(k, queues) for k in range(queues)]
    for name in DELTA_OUTPUTS:
        folder = root / name
        if not is_delta_table(folder):
            continue
        audit.tables += 1
        present = {n for n in os.listdir(folder) if not is_hidden(n)}
        in_snapshot = snapshot_files(folder)
        covered = {q.queue: covered_batch(folder, q) for q in outputs}
        audit.outside += sorted(f"{name}/{n}" for n in present - in_snapshot
                                if (part := _part(n, queues)) is not None and not covers(covered.get(part[0]), part[1]))
        audit.missing += sorted(f"{name}/{n}" for n in in_snapshot - present)
        epochs: dict[tuple[int, int], set[int]] = {}
        for queue, batch, epoch in row_epochs.get(name, set()):
            epochs.setdefault((queue, batch), set()).add(epoch)
        _check_versions(folder, name, epochs, audit, outputs)
    return audit


def _part(name: str, queues: int) -> tuple[int, int] | None:
    """The (queue, batch) of a published part file's name (a topic of one queue's names are queue 0's), or None; a
    name of the other kind than the topic's is the queue -1's, which no version may hold."""
    found = part_of(name)
    if found is None:
        return None
    queue, batch = found
    if (queue is None) != (queues == 1):
        return -1, batch
    return (0 if queue is None else queue), batch


def _check_versions(folder: Path, name: str, epochs: Mapping[tuple[int, int], set[int]], audit: DeltaAudit,
                    outputs: list[QueueOutput]) -> None:
    app_ids = {q.app_id: q.queue for q in outputs}
    queues = len(outputs)
    seen: dict[tuple[int, int], int] = {}
    last: dict[int, int] = {}
    for path in sorted((folder / DELTA_LOG).glob("[0-9]*.json")):
        version = int(path.stem)
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        adds = [a["add"]["path"] for a in actions if "add" in a]
        if not adds or _maintenance(actions):  # a schema change, a compaction, a vacuum: no batch
            continue
        audit.versions += 1
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        txns = [a["txn"] for a in actions if "txn" in a and a["txn"].get("appId") in app_ids]
        queue = app_ids[txns[0]["appId"]] if len(txns) == 1 else -1

        def wrong(reason: str, v: int = version, q: int = queue, **detail: Any) -> None:
            queued = {} if queues == 1 else {"queue": q}
            audit.bad_versions.append({"table": name, "version": v, "reason": reason, **queued, **detail})

        batch = _int(info.get(_BATCH))
        if batch is None or len(txns) != 1:
            wrong("not written by tenure: no batch in its commit info, or not one tenure transaction")
            continue
        txn = txns[0]
        audit.by_queue[queue] = audit.by_queue.get(queue, 0) + 1
        first = _int(str(info[_ADOPTED]).split("..")[0]) if info.get(_ADOPTED) else batch
        assert first is not None
        parts = {_part(p.rsplit("/", 1)[-1], queues) for p in adds}
        batches = {part[1] for part in parts if part is not None and part[0] == queue}
        if (len(batches) != len(parts) or not batches <= set(range(first, batch + 1))
                or (first == batch and batches != {batch})):
            wrong("its files are not the batch's", batch=batch,
                  batches=sorted(b for b in batches if b is not None),
                  **({} if len(batches) == len(parts) else {"files_of_other_queues": len(parts) - len(batches)}))
        if int(txn.get("version", -1)) != batch:
            wrong("its transaction version is not its batch", batch=batch, txn=txn.get("version"))
        if batch <= last.get(queue, -1):
            wrong("batches out of order", batch=batch, after=last[queue])
        for b in batches:
            if (queue, b) in seen:
                wrong("a batch in two versions", batch=b, first_version=seen[(queue, b)])
            seen[(queue, b)] = version
        epoch = _int(info.get(_EPOCH))
        if first == batch and (queue, batch) in epochs and epochs[(queue, batch)] != {epoch}:
            wrong("its epoch is not the one the batch's rows carry", batch=batch, epoch=epoch,
                  rows=sorted(epochs[(queue, batch)]))
        last[queue] = max(last.get(queue, -1), batch)


def _maintenance(actions: list[dict[str, Any]]) -> bool:
    """Whether a version only rearranges data (every ``add`` and ``remove`` says ``dataChange: false``), as
    ``OPTIMIZE`` does: it holds no batch."""
    changes = [a[kind] for a in actions for kind in ("add", "remove") if kind in a]
    return bool(changes) and not any(change.get("dataChange", True) for change in changes)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
