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
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tenure.career.lifecycle import INAUGURATED
from tenure.career.spark import BATCH_COMMITTED
from tenure.career.spark._career import TORN_FILES_REMOVED
from tenure.service.local import ReplicaProcess, free_port, wait_for
from tenure.service.ops import verify
from tenure.service.ops._produce._atomic import fsync_dir, write_hidden_then_rename
from tenure.service.ops._verify import VerifyError
from tenure.service.replica import FAULT_INJECTED, ReplicaSpec
from tests._powerloss import PowerLossFS
from tests._replicas import REPO, descendants

pytestmark = pytest.mark.timeout(900)

PER_FILE = 40
SESSION_S = 4.0



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


def _data_root(fs: PowerLossFS, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A data root on the mount with its ``landing/`` made durable, and a folder for the replicas' logs (off it)."""
    data = fs.mount / "data"
    landing = data / "landing"
    landing.mkdir(parents=True)
    for folder in (data, fs.mount):
        fsync_dir(folder)
    logs = tmp_path / "logs"
    logs.mkdir()
    return data, landing, logs


def _assert_every_record_once(data: Path, producer: _Producer) -> None:
    report = verify(data)
    assert report.ok, report.render()
    assert report.ids_in == producer.files * PER_FILE == report.ids_written, report.render()
    assert report.ids_set_aside == 0, report.render()


def _start(name: str, zk_hosts: str, group: str, data_root: Path, logs: Path,
           standby_state: str = "off") -> ReplicaProcess:
    spec = ReplicaSpec(group=group, data_root=data_root, career="spark", session_timeout_s=SESSION_S,
                       handover_timeout_s=2, max_files_per_trigger=2, standby="cold", standby_state=standby_state)
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


def _power_cut(replica: ReplicaProcess, fs: PowerLossFS, *, journal: bool = False, torn: bool = False) -> None:
    """Kill the paused replica's whole tree where it stands (no SIGCONT: it runs no more code), then cut (with
    :meth:`PowerLossFS.power_cut`'s ``journal`` and ``torn``)."""
    assert replica.process is not None
    for pid in [replica.process.pid, *descendants(replica.process.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    replica.process.wait(timeout=30)
    fs.power_cut(journal=journal, torn=torn)


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
    data, landing, logs = _data_root(fs, tmp_path)
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
    _assert_every_record_once(data, producer)


def _prepared_copy(data: Path, owner: str) -> list[Path]:
    """The files of ``owner``'s prepared checkpoint copy (``--standby-state on``), none while it has none."""
    folder = data / "checkpoint" / f".prepared-{owner}"
    return [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []


@pytest.mark.fleet
def test_a_followers_prepared_copy_cut_by_the_power_is_dropped_on_restart_and_the_next_handover_uses_a_fresh_one(
    fs: PowerLossFS, zk_hosts: str, zk_group: str, tmp_path: Path
) -> None:
    """With ``--standby-state on``: a follower has caught up its prepared copy of the leader's checkpoint when the
    leader is paused after a fenced commit and the power goes for both, on a journalling file system (every name
    kept, what was not synced torn). Restarted on the same data root (the copy from before the cut still there,
    dropped by its owner on start), the replicas carry on; then the new leader is stopped (SIGTERM) and its
    successor takes the copy it prepared since, checked against the committed batch; every record is written
    exactly once, none set aside."""
    data, landing, logs = _data_root(fs, tmp_path)
    producer = _Producer(landing)
    producer.put(4)
    replicas = [_start("r0", zk_hosts, zk_group, data, logs, "on")]
    try:
        wait_for(lambda: len(_events(replicas[0], BATCH_COMMITTED)) >= 2, 240, "r0's second commit")
        replicas.append(_start("r1", zk_hosts, zk_group, data, logs, "on"))
        wait_for(lambda: _prepared_copy(data, "r1"), 240, "r1's prepared copy of r0's checkpoint")
        replicas[0].arm("after_commit", "pause")
        producer.put(3)
        wait_for(lambda: _events(replicas[0], FAULT_INJECTED), 120, "r0 to reach after_commit")
        assert replicas[0].process is not None
        wait_for(lambda: _stopped(replicas[0].process.pid), 30, "the pause")  # type: ignore[union-attr]
        replicas[1].kill(timeout_s=30)  # the power goes for the follower too
        _power_cut(replicas[0], fs, journal=True, torn=True)
        assert _prepared_copy(data, "r1"), "a journalling file system keeps the copy's names"
        first, second = _start("r1", zk_hosts, zk_group, data, logs, "on"), _start("r2", zk_hosts, zk_group,
                                                                                    data, logs, "on")
        replicas += [first, second]
        wait_for(lambda: _events(first, BATCH_COMMITTED) or _events(second, BATCH_COMMITTED), 240,
                 "a commit after the power came back")
        leader, follower = (first, second) if _events(first, BATCH_COMMITTED) else (second, first)
        producer.put(2)
        wait_for(lambda: _prepared_copy(data, follower.replica_id) and verify(data).unaccounted == 0, 300,
                 f"the queue to drain and {follower.replica_id}'s copy of {leader.replica_id}'s checkpoint")
        assert leader.stop(timeout_s=60) == 0
        producer.put(2)
        wait_for(lambda: _events(follower, BATCH_COMMITTED) and verify(data).unaccounted == 0, 300,
                 f"{follower.replica_id} to lead and the queue to drain")
        assert [e["prepared"] for e in _events(follower, INAUGURATED) if "prepared" in e] == ["used"]
    finally:
        for replica in replicas:
            replica.kill(timeout_s=30)
    _assert_every_record_once(data, producer)


def _drained(data: Path, landing: Path) -> bool:
    """Every record written and every queue file archived (the group's marks and archive renames done); not yet
    while the output cannot be read (a torn Delta log entry the new replica has not removed yet)."""
    try:
        return verify(data).unaccounted == 0 and not any(p.suffix == ".jsonl" for p in landing.iterdir())
    except VerifyError:
        return False


@pytest.mark.fleet
def test_an_idle_queue_loses_nothing_when_the_power_goes_after_its_last_batch(
    fs: PowerLossFS, zk_hosts: str, zk_group: str, tmp_path: Path
) -> None:
    """The queue drains and idles: Spark's commit of the last batch is written, its files marked consumed and
    archived, and no next batch comes to sync anything. The power goes; a new replica must not run that batch
    again (its files are archived): the commit was made durable before the marks, so every record is written
    once, none set aside."""
    data, landing, logs = _data_root(fs, tmp_path)
    producer = _Producer(landing)
    producer.put(3)
    replicas = [_start("r0", zk_hosts, zk_group, data, logs)]
    try:
        wait_for(lambda: _drained(data, landing), 300, "the queue to drain and its files to be archived",
                 interval_s=1.0)
        _power_cut(replicas[0], fs)
        replicas.append(_start("r1", zk_hosts, zk_group, data, logs))
        producer.put(2)
        wait_for(lambda: _drained(data, landing), 300, "the queue to drain again", interval_s=1.0)
    finally:
        for replica in replicas:
            replica.kill(timeout_s=30)
    _assert_every_record_once(data, producer)


@pytest.mark.fleet
def test_files_a_power_cut_leaves_torn_or_empty_are_recovered_from(
    fs: PowerLossFS, zk_hosts: str, zk_group: str, tmp_path: Path
) -> None:
    """A journalling file system keeps every name and tears what was not synced: the replica is paused after
    Spark committed a batch to its checkpoint, before that commit is synced (the queue idle), a user has just
    compacted ``table/`` (delta-rs syncs nothing), and the power goes with names kept and unsynced contents cut to
    half. A new replica removes the torn commit, state and Delta log entry, runs the batch again (ZooKeeper has
    it: it is skipped) and drains the queue: every record once, none set aside."""
    data, landing, logs = _data_root(fs, tmp_path)
    producer = _Producer(landing)
    producer.put(4)
    replicas = [_start("r0", zk_hosts, zk_group, data, logs)]
    try:
        wait_for(lambda: _drained(data, landing), 300, "the queue to drain", interval_s=1.0)
        first = replicas[0]
        first.arm("after_checkpoint", "pause")
        producer.put(1)
        wait_for(lambda: _events(first, FAULT_INJECTED), 120, "r0 to pause before syncing Spark's commit")
        assert first.process is not None
        wait_for(lambda: _stopped(first.process.pid), 30, "the pause")  # type: ignore[union-attr]
        DeltaTable(str(data / "table")).optimize.compact()
        _power_cut(first, fs, journal=True, torn=True)
        second = _start("r1", zk_hosts, zk_group, data, logs)
        replicas.append(second)
        producer.put(2)
        wait_for(lambda: _drained(data, landing), 300, "the queue to drain again", interval_s=1.0)
        (removed,) = _events(second, TORN_FILES_REMOVED)
    finally:
        for replica in replicas:
            replica.kill(timeout_s=30)
    files = [str(name) for name in removed["files"]]  # type: ignore[union-attr]
    assert any("/commits/" in name for name in files) and any("_delta_log/" in name for name in files), files
    _assert_every_record_once(data, producer)
