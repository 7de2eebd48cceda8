"""A commit record tenure did not write is refused before a file is touched (issue 50, item 8).

Whoever can write ``/tenure/<group>/commit`` (an open ACL) chooses the paths a leader's roll-forward links and
deletes. Each test lets a real term commit on the shared ZooKeeper and SparkSession, writes a forged record to
the real znode — paths that climb out of the data root, an absolute path, a path through a symbolic link planted
in an output, another epoch's staging, part files and snapshots outside their folders — and checks that the next
term refuses it with one line and that nothing outside the layout, nor the output, changed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tenure.career import BatchFailed, Outcome
from tenure.career.lifecycle import BATCH_ATTEMPT_FAILED, CAREER_FAILED
from tenure.career.spark import BATCH_COMMITTED, SparkCareer
from tenure.career.spark._errors import CommitRecordError
from tenure.election import GroupPaths
from tenure.service.drill import read_events
from tenure.service.local import ReplicaProcess, free_port, wait_for
from tenure.service.ops import verify
from tenure.service.replica import ReplicaSpec
from tests._replicas import REPO
from tests.test_spark_career import (
    Queue,
    Recorder,
    assert_exactly_once,
    drain_term,
    drained,
    leadership,
    make_config,
    refused_inauguration,
    run_until,
)

pytestmark = pytest.mark.timeout(900)

Forgery = Callable[[dict[str, Any], Path, Path], dict[str, Any]]
"""Given the last real record, the data root and a victim folder outside it: the forged record."""


def _staging(record: dict[str, Any], output: str, epoch: int | None = None) -> str:
    return f"{output}/_staging/epoch={record['epoch'] if epoch is None else epoch}/batch={record['batch_id']}"


def _climbs_out(record: dict[str, Any], root: Path, victim: Path) -> dict[str, Any]:
    return {**record, "staged": {"table": os.path.relpath(victim, root)}}  # ../victim


def _absolute(record: dict[str, Any], root: Path, victim: Path) -> dict[str, Any]:
    return {**record, "staged": {"quarantine": str(victim)}}


def _through_a_link(record: dict[str, Any], root: Path, victim: Path) -> dict[str, Any]:
    """The exact staging path of the record's epoch and batch, but its epoch folder is a link out of the root."""
    link = root / "quarantine" / "_staging" / f"epoch={record['epoch']}"
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(victim, link)
    (victim / f"batch={record['batch_id']}").mkdir()
    (victim / f"batch={record['batch_id']}" / "part-00000.parquet").write_bytes(b"not tenure's")
    return {**record, "staged": {"quarantine": _staging(record, "quarantine")}}


def _another_epochs_staging(record: dict[str, Any], root: Path, victim: Path) -> dict[str, Any]:
    """A newer term's staging of the same batch id, not committed: publishing it would publish what no commit
    covers, and deleting it would take the newer term's batch."""
    newer = root / _staging(record, "table", epoch=int(record["epoch"]) + 7)
    newer.mkdir(parents=True)
    (newer / "part-00000.parquet").write_bytes(b"a newer term's staged part")
    return {**record, "staged": {"table": _staging(record, "table", epoch=int(record["epoch"]) + 7)}}


def _part_outside(record: dict[str, Any], root: Path, victim: Path) -> dict[str, Any]:
    return {**record, "parts": {"table": [f"../{os.path.relpath(victim / 'kept', root)}"]}}


def _snapshot_outside(record: dict[str, Any], root: Path, victim: Path) -> dict[str, Any]:
    return {**record, "order": str(victim / "kept")}


def _queue_file_outside(record: dict[str, Any], root: Path, victim: Path) -> dict[str, Any]:
    return {**record, "files": [*record["files"], "../../victim/kept"]}


FORGERIES: dict[str, Forgery] = {
    "climbs out": _climbs_out,
    "absolute": _absolute,
    "through a link": _through_a_link,
    "another epoch's staging": _another_epochs_staging,
    "part outside": _part_outside,
    "snapshot outside": _snapshot_outside,
    "queue file outside": _queue_file_outside,
}


def _tree(*folders: Path) -> dict[str, bytes]:
    """Every file under ``folders`` (links not followed), with its bytes: what must not change."""
    found: dict[str, bytes] = {}
    for folder in folders:
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                path = Path(dirpath) / name
                found[str(path)] = path.read_bytes()
    return found


def _first_term(root: Path, zk_client: KazooClient, zk_group: str) -> dict[str, Any]:
    """A real term that commits and publishes the queue's batches; returns its last commit record."""
    Queue(root).standard(files=2)
    record = drain_term(root, zk_client, zk_group, "r1")
    assert record is not None
    return record


def _forge(zk_client: KazooClient, group: str, record: dict[str, Any]) -> None:
    zk_client.set(GroupPaths(group).commit, json.dumps(record).encode())


