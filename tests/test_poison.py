"""Poison batches on real Spark: a batch that really is poison is split down to the records that fail, only they are
set aside, and a replay writes them once the cause is fixed; the bisection itself, as pure logic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tenure.career import FailedBatch, Outcome
from tenure.career.drills import POISON_PILL
from tenure.career.output import batch_versions
from tenure.career.spark import SparkCareer
from tenure.career.spark._split import Unit, bisect
from tenure.service.ops import request_replay, verify
from tests._replicas import tenure
from tests.test_spark_career import MAX_LINE, Queue, Recorder, leadership, make_config, run_until

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize(("bad", "trials_at_most", "blamed"), [
    pytest.param({("a", 3)}, 10, [("a", (3,))], id="one record among two files"),
    pytest.param({("a", 1), ("b", 9)}, 20, [("a", (1,)), ("b", (9,))], id="one record in each file"),
    pytest.param(set(), 2, [("a", (1, 2, 3, 4)), ("b", (7, 8, 9))], id="fails only as a whole: blamed whole"),
    pytest.param({("a", 2), ("a", 3)}, 4, [("a", (1, 2)), ("a", (3, 4))],
                 id="the trials spent: the halves still failing, whole"),
])
def test_bisection_blames_only_what_fails(bad: set[tuple[str, int]], trials_at_most: int,
                                          blamed: list[tuple[str, tuple[int, ...]]]) -> None:
    """Halves are tried, failing ones cut again down to single records, passing ones cleared; a group whose
    halves both pass is blamed whole, as is what still fails when the trials are spent."""
    group = [Unit("a", (1, 2, 3, 4)), Unit("b", (7, 8, 9))]
    tried: list[list[Unit]] = []

    def fails(units: list[Unit]) -> bool:
        tried.append(units)
        return any((u.source, line) in bad for u in units for line in u.lines)

    found = bisect(group, fails, max_trials=trials_at_most)
    assert [(u.source, u.lines) for u in found] == blamed
    assert len(tried) <= trials_at_most


def _line(i: int, key: str, seq: int, **payload: Any) -> bytes:
    return json.dumps({"id": f"id-{i}", "key": key, "seq": seq, "ts": i, "payload": {"i": i, **payload}}).encode()


def test_a_poison_batch_is_split_and_its_failing_record_replayed_once_fixed(
        spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """The term told to set a batch aside runs it once more and, as it fails again, bisects it: only the record
    whose transform fails is set aside (its line, under set-aside/), the rest of the batch is written in its one
    commit and Delta version, and its key's mark moves past the record. Once the cause is fixed, `tenure replay`
    has the next batch write it, past its key's order (a later record of its key was written before it): verify
    is clean, the replayed row left out of the order check and every other row in order."""
    root, broken = tmp_path / "data", tmp_path / "broken"
    broken.touch()
    queue = Queue(root)
    for f in range(3):
        queue.put([_line(f * 10 + j, f"key-{j % 3}", f * 10 + j,
                         **({POISON_PILL: str(broken)} if (f, j) == (1, 4) else {})) for j in range(10)])
    career = SparkCareer(make_config(root, transform="tenure.career.drills:fail_on_poison_pill",
                                     max_files_per_trigger=3), Recorder(), replica_id="r1", group=zk_group)
    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx):
            ctx.set_aside = FailedBatch(0, 3, "ValueError: a record's payload holds poison_pill")
            career.inaugurate(ctx)
            run_until(career, lambda: verify(root, max_line_bytes=MAX_LINE).ids_written == 29)
            before = verify(root, max_line_bytes=MAX_LINE)
            manifest = json.loads((root / "set-aside" / "batch-000000000000-manifest.json").read_text())
            broken.unlink()  # the cause, fixed
            done = tenure("replay", "--data-root", str(root), "--batch", "0")
            assert done.returncode == 0 and "replay requested: 1 record" in done.stdout, done.stderr
            again = tenure("replay", "--data-root", str(root), "--batch", "0")
            assert again.returncode == 2 and "is asked for already" in again.stderr, again.stderr
            run_until(career, lambda: verify(root, max_line_bytes=MAX_LINE).ids_replayed == 1)
            career.hand_over(Outcome.CLEAN)
    finally:
        career.close()
    assert manifest["split"] and manifest["records"] == 1 and manifest["lines"] == {"q-00002.jsonl": [5]}
    kept = (root / "set-aside" / "batch-000000000000-q-00002.jsonl").read_bytes().splitlines()
    assert [json.loads(line) for line in kept] == [json.loads(_line(14, "key-1", 14, **{POISON_PILL: str(broken)}))]
    assert before.ok and before.ids_set_aside == 1 and before.set_aside_batches == 1, before.render()
    report = verify(root, max_line_bytes=MAX_LINE)
    assert report.ok and report.ids_written == report.ids_in == 30, report.render()
    assert report.ids_set_aside == 0 and report.ids_replayed == 1 and report.inversions == 0, report.render()
    assert [v.batch for v in batch_versions(root / "table")] == [0, 1], "one Delta version per batch"
    replayed = json.loads((root / "set-aside" / "batch-000000000000-replayed.json").read_text())
    assert replayed["in_batch"] == 1 and replayed["records"] == 1
    with pytest.raises(Exception, match="was replayed by batch 1"):
        request_replay(root, [0])
