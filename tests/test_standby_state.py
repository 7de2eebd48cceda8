"""A follower's state kept ready to lead (``--standby-state``, issue 53): the prepared checkpoint copy against a
leader killed mid-batch, against copies that lag the commit or follow a term no longer the newest, and turned off;
on the real file system, and through real careers on the shared ZooKeeper and SparkSession."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.lifecycle import INAUGURATED
from tenure.career.spark import SparkCareer
from tenure.career.spark._checkpoints import PREPARED_PREFIX, PreparedCheckpoint, adopt_checkpoint
from tenure.career.spark._layout import Layout
from tenure.career.spark._prepared import StatePreparer
from tenure.service.local import wait_for
from tests._polling import stays_for
from tests.test_spark_career import (
    Crash,
    Queue,
    Recorder,
    assert_exactly_once,
    drained,
    landing_names,
    leadership,
    make_config,
    run_until,
)

pytestmark = pytest.mark.timeout(900)


def _tree(folder: Path) -> dict[str, int]:
    """Each file under ``folder`` (relative path) and its inode."""
    return {str(Path(d, n).relative_to(folder)): os.stat(Path(d, n)).st_ino
            for d, _dirs, files in os.walk(folder) for n in files}


def _batches(term: Path, first: int, last: int) -> None:
    """Spark's files of batches ``first``..``last`` in a term folder, each written once (a temporary name, then a
    rename), with a state changelog per batch."""
    for sub in ("offsets", "commits", "state/0/0"):
        (term / sub).mkdir(parents=True, exist_ok=True)
    for b in range(first, last + 1):
        for name, text in ((f"offsets/{b}", f"v1\nplan-{b}"), (f"state/0/0/{b + 1}.changelog", f"state-{b}"),
                           (f"commits/{b}", "v1")):
            tmp = term / f"{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, term / name)


def test_a_copy_behind_the_commit_by_several_batches_is_caught_up_to_the_source_file_for_file(tmp_path: Path) -> None:
    """A prepared copy taken at batch 2 while the leader went on to batch 6 (and replaced a state file, as a batch
    re-run after a pause does, and purged old batches): inauguration links only what is new, and the term's folder
    holds exactly the source's files, the same inodes, none the source no longer has."""
    layout = Layout(tmp_path)
    source = layout.term_checkpoint(3)
    _batches(source, 0, 2)
    (source / "metadata").write_text("{}")
    prepared = PreparedCheckpoint(layout, "r2")
    assert prepared.catch_up() == 10 and prepared.source_epoch == 3
    _batches(source, 3, 6)
    (source / "state/0/0/3.changelog.tmp").write_text("state-2, again")  # written again: a new inode
    os.replace(source / "state/0/0/3.changelog.tmp", source / "state/0/0/3.changelog")
    (source / "offsets/0").unlink()  # purged past Spark's retention
    term, copied_from = adopt_checkpoint(layout, 7, prepared=prepared, committed=6)
    assert copied_from == 3 and prepared.verdict == "used"
    assert prepared.linked_at_take == 4 * 3 + 1  # batches 3-6 and the state file written again: nothing else
    assert _tree(term) == _tree(source)
    assert not prepared.folder.exists() and not list(layout.checkpoint.glob(".*partial"))


def test_a_copy_that_follows_a_term_no_longer_the_newest_is_discarded(tmp_path: Path) -> None:
    """A copy taken from term 3, which was then deposed: term 5 took over and committed batch 3, while term 3, a
    paused leader resuming, planned its own batch 3 in its folder. The copy is not used: the new term copies term
    5's folder in full, and holds term 5's batch 3, not the stale term's plan."""
    layout = Layout(tmp_path)
    stale = layout.term_checkpoint(3)
    _batches(stale, 0, 2)
    prepared = PreparedCheckpoint(layout, "r2")
    prepared.catch_up()
    newest, _ = adopt_checkpoint(layout, 5)
    _batches(newest, 3, 3)
    (stale / "offsets/3").write_text("v1\nplan-by-a-zombie")
    prepared_from_stale = prepared.source_epoch
    term, copied_from = adopt_checkpoint(layout, 9, prepared=prepared, committed=3)
    assert prepared_from_stale == 3 and copied_from == 5 and prepared.verdict == "stale_term"
    assert _tree(term) == _tree(newest) and (term / "offsets/3").read_text() == "v1\nplan-3"
    assert not prepared.folder.exists()


def test_a_copy_without_the_committed_batch_is_not_used(tmp_path: Path) -> None:
    """The commit record names a batch the followed folder never planned (a checkpoint replaced or restored): the
    copy is discarded, not used, and the term's folder is the full copy the career then refuses, as without it."""
    layout = Layout(tmp_path)
    source = layout.term_checkpoint(3)
    _batches(source, 0, 2)
    prepared = PreparedCheckpoint(layout, "r2")
    prepared.catch_up()
    term, _ = adopt_checkpoint(layout, 4, prepared=prepared, committed=8)
    assert prepared.verdict == "batch_differs" and _tree(term) == _tree(source) and not prepared.folder.exists()


