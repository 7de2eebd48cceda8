"""Test harness: real `tenure run` processes, their HTTP endpoints, and the `tenure` command line."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import psutil

from tenure.election import GroupPaths, ZooKeeperClient, connected, group_status, read_commit, read_contenders
from tenure.service.drill import read_events
from tenure.service.local import ReplicaProcess, Topology, free_port
from tenure.service.ops import by_queue
from tenure.service.replica import IS_LEADER, ReplicaSpec

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent


def http_get(url: str, timeout_s: float = 2.0) -> tuple[int, str]:
    """(status, body) of a GET; (0, error) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class Replica(ReplicaProcess):
    """A `tenure run` process (see tenure.service.local._replica_process) of ``spec`` on ``zk``, with the assertions
    tests need.

    ``signal(SIGSTOP)`` / ``signal(SIGCONT)`` pause and resume the whole process tree (Python and its Spark
    JVM, see ``tenure.service.replica._proctree``); ``reap`` resumes the tree before it kills.
    """

    def __init__(self, replica_id: str, zk: str, spec: ReplicaSpec, log_dir: Path, env: dict[str, str] | None = None,
                 *, fault_file: Path | None = None) -> None:
        super().__init__(replica_id, free_port(), spec, log_dir / f"{replica_id}.log",
                         env={"PYTHONPATH": str(REPO), **(env or {})}, zk=zk, fault_file=fault_file)

    def start(self) -> Replica:
        super().start()
        return self

    def wait(self, timeout_s: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout_s)

    def get(self, path: str) -> tuple[int, str]:
        return http_get(f"http://127.0.0.1:{self.port}{path}")

    def is_leader(self) -> bool:
        """Whether it leads (a queue of its group, when it has several)."""
        return self.status().leader

    def log_events(self) -> list[dict[str, Any]]:
        """The JSON log events written so far (non-JSON lines, e.g. from the JVM, are skipped)."""
        return [e.fields for e in read_events(self.log_path, self.replica_id)]

    def has_event(self, name: str, **fields: Any) -> bool:
        return any(e.get("event") == name and all(e.get(k) == v for k, v in fields.items())
                   for e in self.log_events())

    def reap(self) -> None:
        """SIGKILL the replica, its whole tree resumed first (a paused JVM would never exit), and wait for it;
        a descendant it leaves behind is killed too."""
        self.kill(timeout_s=30)


class ReplicaSet:
    """Several replicas of one group, each of ``spec`` on ``zk``; every process is reaped at the end, even when the
    test fails."""

    def __init__(self, zk: str, spec: ReplicaSpec, log_dir: Path) -> None:
        self.zk = zk
        self.spec = spec
        self.log_dir = log_dir
        self.replicas: list[Replica] = []

    def start(self, replica_id: str, env: dict[str, str] | None = None, *, fault_file: Path | None = None,
              **settings: Any) -> Replica:
        """Start ``replica_id`` with the set's spec, ``settings`` over it (a setting's flat name and value)."""
        replica = Replica(replica_id, self.zk, self.spec | ReplicaSpec(**settings), self.log_dir, env,
                          fault_file=fault_file).start()
        self.replicas.append(replica)
        return replica

    def __iter__(self) -> Iterator[Replica]:
        return iter(self.replicas)

    def alive(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive]

    def leaders(self) -> list[Replica]:
        return [r for r in self.alive() if r.is_leader()]

    def one_leader(self) -> Replica | None:
        leaders = self.leaders()
        return leaders[0] if len(leaders) == 1 else None

    def reap_all(self) -> None:
        for replica in self.replicas:
            replica.reap()


TENURE = [sys.executable, "-m", "tenure"]
"""The `tenure` command line as the tests start it, with this interpreter: for a command a test signals while it
runs (`tenure zk`, `tenure up`), started with ``subprocess.Popen([*TENURE, …])``; every other command through
:func:`tenure`."""


