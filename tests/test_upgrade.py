"""A data root written by the previous release (Spark's file source in its checkpoint, plain Parquet outputs) is
carried on by this one.

The previous release is taken from the repository's history (``git archive``) and run as a real replica; it
commits a few batches and hands over; a replica of this release then resumes the same checkpoint — whose offsets
Spark's file source wrote — with the queue source, and reads every later file once and no earlier one again. At
its inauguration the outputs the previous release published become Delta tables in place: one version holding
every earlier file, none of them rewritten; each later batch is a version of its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tarfile
import time
from io import BytesIO
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tenure.career.identity import DATA_ROOT_FILE, TOPIC_FILE, read_data_root_id, read_topic
from tenure.career.output import batch_of, batch_versions, snapshot_files
from tenure.career.spark import BATCH_COMMITTED
from tenure.career.spark._upgrade import DEDUP_SEEDED
from tenure.election import GroupPaths, QueuePaths, read_group_identity
from tenure.service.local import ReplicaProcess, free_port, wait_for
from tenure.service.ops import verify
from tenure.service.replica import ReplicaSpec
from tests._replicas import REPO

pytestmark = pytest.mark.timeout(600)

PREVIOUS_RELEASE = "6b02480"  # the last commit whose consumer read landing/ with Spark's file source
PER_FILE = 50


def _previous_release(into: Path) -> Path:
    """The previous release's source tree, or a skip when this is not a git checkout holding it."""
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS_RELEASE], capture_output=True,
                                 check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"the previous release ({PREVIOUS_RELEASE}) is not in a git checkout here: {exc}")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


_last_stamp = [0]


def _put(landing: Path, first: int, files: int) -> None:
    """Queue files in production order, each stamped at least 10 ms after the one before: the previous release
    read same-millisecond files in any order (Spark's file source; the bug the queue source fixed), and would
    quarantine a file's records as late behind a later file's."""
    for f in range(first, first + files):
        name = f"p-{f:05d}.jsonl"
        lines = [json.dumps({"id": f"{f}-{i}", "key": f"k{i % 5}", "seq": f * PER_FILE + i, "ts": i, "payload": {}})
                 for i in range(PER_FILE)]
        hidden = landing / f".{name}"
        hidden.write_text("\n".join(lines) + "\n")
        _last_stamp[0] = max(time.time_ns(), _last_stamp[0] + 10_000_000)
        os.utime(hidden, ns=(_last_stamp[0], _last_stamp[0]))
        hidden.rename(landing / name)


def _repeat(landing: Path, file: int) -> None:
    """Queue file ``file`` again, under another name: every record a repeat of one already written."""
    lines = [json.dumps({"id": f"{file}-{i}", "key": f"k{i % 5}", "seq": file * PER_FILE + i, "ts": i, "payload": {}})
             for i in range(PER_FILE)]
    hidden = landing / ".again.jsonl"
    hidden.write_text("\n".join(lines) + "\n")
    hidden.rename(landing / f"p-again-{file:05d}.jsonl")


def _start(name: str, code: Path, zk_hosts: str, group: str, data: Path, logs: Path,
           module: str = "tenure", cwd: Path | None = None) -> ReplicaProcess:
    spec = ReplicaSpec(group=group, data_root=data, career="spark", session_timeout_s=4, handover_timeout_s=2,
                       max_files_per_trigger=2, standby="cold")
    replica = ReplicaProcess(name, free_port(), spec, logs / f"{name}.log",
                             env={"PYTHONPATH": str(code), "TENURE_LOG_LEVEL": "info"}, zk=zk_hosts, module=module,
                             cwd=cwd)
    replica.start()
    return replica


def _commits(replica: ReplicaProcess) -> int:
    assert replica.process is not None and replica.process.poll() is None, replica.log_path.read_text()[-2000:]
    return replica.log_path.read_text(errors="replace").count(f'"{BATCH_COMMITTED}"')