def test_the_last_catch_up_goes_by_the_disk_not_by_what_the_follower_remembers(tmp_path: Path) -> None:
    """Files removed from the copy, or put into it, behind the follower's back: inauguration still leaves exactly
    the source's files (the removed ones linked again, the foreign one dropped)."""
    layout = Layout(tmp_path)
    source = layout.term_checkpoint(3)
    _batches(source, 0, 4)
    prepared = PreparedCheckpoint(layout, "r2")
    prepared.catch_up()
    (prepared.folder / "state/0/0/3.changelog").unlink()
    (prepared.folder / "offsets/9").write_text("v1\nnot the source's")
    term, _ = adopt_checkpoint(layout, 4, prepared=prepared, committed=4)
    assert prepared.verdict == "used" and prepared.linked_at_take == 1 and _tree(term) == _tree(source)


def test_a_new_term_of_the_leader_itself_starts_with_no_copy_left_behind(tmp_path: Path) -> None:
    """A replica's copy of an earlier life is dropped when it starts (what it holds is not known), and the copy
    follows the newest term folder only."""
    layout = Layout(tmp_path)
    left = layout.checkpoint / f"{PREPARED_PREFIX}r2"
    (left / "offsets").mkdir(parents=True)
    (left / "offsets" / "0").write_text("v1\nleft over")
    prepared = PreparedCheckpoint(layout, "r2")
    assert not left.exists() and prepared.catch_up() == 0 and prepared.source_epoch is None


def test_a_follower_leaves_a_term_folder_alone_until_that_term_commits_a_batch_of_its_own(tmp_path: Path) -> None:
    """A term folder the copy does not mirror yet, the one there at the follower's start and then a new term's
    (its first batch is the handover's gap), is left alone for as long as that term commits nothing new; its first
    commit of a new batch has the copy mirror it."""
    layout = Layout(tmp_path)
    first = layout.term_checkpoint(3)
    _batches(first, 0, 2)
    preparer = StatePreparer(layout, "r2", structlog.get_logger(), window_ms=120_000, defer_s=600)
    try:
        stays_for(lambda: preparer.checkpoint.source_epoch is None, 1.6, "no copy of term 3 before it commits")
        _batches(first, 3, 3)
        wait_for(lambda: preparer.checkpoint.source_epoch == 3, 10, "the copy to mirror term 3")
        newest, _ = adopt_checkpoint(layout, 5)
        stays_for(lambda: preparer.checkpoint.source_epoch == 3, 1.6, "the copy on term 3 until term 5 commits")
        _batches(newest, 4, 4)
        wait_for(lambda: preparer.checkpoint.source_epoch == 5, 10, "the copy to mirror term 5")
        assert _tree(preparer.checkpoint.folder) == _tree(newest)
    finally:
        preparer.close()


def test_a_term_that_commits_nothing_new_is_mirrored_after_the_deferral(tmp_path: Path) -> None:
    """An idle queue's term commits nothing: its folder is mirrored all the same once ``defer_s`` has passed."""
    layout = Layout(tmp_path)
    term = layout.term_checkpoint(3)
    _batches(term, 0, 2)
    preparer = StatePreparer(layout, "r2", structlog.get_logger(), window_ms=120_000, defer_s=1.0)
    try:
        wait_for(lambda: preparer.checkpoint.source_epoch == 3, 10, "the copy to mirror the idle term 3")
        assert _tree(preparer.checkpoint.folder) == _tree(term)
    finally:
        preparer.close()


def _crash_at_batch(point: str, batch: int) -> Callable[[str], None]:
    """A fault hook that raises :class:`Crash` when the ``batch``-th batch (from 0) reaches ``point``."""
    reached: list[int] = []

    def hook(name: str) -> None:
        if name == point:
            reached.append(1)
            if len(reached) == batch + 1:
                raise Crash(f"injected crash at {point} of batch {batch}")

    return hook


def _inaugurated(logs: list[dict[str, Any]]) -> dict[str, Any]:
    (event,) = [e for e in logs if e["event"] == INAUGURATED and "checkpoint_from" in e]
    return event


