"""Power loss loses nothing committed: a real replica on a file system that forgets every write not fsynced.

``tests/_powerloss.py`` mounts a FUSE file system that, on a simulated power cut, rolls the data root back to what
was made durable (file contents at their last fsync, directory entries at their directory's last fsync). The
replica is paused by its fault file at the worst moments of a batch, its whole process tree is killed where it
stands (a power cut runs no more code), the power is cut, and a new replica process carries on on the same data
root. ZooKeeper runs elsewhere (the shared test ensemble: other machines keep their power), so its commit record
survives and says which batches count. At the end every record is in the table exactly once.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.career.spark import BATCH_COMMITTED
from tenure.service.local import ReplicaProcess, free_port, wait_for
from tenure.service.ops import verify
from tenure.service.ops._produce._atomic import fsync_dir, write_hidden_then_rename
from tenure.service.replica import FAULT_INJECTED, ReplicaSpec
from tests._powerloss import PowerLossFS, powerloss_fs
from tests._replicas import REPO, descendants

pytestmark = pytest.mark.timeout(900)

PER_FILE = 40
SESSION_S = 4.0


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[PowerLossFS]:
    with powerloss_fs(tmp_path / "backing", tmp_path / "mnt") as mounted:
        yield mounted


class _Producer:
    """Writes queue files as `tenure produce` does: hidden name, fsync, rename, fsync the folder (acknowledged
    records are durable)."""

    def __init__(self, landing: Path) -> None:
        self.landing = landing
        self.files = 0

    def put(self, files: int) -> None:
        for _ in range(files):
            name = f"p-{self.files:05d}.jsonl"
            lines = [json.dumps({"id": f"{self.files}-{i}", "key": f"k{i % 5}", "seq": self.files * PER_FILE + i,
                                 "ts": i, "payload": {"f": self.files}}) for i in range(PER_FILE)]
            write_hidden_then_rename(self.landing, name, ("\n".join(lines) + "\n").encode())
            fsync_dir(self.landing)
            self.files += 1


def _start(name: str, zk_hosts: str, group: str, data_root: Path, logs: Path) -> ReplicaProcess:
    spec = ReplicaSpec(group=group, data_root=data_root, career="spark", session_timeout_s=SESSION_S,
                       handover_timeout_s=2, max_files_per_trigger=2, standby="cold")
    replica = ReplicaProcess(name, free_port(), spec, logs / f"{name}.log",
                             env={"PYTHONPATH": str(REPO), "TENURE_LOG_LEVEL": "info"}, zk=zk_hosts,
                             fault_file=logs / f"{name}.fault")
    replica.start()
    return replica


def _events(replica: ReplicaProcess, name: str) -> list[dict[str, object]]:
    """The replica's log events called ``name``; fails at once if the replica has exited."""
    assert replica.process is not None
    if replica.process.poll() is not None:
        raise AssertionError(f"{replica.replica_id} exited {replica.process.returncode}: "
                             + replica.log_path.read_text(errors="replace")[-2000:])
    events = []
    for line in replica.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{name}"' in line:
            event = json.loads(line)
            if event.get("event") == name:
                events.append(event)
    return events


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def _power_cut(replica: ReplicaProcess, fs: PowerLossFS) -> None:
    """Kill the paused replica's whole tree where it stands (no SIGCONT: it runs no more code), then cut."""
    assert replica.process is not None
    for pid in [replica.process.pid, *descendants(replica.process.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    replica.process.wait(timeout=30)
    fs.power_cut()


CUTS = ("after_stage", "after_checkpoint", "after_commit")
"""Where each term is cut, in turn: its batch staged (the previous batch's files marked and archived, the
checkpoint synced), Spark's checkpoint told of a batch not yet synced, ZooKeeper's commit applied and nothing
published."""


@pytest.mark.fleet
def test_power_cuts_at_the_worst_moments_lose_nothing_committed(
    fs: PowerLossFS, zk_hosts: str, zk_group: str, tmp_path: Path
) -> None:
    """Three terms, each cut at one of :data:`CUTS` after it has committed twice (every term after the first
    runs on a checkpoint copied at its inauguration); then a fourth replica drains the queue: every record is
    written exactly once, none set aside."""
    data = fs.mount / "data"
    landing = data / "landing"
    landing.mkdir(parents=True)
    for folder in (data, fs.mount):
        fsync_dir(folder)
    logs = tmp_path / "logs"
    logs.mkdir()
    producer = _Producer(landing)
    producer.put(4)
    replicas: list[ReplicaProcess] = []
    try:
        for term, point in enumerate(CUTS):
            replica = _start(f"r{term}", zk_hosts, zk_group, data, logs)
            replicas.append(replica)
            wait_for(lambda r=replica: len(_events(r, BATCH_COMMITTED)) >= 2, 240,  # type: ignore[misc]
                     f"r{term}'s second commit")
            replica.arm(point, "pause")
            producer.put(3)
            wait_for(lambda r=replica: _events(r, FAULT_INJECTED), 120,  # type: ignore[misc]
                     f"r{term} to reach {point}")
            assert replica.process is not None
            wait_for(lambda r=replica: _stopped(r.process.pid), 30, "the pause")  # type: ignore[misc]
            _power_cut(replica, fs)
        last = _start("r-last", zk_hosts, zk_group, data, logs)
        replicas.append(last)
        producer.put(2)
        wait_for(lambda: verify(data).unaccounted == 0, 300, "the queue to drain", interval_s=1.0)
    finally:
        for replica in replicas:
            replica.kill(timeout_s=30)
    report = verify(data)
    assert report.ok, report.render()
    assert report.ids_in == producer.files * PER_FILE == report.ids_written, report.render()
    assert report.ids_set_aside == 0, report.render()