def _victim(tmp_path: Path) -> Path:
    """A folder outside the data root, with a file in it."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "kept").write_bytes(b"must survive")
    return victim


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_record_is_refused_at_inauguration_and_touches_nothing(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, forgery: str
) -> None:
    """The next term's inauguration refuses the forged record with one line naming the field and the fix
    (docs/operating/security.md), before any roll-forward: the victim folder and every output stay as they were."""
    root = tmp_path / "data"
    record = _first_term(root, zk_client, zk_group)
    victim = _victim(tmp_path)
    forged = FORGERIES[forgery](record, root, victim)
    before = _tree(victim, root / "table", root / "quarantine", root / "order")
    _forge(zk_client, zk_group, forged)

    message = str(refused_inauguration(root, zk_client, zk_group, "r2", CommitRecordError))
    assert "\n" not in message and "security.md" in message and "not one tenure wrote" in message, message
    assert _tree(victim, root / "table", root / "quarantine", root / "order") == before


def test_a_record_forged_during_a_term_fails_no_batch_and_touches_nothing(
    spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path
) -> None:
    """A record forged while a term leads is refused by the next batch's read: the term ends with the record's
    error, not the batch's (no attempt counts against a healthy batch), and nothing outside the layout moves.
    Once the real record is back, the group drains the queue exactly once."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=2)
    victim = _victim(tmp_path)
    career = SparkCareer(make_config(root), Recorder(), replica_id="r1")
    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx):
            career.inaugurate(ctx)
            run_until(career, drained(root))
            real, _ = ctx.fence.read_commit()
            assert real is not None
            _forge(zk_client, zk_group, _absolute(real, root, victim))
            q.standard(files=1, start=500)
            with pytest.raises(CommitRecordError) as refused:
                run_until(career, lambda: False)
            career.hand_over(Outcome.FAILED)
    finally:
        career.close()
    assert not isinstance(refused.value, BatchFailed)
    assert _tree(victim) == {str(victim / "kept"): b"must survive"}

    _forge(zk_client, zk_group, real)  # the operator puts the last real record back
    drain_term(root, zk_client, zk_group, "r2")
    assert assert_exactly_once(root).ids_in == 60


@pytest.mark.fleet
def test_a_replica_refuses_a_forged_record_and_carries_on_once_it_is_put_back(
    zk_client: KazooClient, zk_hosts: str, zk_group: str, tmp_path: Path
) -> None:
    """A real replica commits and is killed; a record naming a folder outside the data root as the last batch's
    staging is written over the group's commit record; a new replica, elected, must roll that batch forward. It
    refuses the record in every term it begins (its log says why and how to fix it), counts no attempt against a
    batch, stays up and touches nothing; once the operator puts the last real record back, it drains the queue
    exactly once."""
    root = tmp_path / "data"
    q = Queue(root)
    q.standard(files=2)
    victim = _victim(tmp_path)

    def start(name: str) -> ReplicaProcess:
        spec = ReplicaSpec(group=zk_group, data_root=root, career="spark", standby="cold", max_files_per_trigger=1,
                           max_line_bytes=200)
        return ReplicaProcess(name, free_port(), spec, tmp_path / f"{name}.log",
                              env={"PYTHONPATH": str(REPO), "TENURE_LOG_LEVEL": "info"}, zk=zk_hosts).start()

    def events(replica: ReplicaProcess, name: str) -> list[dict[str, object]]:
        assert replica.process is not None and replica.process.poll() is None, \
            replica.log_path.read_text()[-3000:]
        return [e.fields for e in read_events(replica.log_path, replica.replica_id) if e.event == name]

    first = start("r1")
    try:
        wait_for(lambda: len(events(first, BATCH_COMMITTED)) >= 2, 240, "r1's first commits")
    finally:
        first.kill(timeout_s=30)
    raw, _ = zk_client.get(GroupPaths(zk_group).commit)
    real = json.loads(raw)
    _forge(zk_client, zk_group, _absolute(real, root, victim))
    q.standard(files=1, start=500)
    second = start("r2")
    try:
        def refusals() -> int:
            return sum("not one tenure wrote" in str(e.get("exception", "")) for e in events(second, CAREER_FAILED))

        wait_for(lambda: refusals() >= 2 or _tree(victim) != {str(victim / "kept"): b"must survive"}, 240,
                 "r2 to refuse the forged record in two terms")
        assert _tree(victim) == {str(victim / "kept"): b"must survive"}, "the forged record's path was acted on"
        assert not events(second, BATCH_ATTEMPT_FAILED), "a forged record counted an attempt against a batch"

        _forge(zk_client, zk_group, real)
        wait_for(lambda: verify(root, max_line_bytes=200).unaccounted == 0, 240, "the queue to drain",
                 interval_s=1.0)
    finally:
        second.kill(timeout_s=30)
    report = verify(root, max_line_bytes=200)
    assert report.ok and report.ids_in == 60, report.render()