def _handover_to_r2(root: Path, zk_client: KazooClient, zk_group: str, between: Callable[[dict[str, Any]], None],
                    crash: Callable[[str], None] | None = None, **config: Any) -> tuple[list[dict[str, Any]], int,
                                                                                         Recorder]:
    """r1 leads over 8 queue files while r2 follows: it drains them and hands over cleanly or, with ``crash`` (a
    fault hook), dies where it raises; ``between(commit record)`` runs while r2 still follows; then a file of three
    repeats of records r1 committed, and two more files, which r2's term drains, and the audit: exactly once. r2's
    logs, r1's epoch, and what r2's batches did."""
    q = Queue(root)
    q.standard(files=8)
    seen = Recorder()
    with structlog.testing.capture_logs() as logs:
        config.setdefault("standby_state", "on")
        leader = SparkCareer(make_config(root, **config), Recorder(), replica_id="r1", faults=crash)
        follower = SparkCareer(make_config(root, **config), seen, replica_id="r2")
        try:
            with leadership(zk_client, zk_group, "r1") as (_, ctx):
                leader.inaugurate(ctx)
                if crash is None:
                    run_until(leader, drained(root))
                else:
                    with pytest.raises(Crash):
                        run_until(leader, lambda: False)
                leader.hand_over(Outcome.CLEAN if crash is None else Outcome.FAILED)
                record, _ = ctx.fence.read_commit()
            assert record is not None
            between(record)
            q.put(q.written[:3])  # the producer's retries of records r1 wrote, within the dedup window
            q.standard(files=2, start=1000)
            with leadership(zk_client, zk_group, "r2") as (_, ctx2):
                follower.inaugurate(ctx2)
                run_until(follower, drained(root))
                follower.hand_over(Outcome.CLEAN)
        finally:
            leader.close()
            follower.close()
    assert_exactly_once(root)
    assert not landing_names(root)
    return [e for e in logs if e.get("replica_id") == "r2"], ctx.epoch, seen


def _prepared_up_to(root: Path, batch: int) -> None:
    prepared = root / "checkpoint" / f"{PREPARED_PREFIX}r2"
    wait_for((prepared / "commits" / str(batch)).exists, 30, f"r2 to prepare up to batch {batch}")


@pytest.mark.parametrize("point", ["after_stage", "after_commit"])
def test_a_successor_on_its_prepared_copy_after_a_leader_killed_mid_batch_neither_skips_nor_doubles(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, point: str
) -> None:
    """r1 commits two batches while r2 follows and prepares; r1 dies inside its third batch, after staging it
    (nothing committed: its planned offsets are in its folder) or after its fenced commit (ZooKeeper has the
    batch, Spark's commit log does not). r2 takes over on its prepared copy: it runs the batch once, or skips it
    as committed; the output is exactly once. After ``after_commit`` the marks r2 preloaded are one batch behind
    the record, so they are not used; its dedup store, one batch behind too, is caught up from the file the
    roll-forward published, and used."""
    root = tmp_path / "data"

    def r1_died_in_batch_2(record: dict[str, Any]) -> None:
        assert record["batch_id"] == (1 if point == "after_stage" else 2)
        _prepared_up_to(root, 1)

    logs, epoch, seen = _handover_to_r2(root, zk_client, zk_group, r1_died_in_batch_2,
                                        crash=_crash_at_batch(point, 2))
    event = _inaugurated(logs)
    assert event["prepared"] == "used" and event["checkpoint_from"] == epoch
    assert seen.outcomes()[0] == ("committed" if point == "after_stage" else "skipped")
    if point == "after_commit":
        assert event["preloaded"] == ["dedup"]


def test_a_clean_successor_uses_its_prepared_copy_and_preloaded_marks(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """r1 drains the queue and hands over cleanly while r2 follows: r2's term starts on its prepared copy, linking
    only what the last commit added, with the marks and the dedup store of the committed batch it preloaded (the
    producer's repeats of r1's records are dropped as duplicates, not quarantined as late); more files, then the
    audit: exactly once, order kept."""
    root = tmp_path / "data"
    logs, epoch, seen = _handover_to_r2(root, zk_client, zk_group, lambda record: _prepared_up_to(root,
                                                                                                 record["batch_id"]))
    event = _inaugurated(logs)
    assert event["prepared"] == "used" and event["preloaded"] == ["order", "dedup"]
    assert event["prepared_linked"] < len(_tree(root / "checkpoint" / f"epoch={epoch}"))
    assert (seen.total("duplicate"), seen.total("late")) == (3 + 2, 0), "r1's records repeated: dropped, not late"


def test_standby_state_off_copies_in_full_and_keeps_no_copy(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """With ``standby_state="off"`` a follower keeps nothing ready: no prepared folder while it follows, and its
    term copies the whole checkpoint and reads its marks from disk (``prepared="off"``); exactly once."""
    root = tmp_path / "data"

    def nothing_prepared(_record: dict[str, Any]) -> None:
        assert not list((root / "checkpoint").glob(f"{PREPARED_PREFIX}*"))

    logs, epoch, _ = _handover_to_r2(root, zk_client, zk_group, nothing_prepared, standby_state="off")
    event = _inaugurated(logs)
    assert event["prepared"] == "off" and event["preloaded"] == [] and event["checkpoint_from"] == epoch
