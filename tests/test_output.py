"""The output's contract (``tenure.career.output``): each batch one Delta version, idempotent whoever finishes it.

Pure: Parquet files written with pyarrow as the publish renames leave them, the Delta log written and read with
delta-rs. The Spark career's use of it, under paused leaders, is in ``tests/test_delta_output.py``.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tenure.career import output
from tenure.career.output import (
    APP_ID,
    OutputSchemaError,
    batch_versions,
    covered_batch,
    publish_batch,
    snapshot_files,
)


def _part(folder: Path, batch: int, rows: int, part: int = 0, extra: dict[str, pa.Array] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    columns: dict[str, pa.Array] = {
        "id": pa.array([f"{batch}-{part}-{i}" for i in range(rows)]),
        "_epoch": pa.array([7] * rows, pa.int64()),
        "_batch": pa.array([batch] * rows, pa.int64()),
        **(extra or {}),
    }
    path = folder / f"batch-{batch:012d}-part-{part:05d}.parquet"
    pq.write_table(pa.table(columns), path)
    return path


@contextlib.contextmanager
def own_handle(folder: Path) -> Iterator[DeltaTable]:
    """A fresh handle on the table, for ``tenure.career.output._open``: each writer a process with its own, not the
    one a process shares between its threads."""
    yield DeltaTable(str(folder))


def _ids(folder: Path) -> list[str]:
    """What a Delta reader sees: the newest snapshot's files, read with pyarrow."""
    tables = [pq.read_table(folder / name) for name in sorted(snapshot_files(folder))]
    return sorted(i for t in tables for i in t.column("id").to_pylist())


def test_each_batch_is_one_version_carrying_its_batch_epoch_and_transaction(tmp_path: Path) -> None:
    """Each published batch is one Delta version carrying its batch id, epoch and replica, the table's transaction
    version is the last batch, the table is append-only, and each file carries its row-count statistics."""
    table = tmp_path / "table"
    _part(table, 0, 3)
    assert publish_batch(table, 0, epoch=7, replica_id="r1") == 0
    _part(table, 1, 2, part=0)
    _part(table, 1, 2, part=1)
    assert publish_batch(table, 1, epoch=9, replica_id="r2") == 1
    assert covered_batch(table) == 1 == DeltaTable(str(table)).transaction_version(APP_ID)
    assert [(v.version, v.batch, v.epoch, v.replica, v.adopted) for v in batch_versions(table)] == [
        (0, 0, 7, "r1", False), (1, 1, 9, "r2", False)]
    assert len(_ids(table)) == 7
    config = DeltaTable(str(table)).metadata().configuration
    assert config["delta.appendOnly"] == "true"
    stats = DeltaTable(str(table)).get_add_actions(flatten=True)
    assert sorted(pa.table(stats).column("num_records").to_pylist()) == [2, 2, 3]


def test_publishing_a_covered_batch_again_adds_no_version(tmp_path: Path) -> None:
    """A re-run, a successor's roll-forward or a stale leader finishing its own batch: skipped, never twice."""
    table = tmp_path / "table"
    _part(table, 0, 3)
    assert publish_batch(table, 0, epoch=7, replica_id="r1") == 0
    assert publish_batch(table, 0, epoch=7, replica_id="r2") is None, "batch 0: a transaction version of 0 covers it"
    _part(table, 1, 2)
    assert publish_batch(table, 1, epoch=7, replica_id="r1") == 1
    assert publish_batch(table, 1, epoch=7, replica_id="r2") is None
    assert publish_batch(table, 0, epoch=7, replica_id="r2") is None, "an older batch is covered too"
    assert DeltaTable(str(table)).version() == 1
    assert len(_ids(table)) == 5


def test_a_batch_without_files_here_makes_no_version(tmp_path: Path) -> None:
    """A batch with no files for an output (no quarantined line, say) adds no version there, and creates no table if
    there was none."""
    table = tmp_path / "quarantine"
    assert publish_batch(table, 0, epoch=7, replica_id="r1") is None
    assert not (table / "_delta_log").exists()
    _part(table, 3, 1)
    assert publish_batch(table, 3, epoch=7, replica_id="r1") == 0
    assert publish_batch(table, 4, epoch=7, replica_id="r1") is None
    assert [v.batch for v in batch_versions(table)] == [3]


