"""Keeping a local topology's replicas running: `tenure up` restarts a replica that exits, as compose does.

A replica exits on its own when it crashes or when it gives its lock up because its work stopped progressing
(exit 4, ``tenure.service.replica.EXIT_STALLED``); restarted, it comes back as a warm follower. A replica that keeps
exiting is restarted later and later (a crash loop must not spin), and each exit and restart is reported.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tenure.career.lifecycle import STALLED
from tenure.service.local._replica_process import ReplicaProcess
from tenure.service.local._topology import Topology
from tenure.service.replica import EXIT_STALLED

__all__ = ["Supervisor", "exit_meaning"]

_FIRST_DELAY_S = 1.0
_MAX_DELAY_S = 30.0
_FORGIVE_AFTER_S = 60.0  # up this long, a replica's earlier exits no longer lengthen its next delay


def exit_meaning(code: int | None) -> str:
    """An exit code in words, for the terminal."""
    if code == EXIT_STALLED:
        return "gave its lock up: its work stopped progressing"
    if code == 3:
        return "its graceful handover overran"
    if code is not None and code < 0:
        return f"killed by signal {-code}"
    return "crashed" if code else "stopped"


@dataclass
class _Restart:
    exits: int = 0
    due: float | None = None
    started: float = 0.0


class Supervisor:
    """Restarts the topology's replicas that exit, with a back-off per replica: 1 s, doubling to 30 s, forgiven
    after a minute up. Call :meth:`check` every second or so from the owner's loop.

    Example::

        supervisor = Supervisor(topology, report=print)
        while running:
            supervisor.check()
            time.sleep(1)
    """

    def __init__(self, topology: Topology, report: Callable[[str], None], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._topology = topology
        self._report = report
        self._clock = clock
        self._state = {r.replica_id: _Restart(started=clock()) for r in topology.replicas}

    @property
    def restarts(self) -> dict[str, int]:
        """Exits seen per replica."""
        return {name: state.exits for name, state in self._state.items()}

    def check(self) -> None:
        now = self._clock()
        for replica in list(self._topology.replicas):
            state = self._state.setdefault(replica.replica_id, _Restart(started=now))
            if replica.alive:
                if state.exits and now - state.started > _FORGIVE_AFTER_S:
                    state.exits = 0
                continue
            if state.due is None:
                state.exits += 1
                delay = min(_FIRST_DELAY_S * 2 ** (state.exits - 1), _MAX_DELAY_S)
                state.due = now + delay
                code = replica.process.returncode if replica.process is not None else None
                detail = _stall_detail(replica) if code == EXIT_STALLED else ""
                self._report(f"{replica.replica_id} exited with {code} ({exit_meaning(code)}{detail}); "
                             f"restarting in {delay:g} s")
            elif now >= state.due:
                new = self._topology.restart(replica.replica_id)
                state.due, state.started = None, now
                self._report(f"{replica.replica_id} restarted (pid {new.pid})")


def _stall_detail(replica: ReplicaProcess, tail_bytes: int = 65536) -> str:
    """``: <detail>`` of the last ``stalled`` event in the replica's log (its JSON lines; restarts append to the
    same file, so only a replica that just exited with ``EXIT_STALLED`` is asked), or nothing."""
    try:
        with Path(replica.log_path).open("rb") as log:
            log.seek(max(0, log.seek(0, 2) - tail_bytes))
            lines = log.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if f'"{STALLED}"' in line and line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == STALLED:
                return f": {event.get('detail')}"
    return ""
