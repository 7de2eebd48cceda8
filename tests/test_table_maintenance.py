"""Table maintenance on the outputs: users may compact (``OPTIMIZE``) and ``VACUUM`` the Delta tables tenure writes.

``tenure verify`` audits through each table's snapshot and log, so a compaction (a version of its own whose actions
change no data) and the vacuum after it leave the audit exact; and a publish never commits part of a batch: a part
file deleted between its link into ``table/`` and its Delta version is linked again from staging, and one gone
with its staged copy too is refused, naming the file, until it is restored. A real SparkCareer on the shared
ZooKeeper and SparkSession, the maintenance run with delta-rs as a user would.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from kazoo.client import KazooClient

from tenure.career import BatchFailed, Outcome
from tenure.career.output import MissingPartError, batch_versions, covered_batch
from tenure.career.spark import SparkCareer
from tests.test_spark_career import (
    Queue,
    Recorder,
    assert_exactly_once,
    audit,
    drain_term,
    leadership,
    make_config,
    run_until,
)

pytestmark = pytest.mark.timeout(900)

OUTPUTS = ("table", "quarantine")


def _version_files(folder: Path) -> dict[int, set[str]]:
    """Each batch's version of the table: the files its log entry adds."""
    found: dict[int, set[str]] = {}
    for version in batch_versions(folder):
        if version.batch is not None:
            entry = folder / "_delta_log" / f"{version.version:020d}.json"
            actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
            found[version.batch] = {a["add"]["path"] for a in actions if "add" in a}
    return found


def test_verify_stays_exact_after_the_outputs_are_compacted_and_vacuumed(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A term writes several batches; the user compacts both outputs (OPTIMIZE) and the audit still finds every
    id once and every version one batch (the compaction's version is no batch); a second term writes more on the
    compacted tables (its roll-forward finds the last batch covered though its files were rewritten); a VACUUM
    without retention deletes the compacted-away files, and the audit, then a third term, still hold."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=4)
    drain_term(root, zk_client, zk_group, "r1", max_files_per_trigger=1)
    for name in OUTPUTS:
        metrics = DeltaTable(str(root / name)).optimize.compact()
        assert metrics["numFilesRemoved"] >= 2, metrics
    report = assert_exactly_once(root)
    assert report.delta_versions_not_one_batch == 0 and report.files_missing_from_delta_tables == 0

    q.standard(files=2, start=500)
    drain_term(root, zk_client, zk_group, "r2", max_files_per_trigger=1)
    report = assert_exactly_once(root)
    assert report.ids_in == 120

    for name in OUTPUTS:
        removed = DeltaTable(str(root / name)).vacuum(retention_hours=0, enforce_retention_duration=False,
                                                      dry_run=False)
        assert removed, f"{name}: the vacuum removed nothing: no compacted-away file to audit without"
    report = assert_exactly_once(root)
    assert report.delta_versions_not_one_batch == 0 and report.files_outside_delta_versions == 0

    q.standard(files=1, start=900)
    drain_term(root, zk_client, zk_group, "r3")
    assert assert_exactly_once(root).ids_in == 140


def _at_first(point: str, action: Callable[[], None]) -> Callable[[str], None]:
    """A fault hook that runs ``action`` the first time the career reaches ``point``."""
    done: list[bool] = []

    def hook(reached: str) -> None:
        if reached == point and not done:
            done.append(True)
            action()

    return hook


def test_a_vacuum_between_the_links_and_the_delta_commit_leaves_no_half_batch(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A full VACUUM without retention runs while a batch's part files are in ``table/`` but in no version yet
    (it deletes files no version names): the batch's version still holds every part file its record names,
    linked again from staging, and the audit finds every id once."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=3)
    drain_term(root, zk_client, zk_group, "r1", max_files_per_trigger=1)  # the tables exist: a vacuum has one to read
    q.standard(files=2, start=500)
    deleted: list[str] = []

    def vacuum() -> None:
        for name in OUTPUTS:
            deleted.extend(DeltaTable(str(root / name)).vacuum(
                retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True))

    record = drain_term(root, zk_client, zk_group, "r2", faults=_at_first("after_rename", vacuum),
                        max_files_per_trigger=2)
    assert any(name.startswith("batch-") for name in deleted), f"the vacuum deleted no part file: {deleted}"
    assert record is not None
    versions = _version_files(root / "table")
    assert versions[int(record["batch_id"])] == set(record["parts"]["table"])
    assert_exactly_once(root)


def test_a_part_file_gone_with_its_staged_copy_is_refused_until_it_is_restored(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """One of a committed batch's two part files is deleted, staged copy and all, before its Delta version: the
    publish refuses (the error names the file) and the table gets no version of part of the batch; once the file
    is put back, the next term's roll-forward adds the whole batch and the audit finds every id once."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=1, per_file=20_100, keys=40)  # above SMALL_BATCH_RECORDS: two part files, by key
    kept = tmp_path / "kept"
    kept.mkdir()

    def delete_one_part() -> None:
        part = sorted((root / "table").glob("batch-*.parquet"))[0]
        shutil.copy2(part, kept / part.name)
        part.unlink()
        for staged in (root / "table" / "_staging").glob(f"*/*/{part.name.split('-', 2)[2]}"):
            staged.unlink()

    career = SparkCareer(make_config(root), Recorder(), replica_id="r1",
                         faults=_at_first("after_rename", delete_one_part))
    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx):
            career.inaugurate(ctx)
            with pytest.raises(BatchFailed) as failed:
                run_until(career, lambda: False)
            career.hand_over(Outcome.FAILED)
            record, _ = ctx.fence.read_commit()
    finally:
        career.close()
    assert isinstance(failed.value.__cause__, MissingPartError), failed.value
    (missing,) = kept.iterdir()
    assert missing.name in str(failed.value.__cause__)
    assert record is not None and len(record["parts"]["table"]) == 2
    assert covered_batch(root / "table") is None, "a version was made of part of the batch"

    shutil.copy2(missing, root / "table" / missing.name)  # the operator restores it
    drain_term(root, zk_client, zk_group, "r2")
    assert _version_files(root / "table")[int(record["batch_id"])] == set(record["parts"]["table"])
    report = assert_exactly_once(root)
    assert report.ids_in == 20_100 and audit(root).ok