def test_two_replicas_racing_on_one_batch_make_one_version(tmp_path: Path) -> None:
    """Both read the table before either commits (a stale leader resumed inside its Delta commit, and the
    successor rolling the same batch forward): Delta's transaction conflict refuses the second, which then sees
    the batch covered and stops."""
    table = tmp_path / "table"
    _part(table, 0, 3)
    publish_batch(table, 0, epoch=7, replica_id="r1")
    _part(table, 1, 4)
    barrier = threading.Barrier(2)
    results: list[int | None] = []
    errors: list[BaseException] = []
    original = DeltaTable.create_write_transaction

    def slow(self: DeltaTable, *args: object, **kwargs: object) -> None:
        barrier.wait(timeout=10)  # both have read the table at version 0 and checked the transaction
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    def publish(replica: str) -> None:
        try:
            results.append(publish_batch(table, 1, epoch=7, replica_id=replica))
        except BaseException as exc:
            errors.append(exc)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DeltaTable, "create_write_transaction", slow)
        patch.setattr("tenure.career.output._open", own_handle)
        threads = [threading.Thread(target=publish, args=(r,)) for r in ("r1", "r2")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    assert not errors, errors
    assert sorted(results, key=lambda v: -1 if v is None else v) == [None, 1]
    assert DeltaTable(str(table)).version() == 1
    assert len(_ids(table)) == 7


def test_a_data_root_from_before_is_adopted_in_one_version_without_rewriting_a_file(tmp_path: Path) -> None:
    """An output of plain Parquet from the release before the Delta tables is adopted in one version together with the
    next batch: its files are not rewritten (same inodes and mtimes), staging and Spark's side files are left out."""
    table = tmp_path / "table"
    old = [_part(table, b, 2) for b in range(5)]
    stamps = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in old}
    (table / "_staging").mkdir()  # a staging folder and Spark's side files are not data
    (table / ".batch-000000000009-part-00000.parquet.crc").write_bytes(b"x")
    _part(table, 5, 3)
    assert publish_batch(table, 5, epoch=11, replica_id="r1") == 0
    (version,) = batch_versions(table)
    assert (version.first, version.batch, version.epoch, version.adopted) == (0, 5, 11, True)
    assert len(_ids(table)) == 13
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in old} == stamps


def test_a_new_column_is_added_before_its_batch_and_a_changed_type_is_refused(tmp_path: Path) -> None:
    """A batch with a new column gets a schema version of its own first, then its batch version; a column whose type
    changed is refused naming the column and both types, and the batch is not covered."""
    table = tmp_path / "table"
    _part(table, 0, 2)
    publish_batch(table, 0, epoch=7, replica_id="r1")
    _part(table, 1, 2, extra={"score": pa.array([1.5, 2.5])})
    assert publish_batch(table, 1, epoch=7, replica_id="r1") == 2
    versions = batch_versions(table)
    assert [(v.version, v.batch) for v in versions] == [(0, 0), (1, None), (2, 1)]
    assert "score" in pa.schema(DeltaTable(str(table)).schema().to_arrow()).names
    _part(table, 2, 2, extra={"score": pa.array(["high", "low"])})
    with pytest.raises(OutputSchemaError, match=r"column 'score' is string but the Delta table .* has double"):
        publish_batch(table, 2, epoch=7, replica_id="r1")
    assert covered_batch(table) == 1


def test_the_log_entry_is_durable_and_readable_by_a_plain_json_reader(tmp_path: Path) -> None:
    """A version's commit info holds the batch, epoch and replica: what any engine's history shows."""
    table = tmp_path / "table"
    _part(table, 0, 1)
    publish_batch(table, 0, epoch=7, replica_id="r1")
    lines = [json.loads(x) for x in (table / "_delta_log" / f"{0:020d}.json").read_text().splitlines()]
    info = next(x["commitInfo"] for x in lines if "commitInfo" in x)
    txn = next(x["txn"] for x in lines if "txn" in x)
    assert (info["tenure.batch"], info["tenure.epoch"], info["tenure.replica"]) == ("0", "7", "r1")
    assert (txn["appId"], txn["version"]) == (APP_ID, 0)


def test_batches_an_earlier_release_published_during_a_rolling_upgrade_get_their_own_versions_first(
        tmp_path: Path) -> None:
    """A leader of the release before the Delta outputs renames batches 2 and 3 into an adopted table; the next
    publish (batch 4) adds them first, one version each, in order, with the epoch their rows carry."""
    table = tmp_path / "table"
    for batch in (0, 1):
        _part(table, batch, 2)
        publish_batch(table, batch, epoch=7, replica_id="r1")
    for batch in (2, 3):
        _part(table, batch, 3)  # rows carry epoch 7: the earlier release's term
    _part(table, 4, 1)
    assert publish_batch(table, 4, epoch=9, replica_id="r2") == 4
    assert [(v.version, v.batch, v.epoch, v.replica) for v in batch_versions(table)] == [
        (0, 0, 7, "r1"), (1, 1, 7, "r1"), (2, 2, 7, ""), (3, 3, 7, ""), (4, 4, 9, "r2")]
    assert len(_ids(table)) == 2 + 2 + 3 + 3 + 1