def tenure(*args: str, timeout_s: float = 90.0, env: Mapping[str, str] | None = None,
           before: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a `tenure` command to its end in a process of its own, from the repository: the tests' one way to run a
    command. Output captured; the exit code is the caller's to check (never raises on it).

    Example::

        done = tenure("drain", "r1", "--zk", zk_hosts, "--group", zk_group)
        assert done.returncode == 0, done.stderr

    Args:
        env: the command's whole environment (default: the test's).
        before: Python the process runs before the command, in the same process: a fault of the test's own (a
            module made unimportable, a constructor that must never run).
    """
    argv = [*TENURE, *args] if before is None else [
        sys.executable, "-c", f"{before}\nfrom tenure.service.cli import main\nmain(prog_name='tenure')", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=REPO, env=env, check=False)


def counter_replica_set(zk_hosts: str, group: str, tmp_path: Path, session_timeout_s: float = 3.0) -> ReplicaSet:
    """Replicas of the counter career on one data root, quick to elect and to hand over (reap them after)."""
    spec = ReplicaSpec(group=group, data_root=tmp_path / "data", career="counter", session_timeout_s=session_timeout_s,
                       handover_timeout_s=2, counter_interval_s=0.05)
    return ReplicaSet(zk_hosts, spec, tmp_path)


def counter_exactly_once(data_root: Path) -> list[int]:
    """The counter career's output: every n from 1 to the last once, in order."""
    numbers = [int(line.split(",")[1]) for line in (data_root / "counter.log").read_text().splitlines()]
    assert numbers == list(range(1, len(numbers) + 1)), "a duplicate or missing n"
    return numbers


def process_running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a killed one whose parent has not reaped it yet is not)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def election_line(client: ZooKeeperClient, group: str) -> list[str]:
    """The replicas in ``group``'s election line, leader first, read with ``client`` (from ZooKeeper: a paused
    replica's metrics would not answer)."""
    return [c.identity.replica_id for c in group_status(client, group).contenders if c.identity]


def line_of(topology: Topology) -> list[str]:
    """The replicas in the topology's election line, leader first (``election_line``)."""
    with connected(topology.ensemble.connect_string) as client:
        return election_line(client, topology.group)


def committed_by(topology: Topology, replica_id: str) -> bool:
    """Whether the group's commit record was last written by ``replica_id``."""
    with connected(topology.ensemble.connect_string) as client:
        data, _ = client.get(GroupPaths(topology.group).commit)
    return bool(data) and json.loads(data).get("replica_id") == replica_id


def replica_events(topology: Topology, replica_id: str) -> list[dict[str, Any]]:
    """The fields of every event in ``replica_id``'s log, in order."""
    return [e.fields for e in read_events(topology.logs / f"{replica_id}.log", replica_id)]


def land_now(topology: Topology, prefix: str, files: int, ts: int = 0) -> None:
    """Land ``files`` queue files of 10 records each, now and in order, as a producer does (a hidden name, then a
    rename), with ids and keys of their own (``prefix``) and record time ``ts``."""
    landing = topology.data_root / "landing"
    for i in range(files):
        hidden = landing / f".{prefix}-{i:03d}.jsonl"
        hidden.write_text("".join(json.dumps({"id": f"{prefix}-{i}-{j}", "key": f"{prefix}-{j % 4}",
                                              "seq": i * 10 + j, "ts": ts, "payload": {"n": j}}) + "\n"
                                  for j in range(10)))
        hidden.replace(landing / hidden.name[1:])


def every_replica_in_every_line(topology: Topology, queues: int) -> bool:
    """Whether each of the topology's replicas stands in the election line of each of its group's ``queues`` queues
    (every one warm and a contender: a poll for ``topology.wait_for``)."""
    with connected(topology.ensemble.connect_string) as client:
        return all(len(read_contenders(client, topology.group, queue=q, queues=queues)) == len(topology.replicas)
                   for q in range(queues))


def queues_led(topology: Topology, replica_id: str) -> set[int]:
    """The queues ``replica_id`` says it leads, from its metrics (none while it does not answer)."""
    return {q for q, leading in by_queue(topology.replica(replica_id).metrics(), IS_LEADER).items() if leading == 1.0}


def queue_commits(topology: Topology, queues: int) -> dict[int, dict[str, Any] | None]:
    """Each of the group's ``queues`` queues' commit record (None before the queue's first commit)."""
    with connected(topology.ensemble.connect_string) as client:
        return {q: read_commit(client, topology.group, queue=q, queues=queues)[0] for q in range(queues)}
