"""The queue source takes files in production order and skips none by its own rules (``tenure.career.spark._intake``).

The order contract: files are consumed in (modification time, name) order, so a producer that renames its files
into ``landing/`` one after another, named in the order it wrote them, needs no sleep between them. Spark's own
file source split same-millisecond files by listing order (a third of a fast producer's records went to
``late``), ignored every file more than ``maxFileAge`` older than the newest one, and skipped a name it had seen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from kazoo.client import KazooClient

from tenure.career import FailedBatch, Outcome
from tenure.career.lifecycle import STALLED
from tenure.career.queue import FileIdentity
from tenure.career.spark import SparkCareer
from tenure.career.spark._archive import archive_files
from tenure.career.spark._intake import admit, batch_files, batch_offset
from tenure.career.spark._landing import QueueEntry, waiting
from tenure.career.spark._layout import Layout
from tenure.career.spark._marks import ConsumptionMarks
from tenure.career.spark._query import source_stream
from tenure.career.spark._session import use_driver_python
from tenure.service.local import ReplicaLaunch, Topology
from tenure.service.ops import verify
from tenure.service.replica import ReplicaSpec
from tests._replicas import replica_events
from tests.test_order import consumed, inversions, line, published
from tests.test_spark_career import Recorder, leadership, make_config, run_until, shift_checkpoint_clock

# -- the admission rule, pure ----------------------------------------------------------------------------------


def _files(*specs: tuple[str, int, int]) -> list[QueueEntry]:
    return [QueueEntry(mtime, name, size, ino=i) for i, (name, mtime, size) in enumerate(specs, start=1)]


def test_files_are_admitted_by_mtime_then_name_and_the_bound_splits_anywhere() -> None:
    """Queue files are admitted in (modification time, name) order, and the file bound cuts a batch anywhere in that
    order: the next batch starts where the last one stopped."""
    listed = _files(("b", 5, 1), ("a", 5, 1), ("c", 4, 1), ("d", 9, 1))
    names = {f.name for f in listed}
    batch, _ = admit(listed, names, set(), max_files=2, max_bytes=None)
    assert [f.name for f in batch] == ["c", "a"]
    batch, _ = admit([f for f in listed if f.name not in {"c", "a"}], names, set(), max_files=2, max_bytes=None)
    assert [f.name for f in batch] == ["b", "d"]


def test_a_file_the_first_listing_missed_holds_back_every_file_after_it() -> None:
    """'b' appeared between the two listings: 'a' (before it) is admitted, 'c' (after it) waits, even though the
    first listing held 'c' — a scan may miss an earlier rename and see a later one."""
    listed = _files(("a", 1, 1), ("b", 2, 1), ("c", 3, 1))
    batch, _ = admit(listed, {"a", "c"}, set(), max_files=None, max_bytes=None)
    assert [f.name for f in batch] == ["a"]


def test_bytes_bound_takes_at_least_one_file_and_empty_files_are_admitted_like_any() -> None:
    """The bytes bound takes whole files, always one; an empty file is an entry like any other (it weighs
    nothing), and so is a refused one."""
    listed = [*_files(("big", 1, 100), ("empty", 2, 0), ("small", 3, 10)),
              QueueEntry(4, "folder", 4096, ino=9, refused="not_a_file", detail="a folder")]
    names = {f.name for f in listed}
    assert [f.name for f in admit(listed, names, set(), max_files=None, max_bytes=50)[0]] == ["big"]
    assert [f.name for f in admit(listed[1:], names, set(), max_files=None, max_bytes=50)[0]] == [
        "empty", "small", "folder"]


def test_a_marked_file_waits_only_while_its_mark_is_its_identity() -> None:
    """An entry is consumed while the mark under its name holds its identity (inode, size, time); any other file
    under the name is new — a newer one, one with an older time (``cp -p``), one of another size or inode at the
    same time — and is admitted, listed as reused. A mark of an earlier release (a time alone) covers a file no
    newer than it, as that release read it."""
    listed = _files(("same", 10, 1), ("newer", 30, 1), ("older", 5, 1), ("grown", 10, 2), ("other", 10, 1),
                    ("legacy", 10, 1))
    ino = {f.name: f.ino for f in listed}
    marks = {"same": FileIdentity(ino["same"], 1, 10), "newer": FileIdentity(ino["newer"], 1, 20),
             "older": FileIdentity(ino["older"], 1, 10), "grown": FileIdentity(ino["grown"], 1, 10),
             "other": FileIdentity(999, 1, 10), "legacy": FileIdentity(None, None, 10)}
    left = waiting(listed, marks)
    assert sorted(f.name for f in left) == ["grown", "newer", "older", "other"]
    batch, reused = admit(left, {f.name for f in listed}, set(marks), max_files=None, max_bytes=None)
    assert sorted(reused) == ["grown", "newer", "older", "other"] and len(batch) == 4


def test_a_mark_holds_the_admitted_identity_and_moves_on_when_the_name_is_used_again(tmp_path: Path) -> None:
    """A mark holds the identity its batch admitted, not the file found when marking; a file since then under the
    name is not covered (the source reads it as new) until a batch marks it in turn."""
    from tenure.career.queue import mark_covers, read_mark

    layout = Layout(tmp_path / "data")
    layout.landing.mkdir(parents=True)
    queue_file = layout.landing / "a.jsonl"
    queue_file.write_bytes(b"x\n")
    os.utime(queue_file, ns=(1_000_000_000, 1_000_000_000))
    admitted = FileIdentity.of(queue_file.stat())
    with queue_file.open("ab") as appended:  # changed after its batch read it
        appended.write(b"y\n")
    marks = ConsumptionMarks(layout, "g")
    assert marks.mark([("a.jsonl", admitted)]) == 1
    mark = layout.queue.marks("g") / "a.jsonl"
    assert read_mark(mark) == admitted and mark.stat().st_mtime_ns == 1_000_000_000
    now = FileIdentity.of(queue_file.stat())
    assert not mark_covers(read_mark(mark), now)
    assert marks.mark([("a.jsonl", admitted)]) == 0, "the same mark again: nothing written"
    assert marks.mark([("a.jsonl", now)]) == 1
    assert mark_covers(read_mark(mark), now)


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


@pytest.mark.parametrize("offset_ns", [None, 0, -(10**9)], ids=["newer", "same_time", "older_time"])
def test_a_name_used_again_while_another_group_holds_the_file_is_read_and_logged(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, offset_ns: int | None
) -> None:
    """A slower group keeps a consumed file in landing/ (this group has marked it); the producer then writes a new
    file under that name: newer, or stamped with the first one's time (a clock of whole seconds), or an older one
    (``cp -p``). Its identity (inode, size, time) is not the mark's: it is read once, and its batch's offset names
    it as reused (the batch writer logs ``queue_name_reused`` from there). The rule before (newer than the mark)
    skipped the new file unless it was newer."""
    root = tmp_path / "data"
    landing = root / "landing"
    landing.mkdir(parents=True)
    at = _put(landing, "a.jsonl", [line("a", 1)], mtime=time.time() - 60)
    observer = Recorder()
    career = SparkCareer(make_config(root), observer, replica_id="r1", registered_groups=lambda: {"slow"})
    marks = root / "consumed" / "default"
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, lambda: observer.total("written") == 1)
        _put(landing, "b.jsonl", [line("b", 1)], mtime=time.time() - 30)  # its batch marks a.jsonl consumed
        run_until(career, lambda: observer.total("written") == 2 and (marks / "a.jsonl").exists())
        assert (landing / "a.jsonl").exists(), "the slow group has not consumed it: it stays"
        _replace(landing / "a.jsonl", [line("a", 2), line("a", 3)], time.time_ns() if offset_ns is None
                 else at + offset_ns)
        run_until(career, lambda: observer.total("written") == 4, timeout_s=60)
        career.hand_over(Outcome.CLEAN)
    career.close()
    assert sorted(r["id"] for r in published(root)) == ["a-1", "a-2", "a-3", "b-1"]
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
    assert archive_files(layout.queue, ["a.jsonl"], now=1_000.0) == 1
    stamp = _put(layout.landing, "a.jsonl", [line("a", 2)])
    assert archive_files(layout.queue, ["a.jsonl"], now=2_000.0) == 1
    assert archive_files(layout.queue, ["a.jsonl"], now=3_000.0) == 0, "moved already: nothing to do"
    assert sorted(p.name for p in layout.archive.iterdir()) == ["a.jsonl", f"a~{stamp}.jsonl"]
    assert b'"a-1"' in (layout.archive / "a.jsonl").read_bytes()
    assert b'"a-2"' in (layout.archive / f"a~{stamp}.jsonl").read_bytes()
    # A third file under the name, stamped in the same tick as the second (a coarse file-system clock).
    hidden = layout.landing / ".a.jsonl"
    hidden.write_bytes(line("a", 3) + b"\n")
    os.utime(hidden, ns=(stamp, stamp))
    hidden.rename(layout.landing / "a.jsonl")
    assert archive_files(layout.queue, ["a.jsonl"], now=4_000.0) == 1
    assert sorted(p.name for p in layout.archive.iterdir()) == ["a.jsonl", f"a~{stamp}-2.jsonl", f"a~{stamp}.jsonl"]
    assert b'"a-2"' in (layout.archive / f"a~{stamp}.jsonl").read_bytes(), "the second file is still there"
    assert b'"a-3"' in (layout.archive / f"a~{stamp}-2.jsonl").read_bytes()


# -- odd entries, changed files, empty files: every entry leaves landing/, none stops the group ----------------


def _stamped(path: Path, at: float) -> None:
    """Set an entry's own modification time (a symbolic link's, not its target's): its place in the order."""
    os.utime(path, (at, at), follow_symlinks=False)


