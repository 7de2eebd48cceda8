"""Empty and torn files left by a power loss are removed where a re-run rebuilds them, else refused in one line.

A term crashes at a chosen point on the shared ZooKeeper and SparkSession; the test then tears or empties what a
power loss could have left unsynced at that point (``tests/test_powerloss.py`` cuts a real replica's power for the
same), and a successor must carry on: Spark's newest offsets, commit and state files, the newest Delta log entry.
A torn file that what ZooKeeper committed relies on is refused at inauguration with the file and the fix.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from structlog.testing import capture_logs

from tenure.career import Outcome
from tenure.career.spark import SparkCareer
from tenure.career.spark._career import TORN_FILES_REMOVED
from tenure.career.spark._errors import TornFileError
from tests.test_spark_career import (
    Crash,
    Queue,
    Recorder,
    assert_exactly_once,
    drain_term,
    leadership,
    make_config,
    refused_inauguration,
    run_until,
)

pytestmark = pytest.mark.timeout(900)


def _crash_at(point: str, nth: int = 1) -> Callable[[str], None]:
    """A fault hook that raises :class:`Crash` the ``nth`` time the career reaches ``point``, and after."""
    seen: list[str] = []

    def hook(reached: str) -> None:
        if reached == point:
            seen.append(reached)
            if len(seen) >= nth:
                raise Crash(f"injected crash at {point}")

    return hook


def _crashed_term(root: Path, zk_client: KazooClient, zk_group: str, point: str, nth: int = 1,
                  **config: Any) -> tuple[dict[str, Any] | None, Path]:
    """A term that crashes at ``point``; its commit record and its checkpoint folder. The hook goes on raising at
    the point (a dead process runs no more of it): the hand-over's own marking stops there too."""
    career = SparkCareer(make_config(root, **config), Recorder(), replica_id="r1", faults=_crash_at(point, nth))
    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx):
            career.inaugurate(ctx)
            with pytest.raises(Crash):
                run_until(career, lambda: False)
            with contextlib.suppress(Crash):
                career.hand_over(Outcome.FAILED)
            record, _ = ctx.fence.read_commit()
            checkpoint = root / "checkpoint" / f"epoch={ctx.epoch}"
    finally:
        with contextlib.suppress(Crash):
            career.close()
    return record, checkpoint


def _tear(path: Path, *, empty: bool = False) -> None:
    """What a power loss leaves of a file not yet synced: nothing, or its first half; its checksum likewise."""
    for victim in (path, path.with_name(f".{path.name}.crc")):
        if victim.exists():
            os.truncate(victim, 0 if empty else victim.stat().st_size // 2)


def _newest(folder: Path, suffix: str = "") -> Path:
    return max((p for p in folder.iterdir() if p.name.removesuffix(suffix).isdigit() and p.name.endswith(suffix)),
               key=lambda p: int(p.name.removesuffix(suffix)))


def _successor(root: Path, zk_client: KazooClient, zk_group: str) -> list[str]:
    """A new term that drains the queue; the torn files it logged as removed (it logs them once)."""
    with capture_logs() as logs:  # around the career: it binds its logger when made
        drain_term(root, zk_client, zk_group, "r2")
    (removed,) = [entry["files"] for entry in logs if entry["event"] == TORN_FILES_REMOVED]
    return list(removed)


def test_a_torn_commit_and_state_of_the_last_batch_are_run_again(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """The queue idles after a batch; the term stops before it syncs Spark's commit of it (its files not yet
    marked consumed). The commit and the query's metadata come back torn or empty (the query keeps no state: the
    dedup store's file of the batch was synced before its fenced commit): the successor removes them, Spark runs
    the batch again (ZooKeeper has it: it is skipped) and the queue drains exactly once."""
    root = tmp_path / "data"
    Queue(root).standard(files=2)
    record, checkpoint = _crashed_term(root, zk_client, zk_group, "after_checkpoint")
    assert record is not None and record["batch_id"] == 0
    assert not (checkpoint / "state").exists()
    _tear(checkpoint / "commits" / "0")
    _tear(checkpoint / "metadata", empty=True)

    assert any(name.endswith("commits/0") for name in _successor(root, zk_client, zk_group))
    assert assert_exactly_once(root).ids_in == 40


def test_a_torn_plan_of_a_batch_not_committed_is_planned_again(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A term stops after staging its first batch, before the fenced commit; the batch's offsets come back empty:
    the successor removes them, Spark plans the batch anew, and the queue drains exactly once."""
    root = tmp_path / "data"
    Queue(root).standard(files=2)
    record, checkpoint = _crashed_term(root, zk_client, zk_group, "after_stage")
    assert record is None
    _tear(checkpoint / "offsets" / "0", empty=True)

    assert any(name.endswith("offsets/0") for name in _successor(root, zk_client, zk_group))
    assert assert_exactly_once(root).ids_in == 40


def test_a_torn_plan_of_a_committed_batch_is_refused_in_one_line(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """The batch ZooKeeper has committed cannot be planned again (another plan could read other files): its torn
    offsets stop the successor's inauguration with one line naming the file and the fix, and nothing is removed."""
    root = tmp_path / "data"
    Queue(root).standard(files=2)
    record, checkpoint = _crashed_term(root, zk_client, zk_group, "after_commit")
    assert record is not None and record["batch_id"] == 0
    _tear(checkpoint / "offsets" / "0")

    message = str(refused_inauguration(root, zk_client, zk_group, "r2", TornFileError))
    assert "\n" not in message and "offsets/0" in message and "Restore it from a backup" in message, message


def test_a_torn_newest_delta_log_entry_is_removed_and_its_batch_published_again(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A term stops after its second batch's publish, before Spark's commit; the Delta version that publish wrote
    comes back torn: the successor removes the entry, its roll-forward adds the batch's version again, and the
    audit finds every version one batch and every id once."""
    root = tmp_path / "data"
    Queue(root).standard(files=3)
    record, _checkpoint = _crashed_term(root, zk_client, zk_group, "after_publish", nth=2, max_files_per_trigger=1)
    assert record is not None and record["batch_id"] == 1
    log = root / "table" / "_delta_log"
    _tear(_newest(log, ".json"))

    assert any(name.startswith("table/_delta_log/") for name in _successor(root, zk_client, zk_group))
    report = assert_exactly_once(root)
    assert report.ids_in == 60 and report.delta_versions_not_one_batch == 0
