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
from tenure.service.local import wait_for
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


def test_a_new_term_of_the_leader_itself_starts_with_no_copy_left_behind(tmp_path: Path) -> None:
    """A replica's copy of an earlier life is dropped when it starts (what it holds is not known), and the copy
    follows the newest term folder only."""
    layout = Layout(tmp_path)
    left = layout.checkpoint / f"{PREPARED_PREFIX}r2"
    (left / "offsets").mkdir(parents=True)
    (left / "offsets" / "0").write_text("v1\nleft over")
    prepared = PreparedCheckpoint(layout, "r2")
    assert not left.exists() and prepared.catch_up() == 0 and prepared.source_epoch is None


def _crash_at_batch(point: str, batch: int) -> tuple[Callable[[str], None], list[int]]:
    """A fault hook that raises :class:`Crash` when the ``batch``-th batch (from 0) reaches ``point``."""
    reached: list[int] = []

    def hook(name: str) -> None:
        if name == point:
            reached.append(1)
            if len(reached) == batch + 1:
                raise Crash(f"injected crash at {point} of batch {batch}")

    return hook, reached


def _inaugurated(logs: list[dict[str, Any]]) -> dict[str, Any]:
    (event,) = [e for e in logs if e["event"] == INAUGURATED and "checkpoint_from" in e]
    return event


@pytest.mark.parametrize("point", ["after_stage", "after_commit"])
def test_a_successor_on_its_prepared_copy_after_a_leader_killed_mid_batch_neither_skips_nor_doubles(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, point: str
) -> None:
    """r1 commits two batches while r2 follows and prepares; r1 dies inside its third batch, after staging it
    (nothing committed: its planned offsets are in its folder) or after its fenced commit (ZooKeeper has the
    batch, Spark's commit log does not). r2 takes over on its prepared copy: it re-plans or runs the batch once,
    or skips it as committed; the output is exactly once. After ``after_commit`` the marks r2 preloaded are one
    batch behind the record, so they are not used."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=8)
    hook, _ = _crash_at_batch(point, 2)
    with structlog.testing.capture_logs() as logs:
        leader = SparkCareer(make_config(root), Recorder(), replica_id="r1", faults=hook)
        follower_seen = Recorder()
        follower = SparkCareer(make_config(root), follower_seen, replica_id="r2")
        try:
            with leadership(zk_client, zk_group, "r1") as (_, ctx):
                leader.inaugurate(ctx)
                with pytest.raises(Crash):
                    run_until(leader, lambda: False)
                leader.hand_over(Outcome.FAILED)
                record, _ = ctx.fence.read_commit()
            assert record is not None and record["batch_id"] == (1 if point == "after_stage" else 2)
            prepared = root / "checkpoint" / f"{PREPARED_PREFIX}r2"
            wait_for((prepared / "commits" / "1").exists, 30, "r2 to prepare up to batch 1")
            with leadership(zk_client, zk_group, "r2") as (_, ctx2):
                follower.inaugurate(ctx2)
                run_until(follower, drained(root))
                follower.hand_over(Outcome.CLEAN)
        finally:
            leader.close()
            follower.close()
    assert_exactly_once(root)
    assert not landing_names(root)
    event = _inaugurated([e for e in logs if e.get("replica_id") == "r2"])
    assert event["prepared"] == "used" and event["checkpoint_from"] == ctx.epoch
    assert follower_seen.outcomes()[0] == ("committed" if point == "after_stage" else "skipped")
    if point == "after_commit":
        assert event["preloaded"] == []


def test_a_clean_successor_uses_its_prepared_copy_and_preloaded_marks(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """r1 drains the queue and hands over cleanly while r2 follows: r2's term starts on its prepared copy, linking
    only what the last commit added, with the marks of the committed batch it preloaded; more files, then the audit:
    exactly once, order kept."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=4)
    with structlog.testing.capture_logs() as logs:
        leader = SparkCareer(make_config(root), Recorder(), replica_id="r1")
        follower = SparkCareer(make_config(root), Recorder(), replica_id="r2")
        try:
            with leadership(zk_client, zk_group, "r1") as (_, ctx):
                leader.inaugurate(ctx)
                run_until(leader, drained(root))
                leader.hand_over(Outcome.CLEAN)
                record, _ = ctx.fence.read_commit()
            assert record is not None
            prepared = root / "checkpoint" / f"{PREPARED_PREFIX}r2"
            last = record["batch_id"]
            wait_for((prepared / "commits" / str(last)).exists, 30, "r2 to prepare the last batch")
            q.standard(files=2, start=1000)
            with leadership(zk_client, zk_group, "r2") as (_, ctx2):
                follower.inaugurate(ctx2)
                run_until(follower, drained(root))
                follower.hand_over(Outcome.CLEAN)
        finally:
            leader.close()
            follower.close()
    assert_exactly_once(root)
    event = _inaugurated([e for e in logs if e.get("replica_id") == "r2"])
    assert event["prepared"] == "used" and event["preloaded"] == ["order"]
    assert event["prepared_linked"] < len(_tree(root / "checkpoint" / f"epoch={ctx.epoch}"))


def test_standby_state_off_copies_in_full_and_keeps_no_copy(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """With ``standby_state="off"`` a follower keeps nothing ready: no prepared folder while it follows, and its
    term copies the whole checkpoint and reads its marks from disk (``prepared="off"``); exactly once."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=3)
    with structlog.testing.capture_logs() as logs:
        leader = SparkCareer(make_config(root, standby_state="off"), Recorder(), replica_id="r1")
        follower = SparkCareer(make_config(root, standby_state="off"), Recorder(), replica_id="r2")
        try:
            with leadership(zk_client, zk_group, "r1") as (_, ctx):
                leader.inaugurate(ctx)
                run_until(leader, drained(root))
                leader.hand_over(Outcome.CLEAN)
            assert not list((root / "checkpoint").glob(f"{PREPARED_PREFIX}*"))
            q.standard(files=2, start=1000)
            with leadership(zk_client, zk_group, "r2") as (_, ctx2):
                follower.inaugurate(ctx2)
                run_until(follower, drained(root))
                follower.hand_over(Outcome.CLEAN)
        finally:
            leader.close()
            follower.close()
    assert_exactly_once(root)
    event = _inaugurated([e for e in logs if e.get("replica_id") == "r2"])
    assert event["prepared"] == "off" and event["preloaded"] == [] and event["checkpoint_from"] == ctx.epoch
