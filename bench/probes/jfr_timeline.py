"""The successor's first trigger from its driver JVM's recording (`bench.probes.jfr_handover`), as a timeline.

`.venv/bin/python -m bench.probes.jfr_timeline DIR` reads each `handover-N.jfr` (with the JDK's `jfr print --json`)
and `handover-N.json`.
For the window from `query_started` to the first batch function's start (±0.2 s) it writes `DIR/timeline-N.txt`:
every event of the query's stream execution thread (Java and native stack samples, socket reads and writes with
their durations, the top five frames) and every process the JVM started. To stdout, a markdown table per handover:
the window, when Spark started the query's Python streaming source runner, and when the runner first answered
(the thread's first socket-channel read after the start: until then it waits in
`PythonWorkerFactory.createSimpleWorker` for the new interpreter to connect). It made the table and the
timelines of `bench/results/issue-30-jfr/` (`first-trigger.md`, `timeline-N.txt`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

_EVENTS = "jdk.ExecutionSample,jdk.NativeMethodSample,jdk.SocketRead,jdk.SocketWrite,jdk.ProcessStart"
_RUNNER = "python_streaming_source_runner"


def _instant(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _seconds(duration: str | None) -> float:
    """An ISO-8601 duration as JFR prints it (``PT0.137S``, ``PT1M2.5S``) in seconds."""
    if not duration:
        return 0.0
    text = duration.removeprefix("PT").removesuffix("S")
    minutes, _, seconds = text.rpartition("M")
    return float(minutes or 0) * 60 + float(seconds or 0)


def _top(values: dict[str, Any], count: int = 5) -> str:
    frames = ((values.get("stackTrace") or {}).get("frames")) or []
    names = []
    for frame in frames[:count]:
        method = frame.get("method") or {}
        names.append(f"{((method.get('type') or {}).get('name') or '').rsplit('/', 1)[-1]}.{method.get('name', '')}")
    return " < ".join(names)


def _timeline(recording: Path, start: float, end: float) -> list[tuple[float, float, str, str]]:
    printed = subprocess.run(["jfr", "print", "--json", "--events", _EVENTS, str(recording)], check=True,
                             capture_output=True, text=True).stdout
    rows = []
    for event in json.loads(printed)["recording"]["events"]:
        values, kind = event["values"], event["type"].removeprefix("jdk.")
        at = _instant(values["startTime"])
        if not start - 0.2 <= at <= end + 0.2:
            continue
        if kind == "ProcessStart":
            rows.append((at - start, 0.0, kind, (values.get("command") or "")[-110:]))
            continue
        thread = (values.get("eventThread") or values.get("sampledThread") or {}).get("javaName") or ""
        if thread.startswith("stream execution thread"):
            rows.append((at - start, _seconds(values.get("duration")), kind, _top(values)))
    return sorted(rows)


def main() -> None:
    folder = Path(sys.argv[1])
    print("| handover | gap s | query_started → batch function s | runner started s | runner first answered s |")
    print("|---|---|---|---|---|")
    for meta_path in sorted(folder.glob("handover-*.json")):
        meta = json.loads(meta_path.read_text())
        start, end = meta["query_started"], meta["batch_fn_start"]
        rows = _timeline(meta_path.with_suffix(".jfr"), start, end)
        (folder / meta_path.name.replace("handover", "timeline").replace(".json", ".txt")).write_text(
            "".join(f"{at:7.3f} {took:6.3f} {kind:18} {what}\n" for at, took, kind, what in rows))
        launched = next((at for at, _, kind, what in rows if kind == "ProcessStart" and _RUNNER in what), None)
        answered = next((at for at, _, kind, what in rows if launched is not None and at > launched
                         and kind == "SocketRead" and what.startswith("SocketChannelImpl.read")), None)
        print(f"| {meta_path.stem} | {meta['gap_s']} | {end - start:.3f} | "
              f"{'—' if launched is None else f'{launched:.3f}'} | {'—' if answered is None else f'{answered:.3f}'} |")


if __name__ == "__main__":
    main()
