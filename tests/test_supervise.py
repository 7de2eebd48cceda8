"""`tenure up`'s supervisor: which replicas it restarts, how long it waits, and what it says (pure logic: a
topology of stand-in processes and a fake clock; the real restart is in ``test_up.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from tenure.service.local._supervise import Supervisor, exit_meaning
from tenure.service.local._topology import Topology


@dataclass
class _Process:
    returncode: int | None = None


@dataclass
class _Replica:
    replica_id: str
    log_path: Path
    process: _Process = field(default_factory=_Process)
    pid: int = 100

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


@dataclass
class _Topology:
    replicas: list[_Replica]
    restarted: list[str] = field(default_factory=list)

    def restart(self, replica_id: str) -> _Replica:
        replica = next(r for r in self.replicas if r.replica_id == replica_id)
        replica.process, replica.pid = _Process(), replica.pid + 1
        self.restarted.append(replica_id)
        return replica


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def _supervisor(tmp_path: Path) -> tuple[Supervisor, _Topology, _Clock, list[str]]:
    topology = _Topology([_Replica("r1", tmp_path / "r1.log"), _Replica("r2", tmp_path / "r2.log")])
    clock, lines = _Clock(), []
    supervisor = Supervisor(cast(Topology, cast(Any, topology)), lines.append, clock=clock)
    return supervisor, topology, clock, lines


def test_a_replica_that_keeps_exiting_waits_longer_each_time_and_is_forgiven_after_a_minute_up(
        tmp_path: Path) -> None:
    """1 s, 2 s, 4 s … between exits that come one after another; a minute up starts the count over. Only the
    replica that exited is restarted, and each exit is said with its meaning and the stall's detail."""
    supervisor, topology, clock, lines = _supervisor(tmp_path)
    r1 = topology.replicas[0]
    (tmp_path / "r1.log").write_text('{"event": "stalled", "detail": "no batch finished for 121 s"}\n')
    delays = []
    for _ in range(4):
        r1.process.returncode = 4
        supervisor.check()
        delays.append(float(lines[-1].rsplit("restarting in ", 1)[1].removesuffix(" s")))
        clock.now += delays[-1] - 0.01
        supervisor.check()
        assert r1.process.returncode == 4, "restarted before its delay"
        clock.now += 0.01
        supervisor.check()
        assert r1.alive
        clock.now += 5
        supervisor.check()
    assert delays == [1, 2, 4, 8]
    assert topology.restarted == ["r1"] * 4 and supervisor.restarts == {"r1": 4, "r2": 0}
    assert "r1 exited with 4 (gave its lock up: its work stopped progressing: no batch finished for 121 s)" \
        in lines[0]
    clock.now += 61
    supervisor.check()
    r1.process.returncode = -9
    supervisor.check()
    assert lines[-1].endswith("(killed by signal 9); restarting in 1 s"), lines[-1]


def test_exit_meanings() -> None:
    """The supervisor tells an operator what each exit code of a replica means: 4 a stall's fail-stop, 3 a handover that
    overran, a signal with its number, any other non-zero a crash, 0 a clean stop."""
    assert [exit_meaning(c) for c in (4, 3, -15, 1, 0)] == [
        "gave its lock up: its work stopped progressing", "its graceful handover overran", "killed by signal 15",
        "crashed", "stopped"]
