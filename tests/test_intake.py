"""The queue source takes files in production order and skips none by its own rules (``tenure.career.spark._intake``).

The order contract: files are consumed in (modification time, name) order, so a producer that renames its files
into ``landing/`` one after another, named in the order it wrote them, needs no sleep between them. Spark's own
file source split same-millisecond files by listing order (a third of a fast producer's records went to
``late``), ignored every file more than ``maxFileAge`` older than the newest one, and skipped a name it had seen.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.spark import SparkCareer
from tenure.career.spark._intake import QueueFile, admit, batch_offset
from tenure.career.spark._marks import ConsumptionMarks
from tenure.career.spark._storage import Layout, archive_files
from tenure.service.local import Topology
from tenure.service.ops import verify
from tenure.service.replica import ReplicaSpec
from tests.test_order import consumed, inversions, line, published
from tests.test_spark_career import Recorder, leadership, make_config, run_until, shift_checkpoint_clock

# -- the admission rule, pure ----------------------------------------------------------------------------------


def _files(*specs: tuple[str, int, int]) -> list[QueueFile]:
    return [QueueFile(mtime, name, size) for name, mtime, size in specs]


def test_files_are_admitted_by_mtime_then_name_and_the_bound_splits_anywhere() -> None:
    """Queue files are admitted in (modification time, name) order, and the file bound cuts a batch anywhere in that
    order: the next batch starts where the last one stopped."""
    listed = _files(("b", 5, 1), ("a", 5, 1), ("c", 4, 1), ("d", 9, 1))
    names = {f.name for f in listed}
    batch, _ = admit(listed, names, set(), {}, max_files=2, max_bytes=None)
    assert [f.name for f in batch] == ["c", "a"]
    batch, _ = admit(listed, names, {"c", "a"}, {}, max_files=2, max_bytes=None)
    assert [f.name for f in batch] == ["b", "d"]


def test_a_file_the_first_listing_missed_holds_back_every_file_after_it() -> None:
    """'b' appeared between the two listings: 'a' (before it) is admitted, 'c' (after it) waits, even though the
    first listing held 'c' — a scan may miss an earlier rename and see a later one."""
    listed = _files(("a", 1, 1), ("b", 2, 1), ("c", 3, 1))
    batch, _ = admit(listed, {"a", "c"}, set(), {}, max_files=None, max_bytes=None)
    assert [f.name for f in batch] == ["a"]


def test_bytes_bound_takes_at_least_one_file_and_empty_files_are_left_out() -> None:
    """The bytes bound admits at least one file, however big, and empty files are left out (they hold no record)."""
    listed = _files(("big", 1, 100), ("empty", 2, 0), ("small", 3, 10))
    names = {f.name for f in listed}
    assert [f.name for f in admit(listed, names, set(), {}, max_files=None, max_bytes=50)[0]] == ["big"]
    assert [f.name for f in admit(listed, names, {"big"}, {}, max_files=None, max_bytes=50)[0]] == ["small"]


def test_a_marked_file_is_skipped_unless_it_is_newer_than_its_mark() -> None:
    """A file consumed before (its consumption mark carries its mtime) is skipped, unless it is newer than its mark: a
    new file under a used name is read again, and reported as reused."""
    listed = _files(("old", 10, 1), ("reused", 30, 1))
    names = {f.name for f in listed}
    batch, reused = admit(listed, names, set(), {"old": 10, "reused": 20}, max_files=None, max_bytes=None)
    assert [f.name for f in batch] == ["reused"] and reused == ["reused"]


def test_a_mark_carries_its_files_mtime_and_moves_on_when_the_name_is_used_again(tmp_path: Path) -> None:
    """A consumption mark carries its queue file's mtime; marking a newer file of the same name moves the mark to the
    new mtime (counted as no new mark)."""
    layout = Layout(tmp_path / "data")
    layout.landing.mkdir(parents=True)
    queue_file = layout.landing / "a.jsonl"
    queue_file.write_bytes(b"x\n")
    os.utime(queue_file, ns=(1_000_000_000, 1_000_000_000))
    marks = ConsumptionMarks(layout, "g")
    assert marks.mark(["a.jsonl"]) == 1
    mark = layout.queue.marks("g") / "a.jsonl"
    assert mark.stat().st_mtime_ns == 1_000_000_000
    os.utime(queue_file, ns=(5_000_000_000, 5_000_000_000))  # a new file under the same name
    assert marks.mark(["a.jsonl"]) == 0
    assert mark.stat().st_mtime_ns == 5_000_000_000


# -- the consumer, on the shared ZooKeeper and SparkSession ------------------------------------------------------


@pytest.mark.parametrize("per_trigger", [1, 3])
def test_files_of_one_mtime_all_reach_the_table_in_order(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, per_trigger: int
) -> None:
    """16 files with one identical mtime, seqs contiguous per key across files in name order: every record is
    written, none late, no key inverted, whatever the batch bound."""
    root = tmp_path / "data"
    landing = root / "landing"
    landing.mkdir(parents=True)
    stamp = time.time() - 100
    ids: set[str] = set()
    seqs = {f"k{k}": 0 for k in range(3)}
    for f in range(16):
        lines = []
        for i in range(12):
            key = f"k{i % 3}"
            seqs[key] += 1
            lines.append(line(key, seqs[key]))
            ids.add(f"{key}-{seqs[key]}")
        hidden = landing / f".f-{f:03d}.jsonl"
        hidden.write_bytes(b"\n".join(lines) + b"\n")
        os.utime(hidden, (stamp, stamp))
        hidden.rename(landing / f"f-{f:03d}.jsonl")
    observer = Recorder()
    career = SparkCareer(make_config(root, max_files_per_trigger=per_trigger), observer, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, lambda: consumed(root) and observer.total("written") + observer.total("late") == len(ids))
        career.hand_over(Outcome.CLEAN)
    career.close()
    table = published(root)
    assert not inversions(table), inversions(table)[:5]
    assert observer.total("late") == 0
    assert {r["id"] for r in table} == ids and len(table) == len(ids)
    assert observer.outcomes().count("committed") >= -(-16 // per_trigger), "the bound was not applied"


def _put(landing: Path, name: str, lines: list[bytes], mtime: float | None = None) -> int:
    """Write a queue file as a producer does (hidden name, then rename); returns its mtime in ns."""
    hidden = landing / f".{name}"
    hidden.write_bytes(b"\n".join(lines) + b"\n")
    if mtime is not None:
        os.utime(hidden, (mtime, mtime))
    stamp = hidden.stat().st_mtime_ns
    hidden.rename(landing / name)
    return stamp


def test_a_file_from_the_future_and_a_name_used_again_are_both_consumed(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A file stamped 30 days ahead does not hide the files stamped now (Spark's file source ignored every file
    more than 7 days older than its newest); a name used again after its file was consumed and archived is a
    new file (Spark's file source skipped it as seen)."""
    root = tmp_path / "data"
    landing = root / "landing"
    landing.mkdir(parents=True)
    _put(landing, "future.jsonl", [line("f", 1)], mtime=time.time() + 30 * 86400)
    _put(landing, "a.jsonl", [line("a", 1), line("a", 2)])
    observer = Recorder()
    career = SparkCareer(make_config(root), observer, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, lambda: consumed(root) and observer.total("written") == 3)
        _put(landing, "now.jsonl", [line("n", 1)])
        run_until(career, lambda: consumed(root) and observer.total("written") == 4)
        _put(landing, "a.jsonl", [line("a", 3), line("a", 4)])  # the same name, a new file
        run_until(career, lambda: consumed(root) and observer.total("written") == 6)
        career.hand_over(Outcome.CLEAN)
    career.close()
    assert sorted(r["id"] for r in published(root)) == ["a-1", "a-2", "a-3", "a-4", "f-1", "n-1"]


