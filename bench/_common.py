"""What every benchmark shares: results (JSON + markdown), percentiles, the machine, an embedded ensemble."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

__all__ = [
    "ENSEMBLE_ATTEMPTS",
    "ENSEMBLE_START_S",
    "BenchContext",
    "CpuMeter",
    "Result",
    "Target",
    "machine",
    "markdown_table",
    "percentiles",
    "process_tree_rss",
    "write_result",
]


@dataclass(frozen=True)
class BenchContext:
    """What ``bench.run`` hands each benchmark: sizes (``quick``), a scratch folder, the output folder."""

    quick: bool
    work: Path
    out: Path
    budget_s: float | None = None  # stop starting new rounds past this (a busy machine); None: no limit
    rounds: int | None = None  # rounds of a benchmark that alternates runs (throughput, latency); None: its own
    recipes: tuple[str, ...] | None = None  # the handover benchmark's recipes to run; None: all

    def rounds_or(self, default: int) -> int:
        """``--rounds`` if given, else 1 with ``--quick``, else ``default``."""
        return self.rounds if self.rounds is not None else (1 if self.quick else default)


@dataclass(frozen=True)
class Target:
    """One target of issue 9: what was measured against what was asked."""

    name: str
    measured: float | None
    target: str
    met: bool | None  # None: could not be measured

    def row(self) -> dict[str, Any]:
        verdict = "n/a" if self.met is None else ("met" if self.met else "MISSED")
        measured = "—" if self.measured is None else f"{self.measured:.4g}"
        return {"target": self.name, "measured": measured, "asked": self.target, "verdict": verdict}


@dataclass
class Result:
    """One benchmark's outcome: parameters, figures, a table for humans, targets, more tables, plots and notes.

    ``plots`` are file names relative to the folder the result is written to (``<name>.png`` by convention,
    drawn by the benchmark itself), so the markdown's images resolve wherever the folder is read.
    """

    name: str
    title: str
    command: str
    params: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    table: list[dict[str, Any]] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # title → rows, after the main table
    plots: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["targets"] = [asdict(t) for t in self.targets]
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Result:
        """The result ``to_json`` wrote (keys it does not know, from older or newer versions, are dropped)."""
        known = {k: v for k, v in body.items() if k in cls.__dataclass_fields__}
        known["targets"] = [Target(**t) for t in known.get("targets", [])]
        return cls(**known)

    def to_markdown(self) -> str:
        out = [f"### {self.title}", "", f"`{self.command}` — {self.seconds:.0f} s", ""]
        if self.error:
            out += [f"**Failed:** {self.error}", ""]
        if self.table:
            out += [markdown_table(self.table), ""]
        if self.targets:
            out += [markdown_table([t.row() for t in self.targets]), ""]
        for title, rows in self.tables.items():
            out += [f"**{title}**", "", markdown_table(rows), ""]
        out += [f"![{self.title}]({plot})" for plot in self.plots]
        out += [""] if self.plots else []
        out += [f"- {note}" for note in self.notes]
        return "\n".join(out).rstrip() + "\n"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """A GitHub markdown table from dicts (columns from the first row, then any new keys in order; no rows: a
    note saying so)."""
    if not rows:
        return "_(no rows)_"
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_result(out: Path, result: Result) -> tuple[Path, Path]:
    """Write ``<out>/<name>.json`` and ``<out>/<name>.md``; return both paths."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{result.name}.json", out / f"{result.name}.md"
    json_path.write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")  # key order kept: table columns
    md_path.write_text(result.to_markdown())
    return json_path, md_path


