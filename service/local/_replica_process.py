"""One `tenure run` child process: its command line from a spec, its signals, pauses and faults, its metrics and
its stop, with every descendant reaped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from tenure.service.local._ensemble import die_with_parent
from tenure.service.ops import by_queue, scrape
from tenure.service.replica import (
    BATCHES,
    IS_LEADER,
    LEADER_EPOCH,
    RECORDS,
    SOURCE_BACKLOG_FILES,
    ZK_CONNECTED,
    ReplicaSpec,
    arm,
    pause_descendants,
    pause_tree,
    resume_tree,
    tree_pids,
)

__all__ = ["ReplicaLaunch", "ReplicaProcess", "ReplicaStatus"]


@dataclass(frozen=True)
class ReplicaStatus:
    """One row of the status view, from a replica's /metrics."""

    replica_id: str
    pid: int | None
    up: bool
    leader: bool
    epoch: int
    batches: int
    records: int
    backlog: int
    zk_connected: bool
    led: tuple[int, ...] = ()  # the queues it leads, by number


@dataclass(frozen=True)
class ReplicaLaunch:
    """How to launch one replica other than as a plain local process: a command prefix (for example
    ``ip netns exec NAME``) and the address its metrics listen on and are scraped at."""

    prefix: tuple[str, ...] = ()
    metrics_host: str = "127.0.0.1"


def _replica_preexec(hold_signals: bool) -> Callable[[], None]:
    """The child's set-up before exec: SIGTERM when its parent dies, and with ``hold_signals`` SIGTERM and SIGINT
    blocked (the mask survives exec). A replica of this release unblocks them once its handlers are in place
    (``ReplicaControl.install_signal_handlers``), so a stop sent while it still imports waits for them and ends
    in a clean exit 0 instead of the signal's default death. An earlier release (``module``) would never
    unblock them: it is launched without."""
    die = die_with_parent(signal.SIGTERM)

    def _set() -> None:
        die()
        if hold_signals:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})

    return _set