def test_a_name_used_again_while_another_group_holds_the_file_is_read_and_logged(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A slower group keeps a consumed file in landing/ (this group has marked it); the producer then writes a new
    file under that name. The new file is newer than the mark: it is read once, and its batch's offset names it
    as reused (the batch writer logs ``queue_name_reused`` from there)."""
    root = tmp_path / "data"
    landing = root / "landing"
    landing.mkdir(parents=True)
    _put(landing, "a.jsonl", [line("a", 1)], mtime=time.time() - 60)
    observer = Recorder()
    career = SparkCareer(make_config(root), observer, replica_id="r1", registered_groups=lambda: {"slow"})
    marks = root / "consumed" / "default"
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, lambda: observer.total("written") == 1)
        _put(landing, "b.jsonl", [line("b", 1)], mtime=time.time() - 30)  # its batch marks a.jsonl consumed
        run_until(career, lambda: observer.total("written") == 2 and (marks / "a.jsonl").exists())
        assert (landing / "a.jsonl").exists(), "the slow group has not consumed it: it stays"
        _put(landing, "a.jsonl", [line("a", 2)])
        run_until(career, lambda: observer.total("written") == 3)
        career.hand_over(Outcome.CLEAN)
    career.close()
    assert sorted(r["id"] for r in published(root)) == ["a-1", "a-2", "b-1"]
    checkpoint = max((root / "checkpoint").iterdir(), key=lambda p: p.name)
    offsets = [batch_offset(checkpoint, b) for b in sorted(int(p.name) for p in (checkpoint / "offsets").iterdir()
                                                           if p.name.isdigit())]
    planned = [o for i, o in enumerate(offsets) if o["files"] and (i == 0 or o != offsets[i - 1])]  # no-data: same
    assert [o["reused"] for o in planned] == [[], [], ["a.jsonl"]]  # a.jsonl, b.jsonl, then a.jsonl again


def test_a_name_used_again_is_archived_beside_the_first_file(tmp_path: Path) -> None:
    """The archive is the audit trail: a second file under a used name must not replace the first one there."""
    layout = Layout(tmp_path)
    layout.landing.mkdir(parents=True)
    _put(layout.landing, "a.jsonl", [line("a", 1)])
    assert archive_files(layout, ["a.jsonl"], now=1_000.0) == 1
    stamp = _put(layout.landing, "a.jsonl", [line("a", 2)])
    assert archive_files(layout, ["a.jsonl"], now=2_000.0) == 1
    assert archive_files(layout, ["a.jsonl"], now=3_000.0) == 0, "moved already: nothing to do"
    assert sorted(p.name for p in layout.archive.iterdir()) == ["a.jsonl", f"a~{stamp}.jsonl"]
    assert b'"a-1"' in (layout.archive / "a.jsonl").read_bytes()
    assert b'"a-2"' in (layout.archive / f"a~{stamp}.jsonl").read_bytes()
    # A third file under the name, stamped in the same tick as the second (a coarse file-system clock).
    hidden = layout.landing / ".a.jsonl"
    hidden.write_bytes(line("a", 3) + b"\n")
    os.utime(hidden, ns=(stamp, stamp))
    hidden.rename(layout.landing / "a.jsonl")
    assert archive_files(layout, ["a.jsonl"], now=4_000.0) == 1
    assert sorted(p.name for p in layout.archive.iterdir()) == ["a.jsonl", f"a~{stamp}-2.jsonl", f"a~{stamp}.jsonl"]
    assert b'"a-2"' in (layout.archive / f"a~{stamp}.jsonl").read_bytes(), "the second file is still there"
    assert b'"a-3"' in (layout.archive / f"a~{stamp}-2.jsonl").read_bytes()


def test_an_admitted_queue_file_that_is_gone_fails_its_batch_with_the_fix(tmp_path: Path) -> None:
    """A file a batch's offset names but someone removed from landing/ fails the batch (never skipped: its
    records would be lost) with one line that names the file and the fix; both readers of a file say so."""
    from tenure.career.spark._intake import _Files, _Reader
    from tenure.career.spark._pipeline import _read_queue_file

    gone = tmp_path / "landing" / "p-1.jsonl"
    reader = _Reader({"path": str(gone.parent), "marks": str(tmp_path / "consumed")})
    with pytest.raises(FileNotFoundError, match=r"queue file .*p-1\.jsonl was admitted to this batch but is gone.*"
                                                r"put it back"):
        list(reader.read(_Files([str(gone)], None)))
    with pytest.raises(FileNotFoundError, match=r"p-1\.jsonl was admitted to this batch but is gone"):
        _read_queue_file(gone.as_uri())


# -- a real replica and a fast producer ---------------------------------------------------------------------------


@pytest.mark.fleet
@pytest.mark.timeout(600)
def test_a_fast_producer_loses_nothing_to_late(tmp_path: Path) -> None:
    """The case from the field: one replica at two files per trigger; a producer writes 60 files of 40 records
    back to back (hidden name, then rename; names in production order; each key's seq contiguous across files),
    so most files share a millisecond with another. All 2 400 records are written in order, none late."""
    topology = Topology(tmp_path, replicas=1, zk_servers=1, spec=ReplicaSpec(max_files_per_trigger=2))
    topology.start()
    try:
        topology.wait_for_leader(300)
        landing = topology.data_root / "landing"
        seqs: dict[str, int] = {}
        stamps = []
        for f in range(60):
            lines = []
            for i in range(40):
                key = f"k{(f * 40 + i) % 7}"
                seqs[key] = seqs.get(key, 0) + 1
                lines.append(json.dumps({"id": f"{key}-{seqs[key]}", "key": key, "seq": seqs[key], "ts": f,
                                         "payload": {"f": f}}).encode())
            stamps.append(_put(landing, f"p-{f:05d}.jsonl", lines) // 1_000_000)
        ties = len(stamps) - len(set(stamps))

        def drained() -> bool:
            report = verify(topology.data_root)
            return report.unaccounted == 0 and report.ids_in == 2400

        topology.wait_for(drained, 180, "the 2 400 records to be consumed", interval_s=1.0)
    finally:
        topology.stop()
    report = verify(topology.data_root)
    assert report.ok, report.render()
    assert report.ids_written == 2400 and report.ids_late == 0, report.render()
    assert ties > 0, "no two files shared a millisecond: the test proved nothing"
    assert not inversions(published(topology.data_root))


def _shift_group_clock(zk_hosts: str, group: str, root: Path, ahead_s: float) -> None:
    """Rewrite what the last term left as a leader whose wall clock ran ``ahead_s`` ahead, and that seeded the
    group's clock, writes it: the checkpoint's batch timestamp, watermark and offset clocks, and the commit
    record's clock."""
    newest = max((root / "checkpoint").iterdir(), key=lambda p: p.name)
    shift_checkpoint_clock(newest, ahead_ms=int(ahead_s * 1000), window_ms=2 * 60_000)
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=30)
    try:
        path = f"/tenure/{group}/commit"
        data, stat = client.get(path)
        record = json.loads(data)
        record["clock"] += ahead_s
        client.set(path, json.dumps(record).encode(), version=stat.version)
    finally:
        client.stop()
        client.close()


