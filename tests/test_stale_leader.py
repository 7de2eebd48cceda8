"""Every step a term takes on shared files is fenced or harmless when the term is already stale.

The worst moments are placed with the career's fault hook (a real pause of the calling thread at a named
point), a real successor on the same ZooKeeper group and data root, and the output checked by verify.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.spark import SparkCareer
from tenure.career.spark._checkpoints import StaleTermError, adopt_checkpoint, newer_term_started
from tenure.career.spark._layout import Layout
from tenure.career.spark._publish import remove_dead_staging
from tenure.errors import Fenced, NotLeader
from tests.test_spark_career import (
    Crash,
    Queue,
    Recorder,
    assert_exactly_once,
    crash_at,
    drained,
    leadership,
    make_config,
    run_until,
)


class PauseAt:
    """A fault hook that parks the calling thread at ``point`` until released (a paused leader, in-process)."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, point: str) -> None:
        if point == self.point and not self.reached.is_set():
            self.reached.set()
            assert self.release.wait(300), "never released"


@pytest.mark.parametrize("local_view", ["honest", "still-believes-it-leads"])
def test_a_leader_paused_inside_inaugurate_cannot_destroy_its_successors_batch(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, local_view: str
) -> None:
    """Finding 2 of #14: r1 is paused inside inaugurate past its term; r2 is elected, commits batch 0 and dies
    before publishing; r1 resumes. r1 must not delete r2's staged batch, and r3 then rolls batch 0 forward:
    nothing lost, nothing twice. ``honest``: r1's leadership check sees the lost term (NotLeader).
    ``still-believes-it-leads``: r1's local view is wrong too (a clock that lies), so the data root itself must
    stop it: r2's checkpoint folder is newer (Fenced)."""
    root = tmp_path / "data"
    Queue(root).standard(files=2)
    pause = PauseAt("inaugurate")
    stale = SparkCareer(make_config(root), Recorder(), replica_id="r1", faults=pause)
    outcome: dict[str, BaseException | None] = {}

    def inaugurate(ctx: Any) -> None:
        try:
            stale.inaugurate(ctx)
            outcome["error"] = None
        except BaseException as exc:
            outcome["error"] = exc

    with leadership(zk_client, zk_group, "r1") as (_, ctx1):
        ctx = ctx1 if local_view == "honest" else replace(ctx1, still_leading=lambda: True)
        thread = threading.Thread(target=inaugurate, args=(ctx,), daemon=True)
        thread.start()
        assert pause.reached.wait(120)
    # r1's term is over (its node is gone); it is still inside inaugurate.
    second = SparkCareer(make_config(root, max_files_per_trigger=2), Recorder(), replica_id="r2",
                         faults=crash_at("after_commit"))
    with leadership(zk_client, zk_group, "r2") as (_, ctx2):
        second.inaugurate(ctx2)
        with pytest.raises(Crash):
            run_until(second, lambda: False)
        second.hand_over(Outcome.FAILED)
        record, _ = ctx2.fence.read_commit()
    assert record is not None and record["batch_id"] == 0
    staged = [Path(root, p) for p in record["staged"].values()]
    assert all(p.exists() for p in staged)
    pause.release.set()
    thread.join(120)
    assert isinstance(outcome["error"], NotLeader if local_view == "honest" else Fenced), outcome
    assert all(p.exists() for p in staged), "the stale leader deleted its successor's staged batch"
    third = SparkCareer(make_config(root), Recorder(), replica_id="r3")
    with leadership(zk_client, zk_group, "r3") as (_, ctx3):
        third.inaugurate(ctx3)
        run_until(third, drained(root))
        third.hand_over(Outcome.CLEAN)
    assert_exactly_once(root)
    for career in (stale, second, third):
        career.close()


def test_dead_staging_removal_spares_higher_epochs(tmp_path: Path) -> None:
    """Removing dead staging at epoch 5 deletes the staging of lower epochs only: its own and a newer term's are kept.
    """
    layout = Layout(tmp_path)
    for epoch in (3, 5, 7):
        layout.staging(layout.table, epoch, 0).mkdir(parents=True)
    removed = remove_dead_staging(layout, 5)
    assert removed == ["table/_staging/epoch=3"]
    assert layout.staging(layout.table, 5, 0).exists() and layout.staging(layout.table, 7, 0).exists()


def test_each_term_gets_a_checkpoint_of_its_own(tmp_path: Path) -> None:
    """Term 9 copies term 5's checkpoint; what term 5 (now stale) writes or deletes later never reaches term 9's,
    a term below a newer one is refused, and a term older than the one copied from is removed."""
    layout = Layout(tmp_path)
    old = layout.term_checkpoint(2)
    (old / "offsets").mkdir(parents=True)
    first, source = adopt_checkpoint(layout, 5)
    assert source == 2 and old.exists()
    (first / "offsets").mkdir(exist_ok=True)
    (first / "offsets" / "0").write_text("v1\nplan-0")
    (first / "commits").mkdir()
    (first / "commits" / "0").write_text("v1")
    second, source = adopt_checkpoint(layout, 9)
    assert source == 5 and not old.exists() and (second / "offsets" / "0").read_text() == "v1\nplan-0"
    # The stale term 5 goes on writing the way Spark does: a temporary file renamed over the name, and deletes.
    tmp = first / "offsets" / ".0.tmp"
    tmp.write_text("v1\nplan-by-a-zombie")
    os.replace(tmp, first / "offsets" / "0")
    (first / "offsets" / "1").write_text("v1\nplan-1")
    (first / "commits" / "0").unlink()
    assert (second / "offsets" / "0").read_text() == "v1\nplan-0"
    assert not (second / "offsets" / "1").exists() and (second / "commits" / "0").exists()
    with pytest.raises(StaleTermError):
        adopt_checkpoint(layout, 7)
    assert newer_term_started(layout, 5) and not newer_term_started(layout, 9)


def test_a_partial_copy_counts_as_a_newer_term(tmp_path: Path) -> None:
    """A successor that has begun copying (its folder not yet renamed into place) already stops a stale term
    from marking queue files consumed."""
    layout = Layout(tmp_path)
    (layout.checkpoint / ".epoch=12.partial").mkdir(parents=True)
    assert newer_term_started(layout, 11) and not newer_term_started(layout, 12)


def test_a_flat_checkpoint_of_an_earlier_version_is_adopted(tmp_path: Path) -> None:
    """A checkpoint of the release before per-term folders (offsets directly under ``checkpoint/``) is adopted as the
    first term's copy."""
    layout = Layout(tmp_path)
    (layout.checkpoint / "offsets").mkdir(parents=True)
    (layout.checkpoint / "offsets" / "4").write_text("v1")
    (layout.checkpoint / "metadata").write_text("{}")
    folder, source = adopt_checkpoint(layout, 1)
    assert source is None and (folder / "offsets" / "4").read_text() == "v1" and (folder / "metadata").exists()
