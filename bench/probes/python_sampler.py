"""Which Python processes Spark starts during handovers, and when: a sampler run beside a handover bench.

`.venv/bin/python -m bench.probes.python_sampler` (for 15 minutes): every 0.5 s, each Python process of Spark's not
seen before (its daemons, workers, the streaming source runner, a PySpark shell), written as one JSON line with its
pid, parent and creation time to `/tmp/daemons.jsonl`. It ran beside the handover runs of
`bench/results/issue-30-progress-2/` and `bench/results/issue-30-lazy/` (kept there as `python-processes.jsonl`),
behind `query-starts.md` and `process-parents.md`, which `docs/performance/first-batch.md` quotes."""

import json
import time

import psutil

_MARKS = ("pyspark.daemon", "python_streaming_source_runner", "pyspark.sql.worker")


def _spark_python(cmd: str) -> bool:
    return any(mark in cmd for mark in _MARKS) or ("streaming" in cmd and "pyspark" in cmd)


def main() -> None:
    seen: set[int] = set()
    end = time.time() + 900
    with open("/tmp/daemons.jsonl", "w") as out:
        while time.time() < end:
            for proc in psutil.process_iter(["pid", "cmdline", "create_time", "ppid"]):
                cmd = " ".join(proc.info["cmdline"] or [])
                if _spark_python(cmd) and proc.info["pid"] not in seen:
                    seen.add(proc.info["pid"])
                    out.write(json.dumps({"pid": proc.info["pid"], "ppid": proc.info["ppid"],
                                          "created": proc.info["create_time"], "cmd": cmd[-120:]}) + "\n")
                    out.flush()
            time.sleep(0.5)


if __name__ == "__main__":
    main()