@pytest.mark.fleet
@pytest.mark.timeout(600)
def test_replicas_after_a_leader_ten_minutes_ahead_consume_a_future_file_and_a_reused_name(tmp_path: Path) -> None:
    """Through ``tenure run`` processes: a first term consumes a file stamped 30 days ahead and ``a.jsonl``
    (Spark's file source ignored every file more than 7 days older than its newest). The replica stops; what its
    term left is rewritten as a leader whose clock ran 10 minutes ahead writes it. A new replica process on the
    true clock then leads, and reads a new file and a new ``a.jsonl`` (the file source skipped a name it had
    seen; a successor behind the previous watermark had Spark drop every row). Everything is written once."""
    topology = Topology(tmp_path, replicas=1, zk_servers=1)
    landing = topology.data_root / "landing"

    def written(count: int) -> Callable[[], bool]:
        def check() -> bool:
            report = verify(topology.data_root)
            return report.ids_written == count and report.unaccounted == 0 and not any(landing.iterdir())
        return check

    topology.start()
    try:
        topology.wait_for_leader(300)
        _put(landing, "future.jsonl", [line("f", 1)], mtime=time.time() + 30 * 86400)
        _put(landing, "a.jsonl", [line("a", 1), line("a", 2)])
        topology.wait_for(written(3), 180, "the first term to consume both files", interval_s=1.0)
        assert topology.replica("replica-1").stop(30) == 0
        _shift_group_clock(topology.ensemble.connect_string, topology.group, topology.data_root, ahead_s=600)
        topology.restart("replica-1")
        topology.wait_for_leader(300)
        _put(landing, "now.jsonl", [line("n", 1)])
        _put(landing, "a.jsonl", [line("a", 3), line("a", 4)])  # the same name, a new file
        topology.wait_for(written(6), 180, "the successor to consume the new files", interval_s=1.0)
    finally:
        topology.stop()
    report = verify(topology.data_root)
    assert report.ok and report.ids_late == 0, report.render()
    assert sorted(r["id"] for r in published(topology.data_root)) == ["a-1", "a-2", "a-3", "a-4", "f-1", "n-1"]