def test_a_table_begun_anew_under_the_same_path_is_not_written_through_an_old_handle(tmp_path: Path) -> None:
    """The output moved aside and a new table begun (by another replica, say): this process's open handle on
    the old table must not write the new one's next version (it would skip its versions)."""
    table = tmp_path / "table"
    for batch in (0, 1, 2):
        _part(table, batch, 1)
        publish_batch(table, batch, epoch=7, replica_id="r1")
    table.rename(tmp_path / "table-aside")
    _part(table, 3, 1)
    assert publish_batch(table, 3, epoch=9, replica_id="r2") == 0  # the new table's first version
    _part(table, 4, 1)
    assert publish_batch(table, 4, epoch=9, replica_id="r2") == 1
    assert [v.batch for v in batch_versions(table)] == [3, 4]
    assert len(_ids(table)) == 2


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every listing of an output folder a publish makes (its cost grows with every file ever published)."""
    made: list[Path] = []
    names = output._names

    def counted(folder: Path) -> list[str]:
        made.append(folder)
        return names(folder)

    monkeypatch.setattr(output, "_names", counted)
    return made


def test_a_batch_whose_record_names_its_files_is_published_without_listing_the_folder(
        tmp_path: Path, listings: list[Path]) -> None:
    """A batch whose commit record names its part files is published without listing the output folder (a covered batch
    is skipped), while a record without them lists it."""
    table = tmp_path / "table"
    _part(table, 0, 2)
    publish_batch(table, 0, epoch=7, replica_id="r1", parts=["batch-000000000000-part-00000.parquet"])
    listings.clear()
    for batch in (1, 2):
        parts = [_part(table, batch, 2, part=p).name for p in (0, 1)]
        assert publish_batch(table, batch, epoch=7, replica_id="r1", parts=parts) == batch
    assert publish_batch(table, 2, epoch=7, replica_id="r2", parts=parts) is None, "covered: skipped"
    assert listings == []
    assert [v.batch for v in batch_versions(table)] == [0, 1, 2]
    assert len(_ids(table)) == 2 + 4 + 4
    assert publish_batch(table, 3, epoch=7, replica_id="r1") is None  # a record without parts lists instead
    assert listings == [table]


def test_with_named_files_the_folder_is_still_listed_when_the_table_may_have_missed_an_earlier_release_batch(
        tmp_path: Path, listings: list[Path]) -> None:
    """The rolling upgrade of the test above, with the new release's records naming their files: batches 2 and 3
    (renamed by the earlier release) still get their versions before batch 4's."""
    table = tmp_path / "table"
    for batch in (0, 1):
        publish_batch(table, batch, epoch=7, replica_id="r1", parts=[_part(table, batch, 2).name])
    for batch in (2, 3):
        _part(table, batch, 3)
    listings.clear()
    assert publish_batch(table, 4, epoch=9, replica_id="r2", parts=[_part(table, 4, 1).name]) == 4
    assert listings == [table]
    assert [(v.batch, v.epoch, v.replica) for v in batch_versions(table)] == [
        (0, 7, "r1"), (1, 7, "r1"), (2, 7, ""), (3, 7, ""), (4, 9, "r2")]
    assert len(_ids(table)) == 2 + 2 + 3 + 3 + 1


def test_named_files_no_longer_in_the_folder_add_nothing(tmp_path: Path) -> None:
    """The output moved aside between a batch's renames and its Delta step: the new folder has none of its
    files, so the batch adds no version there (as when the folder is listed), and nothing fails."""
    table = tmp_path / "table"
    publish_batch(table, 0, epoch=7, replica_id="r1", parts=[_part(table, 0, 2).name])
    name = _part(table, 1, 2).name
    table.rename(tmp_path / "table-aside")
    table.mkdir()
    assert publish_batch(table, 1, epoch=7, replica_id="r1", parts=[name]) is None
    assert not (table / "_delta_log").exists()


def test_a_named_file_gone_is_refused_unless_the_table_covers_the_batch(tmp_path: Path) -> None:
    """A batch one of whose named part files is gone gets no version (never part of a batch): the error names the
    file; once the table covers the batch (its files since compacted and vacuumed away), nothing is refused."""
    table = tmp_path / "table"
    publish_batch(table, 0, epoch=7, replica_id="r1", parts=[_part(table, 0, 2).name])
    parts = [_part(table, 1, 2, part=p).name for p in (0, 1)]
    (table / parts[1]).unlink()
    with pytest.raises(output.MissingPartError, match=parts[1]):
        publish_batch(table, 1, epoch=7, replica_id="r1", parts=parts)
    assert covered_batch(table) == 0
    _part(table, 1, 2, part=1)  # restored
    assert publish_batch(table, 1, epoch=7, replica_id="r1", parts=parts) == 1
    for name in parts:
        (table / name).unlink()
    assert publish_batch(table, 1, epoch=7, replica_id="r2", parts=parts) is None
