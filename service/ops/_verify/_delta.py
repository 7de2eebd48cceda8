"""The audit of the Delta tables (``tenure.career.output``): every version one committed batch, no file outside one.

Reads each Delta output's log as its protocol defines it (``_delta_log/<version>.json``: one action a line, the
``add`` actions, the ``txn`` and the ``commitInfo`` that carries tenure's batch, epoch and replica), against the
published files in the folder and the epochs the rows carry. An output folder without a Delta log (a data root
written before the outputs were Delta tables, and not adopted yet) is audited as plain Parquet only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenure.career.output import APP_ID, DELTA_LOG, DELTA_OUTPUTS, batch_of, is_delta_table, snapshot_files
from tenure.career.queue import is_hidden

__all__ = ["DeltaAudit", "audit_delta"]

_BATCH, _EPOCH, _ADOPTED = "tenure.batch", "tenure.epoch", "tenure.adopted_batches"


@dataclass
class DeltaAudit:
    """What the audit found across the Delta outputs; each list holds examples, its length the count."""

    tables: int = 0
    versions: int = 0
    outside: list[str] = field(default_factory=list)
    """Published files no version of their folder's table names (a publish cut short, or a stray file)."""
    missing: list[str] = field(default_factory=list)
    """Files the newest version names that are not in the folder."""
    bad_versions: list[dict[str, Any]] = field(default_factory=list)
    """Versions that are not one batch: files of two batches, a batch in two versions, batches out of order, a
    transaction version other than the batch, or an epoch other than the one the batch's rows carry."""

    @property
    def problems(self) -> int:
        return len(self.outside) + len(self.missing) + len(self.bad_versions)


def audit_delta(root: Path, row_epochs: Mapping[str, set[tuple[int, int]]]) -> DeltaAudit:
    """Audit ``root``'s Delta outputs; ``row_epochs`` maps each output folder name to the ``(_batch, _epoch)``
    pairs its rows carry (the epoch each batch's version must name)."""
    audit = DeltaAudit()
    for name in DELTA_OUTPUTS:
        folder = root / name
        if not is_delta_table(folder):
            continue
        audit.tables += 1
        published = {n for n in os.listdir(folder) if not is_hidden(n) and batch_of(n) is not None}
        in_snapshot = snapshot_files(folder)
        audit.outside += sorted(f"{name}/{n}" for n in published - in_snapshot)
        audit.missing += sorted(f"{name}/{n}" for n in in_snapshot - published)
        epochs: dict[int, set[int]] = {}
        for batch, epoch in row_epochs.get(name, set()):
            epochs.setdefault(batch, set()).add(epoch)
        _check_versions(folder, name, epochs, audit)
    return audit


def _check_versions(folder: Path, name: str, epochs: Mapping[int, set[int]], audit: DeltaAudit) -> None:
    seen: dict[int, int] = {}
    last = -1
    for path in sorted((folder / DELTA_LOG).glob("[0-9]*.json")):
        version = int(path.stem)
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        adds = [a["add"]["path"] for a in actions if "add" in a]
        if not adds:  # a schema change, or another engine's commit that adds nothing: no batch
            continue
        audit.versions += 1
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        txn = next((a["txn"] for a in actions if "txn" in a and a["txn"].get("appId") == APP_ID), None)

        def wrong(reason: str, v: int = version, **detail: Any) -> None:
            audit.bad_versions.append({"table": name, "version": v, "reason": reason, **detail})

        batch = _int(info.get(_BATCH))
        if batch is None or txn is None:
            wrong("not written by tenure: no batch in its commit info or no tenure transaction")
            continue
        first = _int(str(info[_ADOPTED]).split("..")[0]) if info.get(_ADOPTED) else batch
        assert first is not None
        batches = {batch_of(p.rsplit("/", 1)[-1]) for p in adds}
        if not batches <= set(range(first, batch + 1)) or (first == batch and batches != {batch}):
            wrong("its files are not the batch's", batch=batch, batches=sorted(b for b in batches if b is not None))
        if int(txn.get("version", -1)) != batch:
            wrong("its transaction version is not its batch", batch=batch, txn=txn.get("version"))
        if batch <= last:
            wrong("batches out of order", batch=batch, after=last)
        for b in batches - {None}:
            assert b is not None
            if b in seen:
                wrong("a batch in two versions", batch=b, first_version=seen[b])
            seen[b] = version
        epoch = _int(info.get(_EPOCH))
        if first == batch and batch in epochs and epochs[batch] != {epoch}:
            wrong("its epoch is not the one the batch's rows carry", batch=batch, epoch=epoch,
                  rows=sorted(epochs[batch]))
        last = max(last, batch)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