class ReplicaProcess:
    """One `tenure run` child process with its metrics port and log file, its command line made from ``spec``
    (:meth:`ReplicaSpec.command`) with ``zk``, its id, its metrics address and its fault file.

    A pause stops the whole process tree (the Python process and its Spark JVM), as a frozen VM or container
    would: ``signal(SIGSTOP)`` and ``signal(SIGCONT)`` mean :meth:`pause` and :meth:`resume`, and :meth:`stop`
    resumes the tree before it terminates or kills anything. With ``fault_file`` the replica runs with
    ``--fault-file`` (see ``tenure.service.replica._faults``).
    """

    def __init__(self, replica_id: str, port: int, spec: ReplicaSpec, log_path: Path,
                 env: dict[str, str] | None = None, *, zk: str, command_prefix: list[str] | None = None,
                 metrics_host: str = "127.0.0.1", fault_file: Path | None = None, module: str = "tenure",
                 cwd: Path | None = None) -> None:
        self.replica_id = replica_id
        self.port = port
        self.spec = spec
        self.log_path = log_path
        self.metrics_host = metrics_host
        self.fault_file = fault_file
        # ``module`` and ``cwd``: an earlier release's replica (tests/test_upgrade.py) runs ``service`` from its tree
        self._cwd = cwd
        self._cmd = [*(command_prefix or []), *spec.command(zk=zk, replica_id=replica_id, metrics_host=metrics_host,
                                                            metrics_port=port, fault_file=fault_file, module=module)]
        self._env = {**os.environ, **(env or {})}
        self._hold_signals = module == "tenure"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ReplicaProcess:
        with self.log_path.open("ab") as log:
            # Own session: a terminal's Ctrl-C reaches only `tenure up`, which stops replicas in order; if
            # `tenure up` itself dies, the kernel sends SIGTERM, so replicas still hand over.
            self.process = subprocess.Popen(self._cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self._cwd,
                                            stdin=subprocess.DEVNULL, env=self._env, start_new_session=True,
                                            preexec_fn=_replica_preexec(self._hold_signals))  # noqa: PLW1509
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the replica; SIGSTOP and SIGCONT pause and resume its whole process tree."""
        if not self.alive:
            return
        assert self.process is not None
        if sig == signal.SIGSTOP:
            self.pause()
        elif sig == signal.SIGCONT:
            self.resume()
        else:
            self.process.send_signal(sig)

    def pause(self) -> list[int]:
        """SIGSTOP the replica and every descendant (its Spark JVM); returns the pids stopped."""
        return pause_tree(self.process.pid) if self.alive and self.process is not None else []

    def freeze_spark(self) -> list[int]:
        """SIGSTOP the replica's Spark JVM and its Python workers, not the replica's own process (a JVM stuck in
        GC or a native call); :meth:`resume` thaws them. Returns the pids stopped."""
        return pause_descendants(self.process.pid) if self.alive and self.process is not None else []

    def resume(self) -> list[int]:
        """SIGCONT the replica and every descendant, whoever stopped them (a drill, or an injected fault)."""
        return resume_tree(self.process.pid) if self.alive and self.process is not None else []

    def stopped(self) -> bool:
        """True while the replica's own process is stopped (SIGSTOP; psutil status 'stopped')."""
        if not self.alive or self.process is None:
            return False
        try:
            return bool(psutil.Process(self.process.pid).status() == psutil.STATUS_STOPPED)
        except psutil.NoSuchProcess:
            return False

    def arm(self, point: str, action: str) -> Path:
        """Arm one fault on this replica's fault file (``POINT ACTION``, see ``tenure.service.replica._faults``)."""
        if self.fault_file is None:
            raise ValueError(f"{self.replica_id} runs without --fault-file: start the topology with "
                             "fault_files=True")
        arm(self.fault_file, point, action)
        return self.fault_file

    def disarm(self) -> None:
        """Remove a fault armed but never reached (before a restart, so the new process does not take it)."""
        if self.fault_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.fault_file.unlink()

    def metrics(self) -> dict[str, float]:
        return scrape(self.port, host=self.metrics_host) if self.alive else {}

    def status(self) -> ReplicaStatus:
        """The replica's row, over every queue of its group: leading one of them, its highest epoch, the batches and
        records of all, the backlog of all."""
        m = self.metrics()
        return ReplicaStatus(
            replica_id=self.replica_id,
            pid=self.pid if self.alive else None,
            up=bool(m),
            leader=1.0 in by_queue(m, IS_LEADER).values(),
            epoch=int(max(by_queue(m, LEADER_EPOCH).values(), default=0)),
            batches=int(sum(by_queue(m, f"{BATCHES}_total", outcome="committed").values())),
            records=int(sum(by_queue(m, f"{RECORDS}_total", outcome="written").values())),
            backlog=int(sum(by_queue(m, SOURCE_BACKLOG_FILES).values())),
            zk_connected=m.get(ZK_CONNECTED) == 1.0,
            led=tuple(sorted(q for q, leading in by_queue(m, IS_LEADER).items() if leading == 1.0)),
        )

    def stop(self, timeout_s: float) -> int | None:
        """SIGTERM (the whole tree resumed first, in case a drill or a fault paused it), wait, then SIGKILL;
        returns the exit code. Descendants left behind (a JVM whose parent was killed) are killed too."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            children = _descendants(self.process.pid)
            resume_tree(self.process.pid)
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                resume_tree(self.process.pid)  # stopped again meanwhile (an armed pause): SIGKILL acts anyway
                self.process.kill()
                self.process.wait()
            _reap_orphans(children)
        return self.process.returncode

    def kill(self, timeout_s: float = 30.0) -> int | None:
        """SIGKILL at once (the tree resumed first), reap it, then kill any descendant it left behind."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            children = _descendants(self.process.pid)
            resume_tree(self.process.pid)
            self.process.kill()
            self.process.wait(timeout=timeout_s)
            _reap_orphans(children)
        return self.process.returncode


def _descendants(pid: int) -> list[psutil.Process]:
    procs = []
    for child in tree_pids(pid)[1:]:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(child))
    return procs


def _reap_orphans(children: list[psutil.Process], grace_s: float = 5.0) -> None:
    """Give a dead replica's descendants ``grace_s`` to exit on their own (a Spark JVM exits when its parent's
    pipe closes), then SIGCONT and SIGKILL whichever is left."""
    _gone, alive = psutil.wait_procs(children, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.resume()
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)