def percentiles(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, p50, p90, p99, max, mean of ``values`` (nearest-rank percentiles; ``None`` when empty)."""
    data = sorted(values)
    if not data:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None, "mean": None}

    def rank(p: float) -> float:
        return data[max(0, math.ceil(p / 100 * len(data)) - 1)]

    return {"n": len(data), "p50": rank(50), "p90": rank(90), "p99": rank(99), "max": data[-1],
            "mean": sum(data) / len(data)}


def machine() -> dict[str, Any]:
    """The machine the figures came from: cores, memory, CPU model, Python and Java versions."""
    cpu = "unknown"
    with contextlib.suppress(OSError):
        match = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = match.group(1).strip() if match else cpu
    mem_kb = 0
    with contextlib.suppress(OSError):
        match = re.search(r"^MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text(), re.M)
        mem_kb = int(match.group(1)) if match else 0
    java = "unknown"
    with contextlib.suppress(OSError):
        reply = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
        java = (reply.stderr or reply.stdout).splitlines()[0] if (reply.stderr or reply.stdout) else java
    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        spark_version = "not installed"
    return {"cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1), "cpu": cpu,
            "python": platform.python_version(), "java": java, "pyspark": spark_version,
            "kernel": platform.release()}


#: Starting the bench's ensemble: a loaded 2-core machine has taken over 60 s, and other work on this machine takes
#: ports too (between the probe and the launch one may go), so ``running_ensemble`` gets this long and these tries.
ENSEMBLE_START_S = 180.0
ENSEMBLE_ATTEMPTS = 5


def process_tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants, summed from ``/proc`` (0 if it is gone)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((Path("/proc") / str(current) / "statm").read_text().split()[1]) * page
        todo += children.get(current, [])
    return total


def _cpu_category(proc: psutil.Process, measured: set[int], roots: list[int]) -> str:
    if proc.pid in measured:
        if proc.pid in roots:
            return "driver"
        with contextlib.suppress(psutil.Error):
            if proc.name() == "java":
                return "jvm"
        return "workers"
    if proc.pid == os.getpid():
        return "bench"
    with contextlib.suppress(psutil.Error):
        if any("QuorumPeerMain" in part for part in proc.cmdline()):
            return "zookeeper"
    return "other"


def _describe(cpu_s: float, pid: int) -> str:
    """``"<command line, shortened> (<CPU> s)"`` of a process, or ``""`` for none."""
    if not pid:
        return ""
    try:
        proc = psutil.Process(pid)
        command = " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        command = f"pid {pid}"
    return f"{command[:80]} ({cpu_s:.1f} s)"


class CpuMeter:
    """CPU seconds spent by every process on the machine between two readings, by category: ``measured`` (a
    process tree under test: its root process ``driver``, its ``jvm`` and its other descendants ``workers``, such
    as Spark's Python workers), ``zookeeper`` (the embedded ensemble's servers), ``bench`` (this
    process: pollers, timelines) and ``other``; plus the machine's steal and I/O wait, and the wall seconds.

    Why: a ratio of two runs means little when something else took the cores during one of them.
    """

    def __init__(self) -> None:
        self._start: dict[int, tuple[float, float]] = {}
        self._started = 0.0
        self._roots: list[int] = []
        self._machine: Any = None

    def start(self, *roots: int) -> None:
        self._roots = list(roots)
        self._started = time.monotonic()
        self._machine = psutil.cpu_times()
        self._start = self._read()

    def _read(self) -> dict[int, tuple[float, float]]:
        times: dict[int, tuple[float, float]] = {}
        for proc in psutil.process_iter(["create_time"]):
            with contextlib.suppress(psutil.Error):
                cpu = proc.cpu_times()
                # With the children it has reaped: a Python worker that exits leaves its time to its parent. Not
                # init's: it reaps orphans, such as an earlier run's JVM outliving its Python process, whose whole
                # lifetime's time (81 s once, against a run of 50 s) would land in this run's ``other``.
                reaped = cpu.children_user + cpu.children_system if proc.pid != 1 else 0.0
                times[proc.pid] = (proc.info["create_time"], cpu.user + cpu.system + reaped)
        return times

    def _measured(self) -> set[int]:
        pids: set[int] = set()
        for root in self._roots:
            with contextlib.suppress(psutil.Error):
                parent = psutil.Process(root)
                pids |= {root, *(child.pid for child in parent.children(recursive=True))}
        return pids

    def stop(self) -> dict[str, Any]:
        """CPU seconds by category since :meth:`start`, ``wall_s``, ``cores_busy`` (all CPU / wall), and
        ``heaviest_other``: the command line and CPU seconds of the ``other`` process that used the most (a
        process that exited counts with the parent that reaped it, such as the shell that ran it)."""
        end, wall = self._read(), time.monotonic() - self._started
        machine = psutil.cpu_times()
        measured = self._measured()
        spent: dict[str, float] = dict.fromkeys(("driver", "jvm", "workers", "zookeeper", "bench", "other"), 0.0)
        heaviest: tuple[float, int] = (0.0, 0)
        for pid, (created, cpu) in end.items():
            before = self._start.get(pid)
            used = max(cpu - before[1] if before is not None and before[0] == created else cpu, 0.0)
            with contextlib.suppress(psutil.Error):
                category = _cpu_category(psutil.Process(pid), measured, self._roots)
                spent[category] += used
                if category == "other":
                    heaviest = max(heaviest, (used, pid))
        figures: dict[str, Any] = {f"{name}_cpu_s": round(value, 2) for name, value in spent.items()}
        figures["heaviest_other"] = _describe(*heaviest)
        figures["measured_cpu_s"] = round(spent["driver"] + spent["jvm"] + spent["workers"], 2)
        # Time the hypervisor gave this machine's cores to others, and time they sat waiting for the disk.
        figures["steal_s"] = round(getattr(machine, "steal", 0.0) - getattr(self._machine, "steal", 0.0), 2)
        figures["iowait_s"] = round(getattr(machine, "iowait", 0.0) - getattr(self._machine, "iowait", 0.0), 2)
        figures["wall_s"] = round(wall, 2)
        figures["cores_busy"] = round(sum(spent.values()) / wall, 3) if wall > 0 else 0.0
        return figures
