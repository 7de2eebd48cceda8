"""The handover benchmarks' moving parts: a commit timeline, and three replicas of tenure or of the naive recipe."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Self

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from bench._common import ENSEMBLE_ATTEMPTS, ENSEMBLE_START_S, process_tree_rss
from tenure.election import GroupPaths
from tenure.service.local import Ensemble, EnsembleError, Topology, die_with_parent, running_ensemble
from tenure.service.replica import ReplicaSpec

__all__ = ["Cluster", "Commit", "CommitTimeline", "NaiveCluster", "TenureCluster", "producer_args"]

SESSION_TIMEOUT_S = 6.0
HANDOVER_TIMEOUT_S = 5.0
ZK_TICK_MS = Ensemble.DEFAULT_TICK_MS  # the embedded default: sessions expire within a fraction of a second


def producer_args(rate: float, records: int = 50_000_000, seed: int = 9) -> list[str]:
    """`tenure produce` arguments for a steady stream (it runs until stopped)."""
    return ["--records", str(records), "--keys", "100", "--rate", f"{rate:g}", "--seed", str(seed)]


@dataclass(frozen=True)
class Commit:
    """One new version of ``/tenure/<group>/commit`` as the poller saw it."""

    observed_at: float  # wall clock when the poll saw it
    batch_id: int
    epoch: int
    committed_at: float  # the committer's wall clock (same machine)
    replica_id: str
    written: int
    files: tuple[str, ...] = ()  # the queue files the batch read (names inside landing/)


class RecordPoller:
    """Polls ZooKeeper nodes (``paths``) every ``interval_s`` on its own session, from a thread of its own, and hands
    each new version's JSON to :meth:`_seen` with the index of its path; a subclass keeps what it needs."""

    def __init__(self, hosts: str, paths: list[str], interval_s: float, name: str) -> None:
        self.interval_s = interval_s
        self._paths = paths
        self._client = KazooClient(hosts=hosts, timeout=10.0)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Self:
        self._client.start(timeout=30)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._client.stop()
        self._client.close()

    def _seen(self, index: int, record: dict[str, Any]) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        versions = [-1] * len(self._paths)
        while not self._stop.wait(self.interval_s):
            for index, path in enumerate(self._paths):
                try:
                    raw, stat = self._client.get(path)
                except NoNodeError:
                    continue
                except Exception:  # a reconnect: poll again
                    continue
                if stat.version == versions[index] or not raw:
                    continue
                versions[index] = stat.version
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    record = json.loads(raw)
                    with self._lock:
                        self._seen(index, record)