@pytest.mark.fleet
def test_a_data_root_of_the_previous_release_is_carried_on(zk_hosts: str, zk_client: KazooClient, zk_group: str,
                                                           tmp_path: Path) -> None:
    """The previous release's data root, queue registry entry (keyed by the queue's path) and group (bound to
    nothing) are carried on in place: the new release's first replica writes the folders' identity files, binds
    the group to them, moves the registry entry to the topic's key, and consumes every later file once. Its dedup
    store is seeded once from Spark's dedup state in the old checkpoint: a repeat of a file the previous release
    committed is dropped as a duplicate, not quarantined as late."""
    old_code = _previous_release(tmp_path / "previous")
    data, logs = tmp_path / "data", tmp_path / "logs"
    landing = data / "landing"
    landing.mkdir(parents=True)
    logs.mkdir()
    _put(landing, 0, 6)
    # Run from its own tree: the current directory comes first on the path, and the repository's holds today's rooms.
    old = _start("old", old_code, zk_hosts, zk_group, data, logs, module="service", cwd=old_code)
    try:
        wait_for(lambda: _commits(old) >= 3, 300, "the previous release's third commit", interval_s=0.5)
        _put(landing, 6, 2)  # planned by the file source, maybe: the new release must neither skip nor repeat them
        assert old.process is not None
        old.process.send_signal(signal.SIGTERM)
        assert old.process.wait(timeout=60) == 0
    finally:
        old.kill(timeout_s=30)
    table = data / "table"
    assert not (table / "_delta_log").exists(), "the previous release wrote plain Parquet"
    offsets = sorted((data / "checkpoint").rglob("offsets/[0-9]*"))
    assert offsets and all("logOffset" in p.read_text() for p in offsets), "Spark's file source wrote the offsets"
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in table.glob("batch-*.parquet")}
    assert before
    legacy = QueuePaths.of_path(data)
    assert zk_client.exists(legacy.group(zk_group)) and not zk_client.exists(GroupPaths(zk_group).identity)
    assert not (data / DATA_ROOT_FILE).exists() and not (data / TOPIC_FILE).exists()
    new = _start("new", REPO, zk_hosts, zk_group, data, logs)
    try:
        _put(landing, 8, 4)
        _repeat(landing, 0)  # the producer's retry of a file the previous release committed, within the window
        wait_for(lambda: _commits(new) >= 1 and verify(data).unaccounted == 0, 300, "the queue to drain",
                 interval_s=1.0)
    finally:
        new.kill(timeout_s=30)
    report = verify(data)
    assert report.ok, report.render()
    assert report.ids_in == report.ids_written == 12 * PER_FILE, report.render()
    seeded = [json.loads(line) for line in new.log_path.read_text(errors="replace").splitlines()
              if f'"{DEDUP_SEEDED}"' in line]
    assert len(seeded) == 1 and seeded[0]["keys"] >= 3 * PER_FILE, "the dedup store seeded from Spark's state once"
    assert not list((data / "quarantine").glob("*.parquet")), "the repeats were dropped, not quarantined as late"
    assert (data / "dedup").is_dir() and any((data / "dedup").glob("batch-*.parquet"))
    bound = read_group_identity(zk_client, zk_group)
    topic = read_topic(data)
    assert bound is not None and topic is not None and bound.data_root_id == read_data_root_id(data)
    assert bound.topic_id == topic.topic_id and not zk_client.exists(legacy.root), "bound, and the entry moved"
    assert zk_client.exists(QueuePaths(topic.topic_id).group(zk_group))
    assert report.delta_tables >= 1 and report.delta_problems == 0
    adopted, *later = batch_versions(table)
    assert adopted.version == 0 and adopted.adopted
    assert {batch_of(n) for n in before} <= set(range(adopted.first or 0, (adopted.batch or 0) + 1))
    assert later and all(not v.adopted and v.batch is not None and v.batch > (adopted.batch or 0) for v in later)
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in table.glob("batch-*.parquet")
            if p.name in before} == before, "an adopted file was rewritten"
    assert before.keys() <= snapshot_files(table)
