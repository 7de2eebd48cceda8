"""Health-gated candidacy with real replicas: a replica whose data root stops taking writes leaves the election —
the leader handing over first — instead of failing its batches, says why on /readyz, and rejoins once it heals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tenure.career._health import storage_problem
from tenure.career.lifecycle import BACKING_OFF, CAREER_FAILED, HEALTHY_AGAIN, LEFT_ELECTION
from tenure.service.local import wait_for
from tenure.service.replica import ReplicaSpec
from tests._replicas import ReplicaSet, election_line


@pytest.fixture()
def replicas(zk_hosts: str, zk_group: str, tmp_path: Path) -> Iterator[ReplicaSet]:
    """Counter replicas of one data root, each reaching it by a path of its own (``mount``): the fault breaks one
    replica's path only, as an unmounted volume breaks one host's."""
    spec = ReplicaSpec(group=zk_group, career="counter", session_timeout_s=3, handover_timeout_s=2,
                       counter_interval_s=0.05)
    replica_set = ReplicaSet(zk_hosts, spec, tmp_path)
    yield replica_set
    replica_set.reap_all()


def mount(tmp_path: Path, replica_id: str) -> Path:
    """``<replica id>-data``: the group's one data root as ``replica_id`` reaches it (a symlink, its mount point)."""
    shared = tmp_path / "data"
    shared.mkdir(exist_ok=True)
    path = tmp_path / f"{replica_id}-data"
    path.symlink_to(shared)
    return path


def test_a_leader_whose_data_root_breaks_hands_over_and_rejoins_when_healed(
        replicas: ReplicaSet, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """A leader whose data root becomes unwritable leaves the election as unhealthy (no back-off, no career failure
    counted), stays alive reporting why, and a follower leads; once the data root is back it rejoins the line and is
    ready again."""
    root = mount(tmp_path, "r1")
    first = replicas.start("r1", data_root=root)
    wait_for(first.is_leader, 30, "r1 to lead")
    second = replicas.start("r2", data_root=mount(tmp_path, "r2"))
    wait_for(lambda: second.get("/readyz")[0] == 200, 30, "r2 ready")

    # The volume goes away under the leader: its data root is now a plain file (an unmounted, replaced path).
    root.rename(tmp_path / "r1-data.away")
    root.write_text("not a folder\n")
    wait_for(second.is_leader, 20, "r2 to lead once r1 left the election")
    code, body = first.get("/readyz")
    assert code == 503 and json.loads(body)["role"] == "unhealthy"
    assert any(r.startswith(f"unhealthy: data root {root} is not writable") for r in json.loads(body)["reasons"])
    assert first.alive and first.get("/livez")[0] == 200
    # Whether the periodic check or a failing batch noticed first, it left as unhealthy: no back-off, no failure
    # counted against the career.
    wait_for(lambda: first.has_event(LEFT_ELECTION, state="unhealthy"), 10, "r1's left_election event")
    assert not first.has_event(BACKING_OFF) and not first.has_event(CAREER_FAILED)
    assert election_line(zk_client, zk_group) == ["r2"]

    root.unlink()
    (tmp_path / "r1-data.away").rename(root)
    wait_for(lambda: election_line(zk_client, zk_group) == ["r2", "r1"], 20, "r1 back in line once healed")
    wait_for(lambda: first.has_event(HEALTHY_AGAIN), 10, "r1's healthy_again event")
    wait_for(lambda: first.get("/readyz")[0] == 200, 10, "r1 ready again")


def test_the_storage_check_names_the_problem(tmp_path: Path) -> None:
    """The storage check passes on a writable folder and leaves nothing behind; too little free disk or a missing data
    root is named with the setting or the path to fix."""
    assert storage_problem(tmp_path, 0) is None
    assert not list(tmp_path.iterdir())  # the probe leaves nothing behind
    free_mb = shutil.disk_usage(tmp_path).free >> 20
    full = storage_problem(tmp_path, (free_mb + 1024) << 20)
    assert full is not None and "MiB free, below the" in full and "--min-free-disk-mb" in full
    gone = storage_problem(tmp_path / "missing", 0)
    assert gone is not None and gone.startswith(f"data root {tmp_path / 'missing'} is not writable")


def test_a_follower_whose_data_root_breaks_leaves_the_line_until_healed(
        replicas: ReplicaSet, zk_client: KazooClient, zk_group: str, tmp_path: Path) -> None:
    """No batch runs on a follower: only the periodic check can notice, and it does."""
    leader = replicas.start("r1", data_root=mount(tmp_path, "r1"))
    wait_for(leader.is_leader, 30, "r1 to lead")
    root = mount(tmp_path, "r2")
    follower = replicas.start("r2", data_root=root)
    wait_for(lambda: election_line(zk_client, zk_group) == ["r1", "r2"], 30, "r2 in line")
    root.unlink()
    root.write_text("not a folder\n")
    wait_for(lambda: election_line(zk_client, zk_group) == ["r1"], 20, "r2 out of the line")
    # The node goes first, the event is logged after it: on a busy machine the log may lag the line.
    wait_for(lambda: follower.has_event(LEFT_ELECTION, state="unhealthy", was_leading=False), 10,
             "r2's left_election event")
    assert follower.get("/readyz")[0] == 503 and leader.is_leader()
    root.unlink()
    root.symlink_to(tmp_path / "data")
    wait_for(lambda: election_line(zk_client, zk_group) == ["r1", "r2"], 20, "r2 back in line")


def test_processes_probing_one_folder_do_not_fail_each_other(tmp_path: Path) -> None:
    """Replicas share the data root, and each probes it every 2 s: one process's probe file, written and
    unlinked, must never make another's check fail (with one shared probe name, an unlink between another
    process's write and unlink made it report the data root unwritable, and a healthy replica left the
    election)."""
    loop = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tenure.career._health import storage_problem\n"
        "deadline = time.monotonic() + 3.0\n"
        "checks = 0\n"
        "while time.monotonic() < deadline:\n"
        "    problem = storage_problem(Path(sys.argv[1]), 0)\n"
        "    checks += 1\n"
        "    if problem is not None:\n"
        "        sys.exit(f'after {checks} checks: {problem}')\n"
        "print(checks)\n"
    )
    probes = [subprocess.Popen([sys.executable, "-c", loop, str(tmp_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        results = [p.communicate(timeout=60) for p in probes]
    finally:
        for p in probes:
            p.kill()
            p.wait()
    assert [p.returncode for p in probes] == [0, 0, 0], [err for _, err in results]
    assert all(int(out) > 50 for out, _ in results), "the probes must have overlapped many times"
    assert not list(tmp_path.iterdir()), "a probe file was left behind"
