"""The fault-injection seam and whole-tree pauses, on real processes and real signals."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tenure.service.local import wait_for
from tenure.service.replica import FaultFile, InjectedFault, arm, pause_tree, resume_tree, tree_pids

_CHILD = textwrap.dedent("""
    import subprocess, sys
    from pathlib import Path
    from tenure.service.replica import FaultFile
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print("ready", child.pid, flush=True)
    sys.stdin.readline()
    FaultFile(Path(sys.argv[1]))("after_commit")
    print("resumed", flush=True)
    child.kill()
    child.wait()
""")


def _wait_status(pids: list[int], status: str, timeout_s: float = 20.0) -> None:
    """Wait until every process of ``pids`` is in psutil's ``status``; fail naming each one's status."""
    try:
        wait_for(lambda: all(psutil.Process(pid).status() == status for pid in pids), timeout_s,
                 f"{pids} all {status}", interval_s=0.02)
    except TimeoutError:
        raise AssertionError(f"{[(p, psutil.Process(p).status()) for p in pids]} not all {status}") from None


@pytest.fixture
def armed_child(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A Python process with a child of its own that reaches the ``after_commit`` point on a line of stdin."""
    fault = tmp_path / "fault"
    process = subprocess.Popen([sys.executable, "-c", _CHILD, str(fault)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        words = process.stdout.readline().split()
        assert words[0] == "ready"
        yield process, int(words[1]), fault
    finally:
        resume_tree(process.pid)
        for pid in reversed(tree_pids(process.pid)):
            psutil.Process(pid).kill()
        process.wait(30)


def test_a_pause_fault_stops_the_whole_tree_until_resumed(armed_child) -> None:  # type: ignore[no-untyped-def]
    """A ``pause`` fault at its point stops the process and its child (SIGSTOP on the whole tree) until resumed from
    outside, then the process goes on; the fault file is taken, so it fires once."""
    process, child, fault = armed_child
    arm(fault, "after_commit", "pause")
    process.stdin.write("go\n")
    process.stdin.flush()
    _wait_status([process.pid, child], psutil.STATUS_STOPPED)
    assert not fault.exists(), "a fault fires once: the file is taken"
    assert sorted(resume_tree(process.pid)) == sorted([process.pid, child])
    assert "resumed" in process.stdout.read()  # after the fault_injected event (unconfigured structlog: stdout)
    assert process.wait(30) == 0


def test_a_kill_fault_is_a_real_sigkill(armed_child) -> None:  # type: ignore[no-untyped-def]
    """A ``kill`` fault at its point ends the process with a real SIGKILL (exit -9)."""
    process, _child, fault = armed_child
    arm(fault, "after_commit", "kill")
    process.stdin.write("go\n")
    process.stdin.flush()
    assert process.wait(30) == -9


def test_pause_tree_from_outside_stops_parent_and_child(armed_child) -> None:  # type: ignore[no-untyped-def]
    """``pause_tree`` from outside stops a process and its child, and ``resume_tree`` lets both run again."""
    process, child, _fault = armed_child
    assert sorted(pause_tree(process.pid)) == sorted([process.pid, child])
    _wait_status([process.pid, child], psutil.STATUS_STOPPED)
    resume_tree(process.pid)
    _wait_status([process.pid, child], psutil.STATUS_SLEEPING)


def test_a_raise_fault_fires_at_its_point_only_and_once(tmp_path: Path) -> None:
    """A ``raise`` fault raises ``InjectedFault`` at its own point only (another point passes), once: the next time the
    point is reached nothing happens."""
    fault = tmp_path / "fault"
    hook = FaultFile(fault)
    hook("after_commit")  # nothing armed: nothing happens
    arm(fault, "after_publish", "raise")
    hook("after_commit")
    assert fault.exists()
    with pytest.raises(InjectedFault, match="after_publish"):
        hook("after_publish")
    hook("after_publish")


def test_a_malformed_fault_file_says_what_to_write(tmp_path: Path) -> None:
    """A fault file naming no known point, or arming an unknown action, fails with what to write instead."""
    fault = tmp_path / "fault"
    fault.write_text("after_comit pause\n")
    with pytest.raises(InjectedFault, match="write 'POINT ACTION' with POINT one of inaugurate"):
        FaultFile(fault)("after_commit")
    with pytest.raises(InjectedFault):
        arm(fault, "after_commit", "explode")