class CommitTimeline(RecordPoller):
    """Polls ``/tenure/<group>/commit`` every ``interval_s`` on its own session and keeps every new version.

    Example::

        with CommitTimeline(hosts, "bench") as timeline:
            first = timeline.wait_for(lambda c: c.epoch != old, 60)
    """

    def __init__(self, hosts: str, group: str, interval_s: float = 0.02) -> None:
        self.path = GroupPaths(group).commit
        self.commits: list[Commit] = []
        super().__init__(hosts, [self.path], interval_s, "commit-timeline")

    def _seen(self, index: int, record: dict[str, Any]) -> None:
        self.commits.append(Commit(observed_at=time.time(), batch_id=int(record["batch_id"]),
                                   epoch=int(record["epoch"]), committed_at=float(record["committed_at"]),
                                   replica_id=str(record.get("replica_id", "")),
                                   written=int((record.get("counts") or record).get("written", 0)),
                                   files=tuple(record.get("files") or ())))

    def snapshot(self) -> list[Commit]:
        with self._lock:
            return list(self.commits)

    def latest(self) -> Commit | None:
        with self._lock:
            return self.commits[-1] if self.commits else None

    def wait_for(self, predicate: Callable[[Commit], bool], timeout_s: float, what: str, start: int = 0) -> Commit:
        """The first commit at index ``start`` or later that satisfies ``predicate`` (waits for it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for commit in self.snapshot()[start:]:
                if predicate(commit):
                    return commit
            time.sleep(self.interval_s)
        raise TimeoutError(f"no commit {what} within {timeout_s:g} s")


class Cluster(Protocol):
    """Three replicas of one recipe over an embedded ensemble, with a steady producer."""

    label: str
    group: str
    data_root: Path

    @property
    def connect_string(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def replica_ids(self) -> list[str]: ...

    def pid(self, replica_id: str) -> int | None: ...

    def ready(self, replica_id: str) -> bool: ...

    def terminate(self, replica_id: str) -> None: ...

    def kill(self, replica_id: str) -> None: ...

    def restart(self, replica_id: str) -> None: ...


def _http_ok(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1.0) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


class TenureCluster:
    """``tenure.service.local.Topology`` with the Spark career, 3 replicas, warm or cold standby, plus a producer."""

    def __init__(self, directory: Path, *, standby: str, rate: float, replicas: int = 3,
                 spec: ReplicaSpec | None = None, label: str | None = None) -> None:
        self.label = label or f"tenure-{standby}"
        self.group = "bench"
        self._directory = directory
        self._replicas = replicas
        self._standby = standby
        self._spec = ReplicaSpec(group=self.group, career="spark", session_timeout_s=SESSION_TIMEOUT_S,
                                 handover_timeout_s=HANDOVER_TIMEOUT_S, standby=standby) | (spec or {})
        self.topology = self._make(1)
        self.data_root = self.topology.data_root
        self._rate = rate

    def _make(self, attempt: int) -> Topology:
        directory = self._directory if attempt == 1 else self._directory.with_name(f"{self._directory.name}.{attempt}")
        return Topology(directory, replicas=self._replicas, spec=self._spec, zk_tick_ms=ZK_TICK_MS)

    @property
    def connect_string(self) -> str:
        return self.topology.ensemble.connect_string

    def start(self) -> None:
        for attempt in range(1, 4):
            if attempt > 1:
                self.topology = self._make(attempt)
                self.data_root = self.topology.data_root
            try:
                self.topology.start()
                break
            except EnsembleError:
                # Topology gives its ensemble 60 s and probes ports racily; on a busy shared machine either
                # can fail: start afresh in a new folder.
                self.topology.stop()
                if attempt == 3:
                    raise
            except BaseException:
                self.topology.stop()
                raise
        if self._rate:
            self.topology.start_producer(producer_args(self._rate))

    def stop(self) -> None:
        self.topology.stop()

    def replica_ids(self) -> list[str]:
        return [r.replica_id for r in self.topology]

    def pid(self, replica_id: str) -> int | None:
        replica = self.topology.replica(replica_id)
        return replica.pid if replica.alive else None

    def ready(self, replica_id: str) -> bool:
        replica = self.topology.replica(replica_id)
        return replica.alive and _http_ok(replica.port, "/readyz")

    def terminate(self, replica_id: str) -> None:
        self.topology.replica(replica_id).stop(HANDOVER_TIMEOUT_S + 30)

    def kill(self, replica_id: str) -> None:
        replica = self.topology.replica(replica_id)
        replica.signal(signal.SIGKILL)
        if replica.process is not None:
            replica.process.wait(30)

    def restart(self, replica_id: str) -> None:
        self.topology.restart(replica_id)


class NaiveCluster:
    """Three ``python -m bench._naive`` replicas (kazoo's Election, cold Spark on election) plus a producer."""

    def __init__(self, directory: Path, *, rate: float, replicas: int = 3) -> None:
        self.label = "naive"
        self.group = "bench"
        self.directory = directory
        self.data_root = directory / "data"
        self.logs = directory / "logs"
        self._rate = rate
        self._ids = [f"replica-{i}" for i in range(1, replicas + 1)]
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, Path] = {}
        self._starts = 0
        self._stack = contextlib.ExitStack()
        self._ensemble: Ensemble | None = None
        self._producer: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        assert self._ensemble is not None
        return self._ensemble.connect_string

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.data_root.mkdir(parents=True, exist_ok=True)
        self._ensemble = self._stack.enter_context(
            running_ensemble(self.directory / "zk", tick_ms=ZK_TICK_MS, timeout_s=ENSEMBLE_START_S,
                             attempts=ENSEMBLE_ATTEMPTS))
        for replica_id in self._ids:
            self._launch(replica_id)
        if self._rate:
            with (self.logs / "producer.log").open("ab") as log:
                self._producer = subprocess.Popen(
                    [sys.executable, "-m", "tenure", "produce", "--data-root", str(self.data_root),
                     *producer_args(self._rate)], stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                    preexec_fn=die_with_parent(signal.SIGTERM))  # noqa: PLW1509 - only prctl

    def _launch(self, replica_id: str) -> None:
        self._starts += 1
        log_path = self.logs / f"{replica_id}.{self._starts}.log"
        with log_path.open("ab") as log:
            self._procs[replica_id] = subprocess.Popen(
                [sys.executable, "-m", "bench._naive", "--zk", self.connect_string, "--group", self.group,
                 "--data-root", str(self.data_root), "--replica-id", replica_id,
                 "--session-timeout-s", f"{SESSION_TIMEOUT_S:g}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM))  # noqa: PLW1509 - only prctl
        self._logs[replica_id] = log_path

    def stop(self) -> None:
        try:
            if self._producer is not None and self._producer.poll() is None:
                self._producer.terminate()
                self._producer.wait(10)
            for replica_id in self._ids:
                self._stop_process(replica_id, signal.SIGTERM)
        finally:
            self._stack.close()

    def replica_ids(self) -> list[str]:
        return list(self._ids)

    def pid(self, replica_id: str) -> int | None:
        proc = self._procs.get(replica_id)
        return proc.pid if proc is not None and proc.poll() is None else None

    def ready(self, replica_id: str) -> bool:
        # Ready = its client joined the election (it prints "waiting" just before ``Election.run``).
        if self.pid(replica_id) is None:
            return False
        with contextlib.suppress(OSError):
            return b'"waiting"' in self._logs[replica_id].read_bytes()
        return False

    def _stop_process(self, replica_id: str, sig: int) -> None:
        proc = self._procs.get(replica_id)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(HANDOVER_TIMEOUT_S + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def terminate(self, replica_id: str) -> None:
        self._stop_process(replica_id, signal.SIGTERM)

    def kill(self, replica_id: str) -> None:
        self._stop_process(replica_id, signal.SIGKILL)

    def restart(self, replica_id: str) -> None:
        self._stop_process(replica_id, signal.SIGTERM)
        self._launch(replica_id)


def rss(cluster: Cluster, replica_id: str) -> int:
    """Resident bytes of a replica's process tree (the Python process plus its Spark JVM)."""
    pid = cluster.pid(replica_id)
    return process_tree_rss(pid) if pid is not None else 0