class _OnBatch(Recorder):
    """A Recorder that calls ``act(batch_id)`` as each batch starts: after its planning, before its reading."""

    def __init__(self, act: Callable[[int], None]) -> None:
        super().__init__()
        self._act = act

    def batch_started(self, batch_id: int) -> None:
        super().batch_started(batch_id)
        self._act(batch_id)


def test_entries_that_cannot_be_read_are_quarantined_each_on_its_own_and_the_group_goes_on(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """Between two good files, ``landing/`` holds a folder ``df.write.json`` made under a queue name, a dangling
    symbolic link, a file whose name is not UTF-8, and a file moved away after its batch was planned. One entry
    per batch: each odd one is quarantined alone (line 0, its reason), every batch commits, both good files are
    written, ``landing/`` drains (the odd entries go to archive/ with the rest) and ``tenure verify`` agrees (the
    readable file under the bad name is refused, not lost). Before, the folder's batch failed on every attempt."""
    root = tmp_path / "data"
    landing = root / "landing"
    landing.mkdir(parents=True)
    base = time.time() - 600
    _put(landing, "a.jsonl", [line("a", 1), line("a", 2)], mtime=base)
    spark.createDataFrame([("x", 1)], "id STRING, n INT").write.json(str(landing / "folder.jsonl"))
    _stamped(landing / "folder.jsonl", base + 1)
    (landing / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    _stamped(landing / "dangling.jsonl", base + 2)
    odd_name = os.fsdecode(b"latin-\xe9t\xe9.jsonl")
    _put(landing, odd_name, [line("o", 1)], mtime=base + 3)
    _put(landing, "gone.jsonl", [line("g", 1)], mtime=base + 4)
    _put(landing, "z.jsonl", [line("z", 1)], mtime=base + 5)
    moved = tmp_path / "moved-away.jsonl"
    checkpoint: list[Path] = []

    def move_gone_away(batch_id: int) -> None:
        if (landing / "gone.jsonl").exists() and "gone.jsonl" in batch_files(checkpoint[0], batch_id):
            (landing / "gone.jsonl").rename(moved)

    observer = _OnBatch(move_gone_away)
    career = SparkCareer(make_config(root, max_files_per_trigger=1), observer, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        checkpoint.append(Layout(root).term_checkpoint(ctx.epoch))
        career.inaugurate(ctx)
        run_until(career, lambda: not any(landing.iterdir()) and observer.total("written") == 3)
        career.hand_over(Outcome.CLEAN)
    career.close()
    assert moved.exists() and "failed" not in observer.outcomes(), observer.outcomes()
    assert sorted(r["id"] for r in published(root)) == ["a-1", "a-2", "z-1"]
    refused = {(r["source_file"].rsplit("/", 1)[-1], r["line"], r["reason"]) for r in published(root, "quarantine")}
    assert refused == {("folder.jsonl", 0, "not_a_file"), ("dangling.jsonl", 0, "dangling_symlink"),
                       ("latin-%E9t%E9.jsonl", 0, "name_not_utf8"), ("gone.jsonl", 0, "gone")}
    assert sorted(os.fsencode(p.name) for p in (root / "archive").iterdir()) == sorted(
        [b"a.jsonl", b"dangling.jsonl", b"folder.jsonl", b"latin-\xe9t\xe9.jsonl", b"z.jsonl"])
    report = verify(root)
    assert report.ok and report.entries_refused == 4 and report.ids_refused == 1, report.render()


def test_a_poison_batch_holding_a_folder_is_set_aside_all_the_same(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """The set-aside of a whole poison batch (its split failed too) runs the batch's entries through the reader
    again and keeps their files: a folder among them is refused there too, and named in the manifest's ``not_kept``.
    The batch is set aside, the next one is written, and ``tenure verify`` agrees. Before, reading the folder failed
    the set-aside as it had failed the batch: the group stopped for good."""
    root = tmp_path / "data"
    landing = root / "landing"
    landing.mkdir(parents=True)
    base = time.time() - 600
    _put(landing, "a.jsonl", [line("a", 1), line("a", 2)], mtime=base)
    (landing / "folder.jsonl").mkdir()
    _stamped(landing / "folder.jsonl", base + 1)
    observer = Recorder()
    career = SparkCareer(make_config(root), observer, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        poison = FailedBatch(0, 3, "ValueError: poison", split_failed=True)
        career.inaugurate(dataclasses.replace(ctx, set_aside=poison))
        run_until(career, lambda: "set_aside" in observer.outcomes() and not any(landing.iterdir()))
        _put(landing, "b.jsonl", [line("b", 1)])
        run_until(career, lambda: observer.total("written") == 1 and not any(landing.iterdir()))
        career.hand_over(Outcome.CLEAN)
    career.close()
    manifest = json.loads(next((root / "set-aside").glob("batch-*-manifest.json")).read_text())
    assert (manifest["files"], manifest["not_kept"], manifest["records"]) == (
        ["a.jsonl"], {"folder.jsonl": "not a regular file"}, 2)
    report = verify(root)
    assert report.ok and report.ids_set_aside == 2 and report.ids_written == 1, report.render()


def _rewrite(path: Path, lines: list[bytes], mtime_ns: int) -> None:
    """Rewrite ``path`` in place (the same inode, as ``cp -p`` over it does) and set ``mtime_ns`` back on it."""
    with path.open("r+b") as handle:
        handle.truncate(0)
        handle.write(b"".join(raw + b"\n" for raw in lines))
    os.utime(path, ns=(mtime_ns, mtime_ns))


def _append(path: Path, lines: list[bytes]) -> None:
    """Append ``lines`` to ``path`` in place."""
    with path.open("ab") as handle:
        handle.write(b"".join(raw + b"\n" for raw in lines))


def _replace(path: Path, lines: list[bytes], mtime_ns: int) -> None:
    """Put a new file under ``path``'s name (renamed over it, as a producer does) with ``mtime_ns``."""
    hidden = path.with_name(f".{path.name}.new")
    hidden.write_bytes(b"".join(raw + b"\n" for raw in lines))
    os.utime(hidden, ns=(mtime_ns, mtime_ns))
    hidden.replace(path)


_CHANGES: dict[str, Callable[[Path, int], None]] = {
    # Appended in place after the batch read it: the mark used to take the new time, so the new lines were skipped.
    "appended": lambda path, _at: _append(path, [line("a", 3)]),
    # A new file renamed over the name, stamped with the first one's time (a clock of whole seconds).
    "replaced_same_time": lambda path, at: _replace(path, [line("b", 1), line("b", 2)], at),
    # Rewritten in place with an older time (``cp -p`` of an older file over it).
    "rewritten_older_time": lambda path, at: _rewrite(path, [line("c", 1)], at - 10**9),
}


@pytest.mark.parametrize("change", sorted(_CHANGES))
def test_a_file_changed_between_its_read_and_its_mark_is_read_again(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, change: str
) -> None:
    """``a.jsonl`` changes after its batch read it and before the batch is marked consumed. The mark holds the
    identity the batch admitted, not the file found when marking: the file as it is now is new, so a later batch
    reads it, and every record of both versions is written once (repeats dropped). The old mark took the file's
    time at marking: the change was never read."""
    root = tmp_path / "data"
    landing = root / "landing"
    landing.mkdir(parents=True)
    at = _put(landing, "a.jsonl", [line("a", 1), line("a", 2)], mtime=time.time() - 60)
    done: list[str] = []

    def change_once(point: str) -> None:
        if point == "after_stage" and not done:
            done.append(point)
            _CHANGES[change](landing / "a.jsonl", at)

    expected = {"appended": ["a-1", "a-2", "a-3"], "replaced_same_time": ["a-1", "a-2", "b-1", "b-2"],
                "rewritten_older_time": ["a-1", "a-2", "c-1"]}[change]
    observer = Recorder()
    career = SparkCareer(make_config(root), observer, replica_id="r1", faults=change_once)
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, lambda: sorted({r["id"] for r in published(root)}) == expected and consumed(root),
                  timeout_s=90)
        career.hand_over(Outcome.CLEAN)
    career.close()
    assert sorted(r["id"] for r in published(root)) == expected, "written once each"
    report = verify(root)  # a replaced or rewritten file's first lines are no longer in the queue: unexpected
    assert report.lost == report.waiting == report.duplicated == 0, report.render()


def test_a_file_changed_between_its_planning_and_its_read_is_read_as_it_is_now_by_a_later_batch(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """``a.jsonl`` grows after its batch was planned and before the batch reads it: the batch reads none of it (a
    re-run from the offset could not read the same lines: the offset says one line) and logs it; a later batch
    reads the file as it is now, whole. Before, the batch read whatever was there when it ran."""
    root = tmp_path / "data"
    landing = root / "landing"
    landing.mkdir(parents=True)
    _put(landing, "a.jsonl", [line("a", 1)], mtime=time.time() - 60)
    grown: list[int] = []

    def grow_once(batch_id: int) -> None:
        if not grown:
            grown.append(batch_id)
            _append(landing / "a.jsonl", [line("a", 2)])

    observer = _OnBatch(grow_once)
    career = SparkCareer(make_config(root), observer, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, lambda: observer.total("written") == 2 and consumed(root), timeout_s=90)
        career.hand_over(Outcome.CLEAN)
    career.close()
    assert observer.batches[0] == ("committed", {"written": 0, "duplicate": 0, "quarantined": 0})
    assert sorted(r["id"] for r in published(root)) == ["a-1", "a-2"]
    assert verify(root).ok


def test_an_empty_file_from_the_future_and_a_dangling_link_leave_landing_and_the_backlog(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """An empty file stamped a day ahead and a dangling symbolic link: the source admits both (the empty file like
    any file, the link refused), so they leave landing/ and the backlog — what the progress watchdog waits on —
    comes back to 0. Before, the source never admitted either while the backlog counted both, and empty files
    left landing/ only once 2 s older than the wall clock: never, for this one."""
    root = tmp_path / "data"
    landing = root / "landing"
    landing.mkdir(parents=True)
    _put(landing, "a.jsonl", [line("a", 1)], mtime=time.time() - 60)
    (landing / ".empty.jsonl").write_bytes(b"")
    _stamped(landing / ".empty.jsonl", time.time() + 86400)
    (landing / ".empty.jsonl").rename(landing / "empty.jsonl")
    (landing / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    observer = Recorder()
    career = SparkCareer(make_config(root), observer, replica_id="r1")
    with leadership(zk_client, zk_group, "r1") as (_, ctx):
        career.inaugurate(ctx)
        run_until(career, lambda: observer.total("written") == 1 and not any(landing.iterdir())
                  and observer.backlogs[-1:] == [0], timeout_s=60)
        career.hand_over(Outcome.CLEAN)
    career.close()
    assert sorted(p.name for p in (root / "archive").iterdir()) == ["a.jsonl", "dangling.jsonl", "empty.jsonl"]
    assert verify(root).ok


def _python_workers() -> list[psutil.Process]:
    """This process's PySpark Python processes: the daemons, their workers, the data source runners (all under the
    session's JVM, which is this process's child)."""
    found = []
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "python" in process.name() and "pyspark" in " ".join(process.cmdline()):
                found.append(process)
    return found


def _peak_rss_mib(process: psutil.Process) -> float:
    """The process's peak resident memory so far (``VmHWM``), in MiB (0 once it has exited)."""
    try:
        status = Path(f"/proc/{process.pid}/status").read_text()
    except OSError:
        return 0.0
    return next(int(row.split()[1]) for row in status.splitlines() if row.startswith("VmHWM:")) / 1024


def read_one_big_file(spark: Any, folder: Path, *, megabytes: int, line_megabytes: int) -> tuple[float, int]:
    """Read one queue file of ``megabytes`` MiB — lines of ``line_megabytes`` MiB, over the 200-byte line limit,
    then one record — through the consumer's stream (the queue source, classification, dedup) in a query of its
    own; returns the peak resident memory of the Python workers (MiB) and the rows the batch held."""
    layout = Layout(folder / "data")
    layout.landing.mkdir(parents=True)
    hidden = layout.landing / ".big.jsonl"
    chunk = b"x" * (1 << 20)
    with hidden.open("wb") as handle:
        for n in range(megabytes):
            handle.write(chunk[:-1] + b"\n" if (n + 1) % line_megabytes == 0 else chunk)
        handle.write(line("k", 1) + b"\n")
    hidden.rename(layout.landing / "big.jsonl")
    session = spark.newSession()
    use_driver_python(session, "local[2]")
    rows: list[int] = []
    try:
        config = make_config(layout.root)
        query = (source_stream(session, config, layout, sample=False, marks=layout.queue.marks("g"),
                               checkpoint=folder / "checkpoint")
                 .writeStream.foreachBatch(lambda df, _batch: rows.append(df.count()))
                 .option("checkpointLocation", str(folder / "checkpoint")).trigger(availableNow=True).start())
        assert query.awaitTermination(600) and query.exception() is None
    finally:
        (layout.landing / "big.jsonl").unlink()
    return max(_peak_rss_mib(p) for p in _python_workers()), sum(rows)


def test_a_queue_file_larger_than_the_worker_could_hold_is_read_in_bounded_memory(spark: Any, tmp_path: Path) -> None:
    """A 600 MiB queue file of 100 MiB lines goes through the real query: every line is read (six oversized lines
    and a record, each with its file's marker) while no Python worker's peak resident memory reaches half the
    file. Before, the worker read the whole file and split it, holding it twice (1.2 GiB and more)."""
    peak_mib, rows = read_one_big_file(spark, tmp_path, megabytes=600, line_megabytes=100)
    assert rows == 6 + 1 + 1, rows
    assert 0 < peak_mib < 300, f"a Python worker peaked at {peak_mib:.0f} MiB reading a 600 MiB file"


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


_NOBODY = 65534
STALL_S = 10.0
#: Root without the capabilities that let it read and search any file: another user's file of mode 0600 is then
#: EACCES to it, as it is to a replica run as a user of its own (the interpreter here is under /root, 0700).
_NO_DAC = ("setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search")


@pytest.mark.fleet
@pytest.mark.timeout(600)
def test_an_idle_leader_of_another_user_drains_entries_it_cannot_read_and_keeps_its_lock(tmp_path: Path) -> None:
    """One ``tenure run`` replica that may not read other users' files (``_NO_DAC``), its stall timeout and
    first-batch allowance 10 s. Beside a good file, ``landing/`` gets another user's file of mode 0600 (``EACCES``
    for the replica), a folder and a dangling symbolic link under queue names, and an empty file dated a day
    ahead. Each
    entry leaves landing/ (the three it cannot read quarantined, each with its reason); then the idle leader keeps
    its lock, in the same process and term, for three times its stall timeout; ``tenure verify``, run as root,
    agrees (the 0600 file's record refused, not lost). Before, the 0600 file and the folder failed their batch on
    every term, and the backlog counted the link and the empty file, which the source never admitted: the
    watchdog saw input waiting and no batch finishing, and the idle leader gave its lock up every stall timeout."""
    topology = Topology(tmp_path, replicas=1, zk_servers=1, replica_launch={"replica-1": ReplicaLaunch(_NO_DAC)},
                        spec=ReplicaSpec(stall_timeout_s=STALL_S, first_batch_allowance_s=STALL_S))
    landing = topology.data_root / "landing"
    topology.start()
    try:
        leader = topology.wait_for_leader(300)
        replica = topology.replica(leader.replica_id)
        base = time.time() - 60
        _put(landing, "a.jsonl", [line("a", 1)], mtime=base)
        _put(landing, "secret.jsonl", [line("s", 1)], mtime=base + 1)
        (landing / "secret.jsonl").chmod(0o600)
        os.chown(landing / "secret.jsonl", _NOBODY, _NOBODY)
        (landing / "folder.jsonl").mkdir()
        (landing / "dangling.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
        (landing / ".empty.jsonl").write_bytes(b"")
        _stamped(landing / ".empty.jsonl", time.time() + 86400)
        (landing / ".empty.jsonl").rename(landing / "empty.jsonl")
        topology.wait_for(lambda: not any(landing.iterdir()), 120, "every entry to leave landing/", interval_s=0.5)
        pid, epoch = replica.pid, replica.status().epoch
        idle_until = time.monotonic() + 3 * STALL_S
        while time.monotonic() < idle_until:  # the watchdog's rule is checked every second: it must never fire
            assert replica.alive and replica.status().leader, "the idle leader gave its lock up"
            time.sleep(1.0)
        assert (replica.pid, replica.status().epoch) == (pid, epoch)
    finally:
        topology.stop()
    events = replica_events(topology, replica.replica_id)
    assert not [e for e in events if e.get("event") == STALLED], "the idle leader stalled"
    refused = {(r["source_file"].rsplit("/", 1)[-1], r["reason"]) for r in published(topology.data_root, "quarantine")}
    assert refused == {("secret.jsonl", "unreadable"), ("folder.jsonl", "not_a_file"),
                       ("dangling.jsonl", "dangling_symlink")}
    report = verify(topology.data_root)
    assert report.ok and report.ids_written == 1 and report.ids_refused == 1, report.render()
