"""The Delta tables through failovers of real ``tenure run`` processes: a reader polling ``table/`` throughout never
sees part of a batch, and a leader paused at the worst moments of its publish adds no version when it resumes.

The worst moments are the two windows of the Delta commit (``career.output.publish_batch``): after the batch's
files are linked into ``table/`` and before its version is written (``after_rename``), and inside the commit,
the table read and its transaction version checked, the version not yet written (``inside_delta_commit``). A
successor rolls the batch forward, version included, and commits more; the resumed leader must then find the
batch covered (or lose Delta's transaction conflict), so each batch is one version, once.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from kazoo.client import KazooClient

from tenure.career.output import batch_of
from tenure.career.spark import BATCH_COMMITTED, DELTA_VERSION_ADDED
from tenure.election import GroupPaths
from tenure.service.drill import read_events
from tenure.service.local import Topology, wait_for
from tenure.service.ops import verify
from tenure.service.replica import FAULT_INJECTED, ReplicaSpec

POINTS = ("after_rename", "inside_delta_commit")


def _files(table: DeltaTable) -> list[str]:
    """The data files of the table object's version (read once: its version and its files agree)."""
    return [str(p) for p in pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()]


class _Reader(threading.Thread):
    """A Delta reader of ``table/``, polling: each new version's snapshot, as the files of each batch it holds."""

    def __init__(self, table: Path) -> None:
        super().__init__(name="delta-reader", daemon=True)
        self._table = table
        self._done = threading.Event()
        self.snapshots: dict[int, dict[int, frozenset[str]]] = {}
        self.errors: list[str] = []

    def run(self) -> None:
        while not self._done.wait(0.2):  # a version stands for a second or more
            if not (self._table / "_delta_log").is_dir():
                continue
            try:
                table = DeltaTable(str(self._table))
                version = table.version()
                if version in self.snapshots:
                    continue
                by_batch: dict[int, set[str]] = {}
                for path in _files(table):
                    by_batch.setdefault(batch_of(path.rsplit("/", 1)[-1]) or -1, set()).add(path)
                self.snapshots[version] = {b: frozenset(f) for b, f in by_batch.items()}
            except Exception as exc:  # a log entry being written: the next poll reads it whole
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=10)


def _events(topology: Topology, name: str) -> list[tuple[str, float, dict[str, object]]]:
    found = []
    for replica in topology:
        found += [(e.replica_id, e.at, e.fields) for e in read_events(replica.log_path, replica.replica_id)
                  if e.event == name]
    return found


def _commit_record(topology: Topology) -> dict[str, Any]:
    client = KazooClient(hosts=topology.ensemble.connect_string)
    client.start(timeout=30)
    try:
        data, _ = client.get(GroupPaths(topology.group).commit)
        record: dict[str, Any] = json.loads(data)
        return record
    finally:
        client.stop()
        client.close()


def _committed_by(topology: Topology, replica_id: str, since: float) -> int:
    return sum(1 for r, at, _ in _events(topology, BATCH_COMMITTED) if r == replica_id and at >= since)


def _pause_the_leader_at(topology: Topology, point: str) -> tuple[str, int, bool, float]:
    """Pause the leader's whole tree at ``point`` of a batch, let its successor take over and commit twice, then
    resume it and wait until it has stepped down. Returns the leader, the paused batch, whether the batch wrote
    rows to ``table/``, and when the leader resumed."""
    leader_id = topology.wait_for_leader(120).replica_id
    leader = topology.replica(leader_id)
    since = time.time()
    wait_for(lambda: _committed_by(topology, leader_id, since) >= 1, 120, f"a commit by {leader_id}")
    armed = time.time()
    leader.arm(point, "pause")

    def paused() -> bool:
        injected = [at for r, at, _ in _events(topology, FAULT_INJECTED) if r == leader_id and at >= armed]
        return bool(injected) and leader.stopped()

    wait_for(paused, 120, f"{leader_id} to pause itself at {point}")
    record = _commit_record(topology)  # the paused batch: committed in ZooKeeper, its publish not done
    successor = next(r.replica_id for r in topology if r.replica_id != leader_id)
    paused_at = time.time()
    wait_for(lambda: _committed_by(topology, successor, paused_at) >= 2, 180,
             f"{successor} to take over and commit twice")
    resumed_at = time.time()
    leader.resume()
    wait_for(lambda: any(s.up and not s.leader for s in topology.statuses() if s.replica_id == leader_id), 120,
             f"{leader_id} to step down")
    return leader_id, int(record["batch_id"]), "table" in record.get("staged", {}), resumed_at


@pytest.mark.fleet
@pytest.mark.timeout(900)
def test_a_reader_sees_whole_batches_and_a_leader_paused_in_its_publish_adds_no_version(tmp_path: Path) -> None:
    """Two replicas while the producer writes, the leader paused as a whole tree at each of the Delta commit's two
    windows: a reader polling ``table/`` throughout sees every batch whole in every version, the audit passes, and
    each paused batch is one version, added by the successor and never by the resumed leader."""
    topology = Topology(tmp_path, replicas=2, zk_servers=1, fault_files=True,
                        spec=ReplicaSpec(session_timeout_s=4.0, max_files_per_trigger=4))
    reader = _Reader(topology.data_root / "table")
    topology.start()
    reader.start()
    try:
        topology.wait_for_leader(300)
        topology.start_producer(["--records", "3200", "--rate", "80", "--keys", "20", "--bad", "0.01"])
        paused = [_pause_the_leader_at(topology, point) for point in POINTS]
        producer = topology.producer
        assert producer is not None
        wait_for(lambda: producer.poll() is not None, 300, "the producer to finish")
        wait_for(lambda: verify(topology.data_root).unaccounted == 0, 300, "the queue to drain")
    finally:
        reader.stop()
        topology.stop()

    report = verify(topology.data_root)
    assert report.ok, report.render()
    assert report.delta_tables >= 1 and report.delta_versions >= 5 and report.delta_problems == 0
    whole: dict[int, set[str]] = {}
    for path in _files(DeltaTable(str(topology.data_root / "table"))):
        whole.setdefault(batch_of(path.rsplit("/", 1)[-1]) or -1, set()).add(path)
    assert len(reader.snapshots) >= 5, reader.errors[-3:]
    for version, seen in reader.snapshots.items():
        for batch, files in seen.items():
            assert files == whole[batch], f"version {version} showed part of batch {batch}"
    # The paused leaders' batches: one version each, added by the successor, never by the resumed leader.
    table = str((topology.data_root / "table").resolve())  # not the warm-up's scratch table
    added = [(r, at, f) for r, at, f in _events(topology, DELTA_VERSION_ADDED) if f["path"] == table]
    for leader_id, batch, wrote_rows, resumed_at in paused:
        versions = [(r, f) for r, _, f in added if f["batch"] == batch]
        assert len(versions) == (1 if wrote_rows else 0), (batch, versions)
        assert all(r != leader_id for r, _ in versions)
        assert not [f for r, at, f in added if r == leader_id and at >= resumed_at and f["batch"] == batch]
