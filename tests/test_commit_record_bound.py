"""A commit record stays under the size ZooKeeper takes, whatever the batch bound (issue 50, item 7).

The record names every file its batch read. Thousands of small files with long names under a bytes bound made
one batch whose record passed ZooKeeper's 1 MiB (``jute.maxbuffer``): the server drops the connection, the
commit's outcome is unknown, and every term after fails the same way. The queue source now stops admitting files
once their names would pass :data:`RECORD_NAMES_BYTES` of the record.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.spark import SparkCareer
from tenure.career.spark._intake import RECORD_NAMES_BYTES, admit, record_bytes
from tenure.career.spark._landing import QueueEntry
from tenure.career.spark._record import MAX_RECORD_BYTES, check_size
from tenure.election import GroupPaths
from tests.test_spark_career import Recorder, assert_exactly_once, drained, leadership, make_config, run_until

pytestmark = pytest.mark.timeout(900)


def _names(count: int, length: int) -> list[QueueEntry]:
    return [QueueEntry(i, f"{i:05d}-{'n' * (length - 12)}.jsonl", 100) for i in range(count)]


@pytest.mark.parametrize(("length", "bound"), [(20, None), (230, None), (230, 1 << 40)], ids=["short", "long",
                                                                                             "long, bytes bound"])
def test_a_batch_admits_files_until_their_names_fill_the_records_share(length: int, bound: int | None) -> None:
    """Whatever the bound in files (none) or bytes, a batch's names take at most RECORD_NAMES_BYTES of its record,
    and the next file would have passed it."""
    listed = _names(20_000, length)
    batch, _ = admit(listed, {f.name for f in listed}, set(), max_files=None, max_bytes=bound)
    used = sum(record_bytes(f.name) for f in batch)
    assert used <= RECORD_NAMES_BYTES < used + record_bytes(listed[len(batch)].name)
    assert len(json.dumps([f.name for f in batch], separators=(",", ":"))) <= RECORD_NAMES_BYTES


def test_one_file_is_admitted_whatever_its_name() -> None:
    """The share never holds a batch back: its first file is admitted, however long its name."""
    (only,) = _names(1, 250)
    assert admit([only], {only.name}, set(), max_files=None, max_bytes=None)[0] == [only]


def test_a_record_over_what_zookeeper_takes_is_refused_before_the_commit() -> None:
    """A record the bound did not keep small (thousands of part files) fails its batch with the size and the fix,
    rather than a commit ZooKeeper drops."""
    record: dict[str, Any] = {"batch_id": 7, "parts": {"table": [f"batch-000000000007-part-{i:05d}-{'u' * 60}.parquet"
                                                                 for i in range(15_000)]}, "files": ["a.jsonl"]}
    with pytest.raises(Exception, match="Lower --shuffle-partitions") as refused:
        check_size(record)
    assert f"{MAX_RECORD_BYTES}" in str(refused.value) and "15000 part files" in str(refused.value)


def test_thousands_of_small_files_with_long_names_under_a_bytes_bound_commit_in_several_batches(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """5 000 one-line files of 230-character names (1.16 MB of names), read under a bytes bound that admits them
    all at once: the group commits them in several batches on the real ensemble, each record within the names'
    share and a few KiB more (a quarter of ZooKeeper's limit), and every record is written once."""
    root = tmp_path / "data"
    landing = root / "landing"
    landing.mkdir(parents=True)
    base = time.time() - 3600
    for i, file in enumerate(_names(5_000, 230)):
        path = landing / file.name
        path.write_text(json.dumps({"id": f"id-{i}", "key": f"k{i % 7}", "seq": i, "ts": i, "payload": i}) + "\n")
        os.utime(path, (base + i / 1000, base + i / 1000))
    sizes: list[int] = []  # the records ZooKeeper holds, as a watch sees them

    def watch(data: bytes | None, _stat: Any) -> None:
        if data:
            sizes.append(len(data))

    observer = Recorder()
    career = SparkCareer(make_config(root, max_files_per_trigger=None, max_bytes_per_trigger=1 << 40), observer,
                         replica_id="r1")
    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx):
            career.inaugurate(ctx)
            zk_client.DataWatch(GroupPaths(zk_group).commit, watch)
            run_until(career, drained(root), timeout_s=600)
            career.hand_over(Outcome.CLEAN)
    finally:
        career.close()
    report = assert_exactly_once(root)
    assert report.ids_in == 5_000
    assert observer.outcomes().count("committed") >= 5, observer.outcomes()
    assert sizes and max(sizes) <= RECORD_NAMES_BYTES + (8 << 10), sizes  # the names' share and the rest
