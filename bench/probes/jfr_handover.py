"""Java Flight Recorder on the successor's driver JVM during its first trigger (issue 30).

`.venv/bin/python -m bench.probes.jfr_handover OUT [HANDOVERS]` (from the repository root) runs the handover
bench's topology (3 warm replicas, 2 000 records/s, `bench._handover.change`) with every JVM recording
(`JDK_JAVA_OPTIONS=-XX:StartFlightRecording`, the `profile` settings: a Java stack sample every 10 ms per running
thread, native and blocking events from 10-20 ms). After each SIGTERM handover it dumps the successor's last
minute (`jcmd JFR.dump`) to `OUT/handover-N.jfr`, and writes `OUT/handover-N.json`: the successor's log times
(`query_started`, the first batch function's start and its steps) that `bench.probes.jfr_timeline` cuts the
recording with: the five handovers of `bench/results/issue-30-jfr/first-trigger.md`, which
`docs/performance/first-batch.md` quotes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench._cluster import CommitTimeline, TenureCluster
from bench._handover import change
from bench._split import read_log

_RATE = 2000.0


def _driver_jvm(replica_pid: int) -> int:
    for child in psutil.Process(replica_pid).children(recursive=True):
        if child.name() == "java" and any("SparkSubmit" in part for part in child.cmdline()):
            return int(child.pid)
    raise RuntimeError(f"no driver JVM under replica process {replica_pid}")


def _boundaries(log: Path, epoch: int, batch_id: int) -> dict[str, float]:
    """The successor's query start and first batch function's start and steps, from its log (epoch seconds)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        events = read_log([log])
        started = [e for e in events if e.event == "query_started" and e.fields.get("epoch") == epoch]
        batch = [e for e in events if e.event == "batch_committed" and e.fields.get("epoch") == epoch
                 and e.fields.get("batch") == batch_id and "read_s" in e.fields]
        if started and batch:
            fields = batch[0].fields
            names = ("batch_s", "durable_s", "read_s", "stage_s", "commit_s", "publish_s", "delta_s")
            steps: dict[str, float] = {k: float(fields[k]) for k in names if k in fields}
            return {"query_started": started[0].at, "batch_committed": batch[0].at,
                    "batch_fn_start": batch[0].at - steps["batch_s"], **steps}
        time.sleep(0.5)
    raise TimeoutError(f"no query_started/batch_committed for epoch {epoch} batch {batch_id} in {log}")


def main() -> None:
    out = Path(sys.argv[1]).resolve()
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    out.mkdir(parents=True, exist_ok=True)
    os.environ["JDK_JAVA_OPTIONS"] = "-XX:StartFlightRecording=settings=profile,name=tenure"
    cluster = TenureCluster(Path("/tmp/jfr-work"), standby="warm", rate=_RATE, replicas=3)
    cluster.start()
    try:
        with CommitTimeline(cluster.connect_string, cluster.group) as timeline:
            for index in range(1, count + 1):
                row = change(cluster, timeline, crash=False)
                successor = row["to"]
                pid = cluster.pid(successor)
                assert pid is not None
                first = next(c for c in timeline.snapshot() if c.batch_id == row["first_batch_id"])
                times = _boundaries(cluster.topology.logs / f"{successor}.log", first.epoch, first.batch_id)
                subprocess.run(["jcmd", str(_driver_jvm(pid)), "JFR.dump", "name=tenure", "maxage=90s",
                                f"filename={out / f'handover-{index}.jfr'}"], check=True, capture_output=True)
                (out / f"handover-{index}.json").write_text(json.dumps({**row, **times}, indent=1))
                print(f"handover {index}: gap {row['gap_s']} s to {successor}", file=sys.stderr, flush=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
