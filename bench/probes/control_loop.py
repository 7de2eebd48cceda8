"""Does the leader's control loop slow its steady state? The throughput bench's runs, with a quieter loop added.

The leader's control thread calls `execute()` every `idle_backoff_s` (0.1 s) while a batch runs: one call into
Spark's JVM (`query.isActive`, through the probe thread) and the progress listener's queue each time, and a
housekeeping round (archiving, the backlog gauge) at most once a second.

`.venv/bin/python -m bench.probes.control_loop [ROUNDS]` (from the repository root, nothing else running)
produces the throughput bench's records (1 000 000 in files of 10 000), then, ROUNDS times in a rotating order,
runs three ways over hard links of them (`bench/_throughput.py`, paired by `bench/_paired.py`):

- `bare`: the bare query (`bench/_bare.py`);
- `tenure`: one `tenure run --career spark` replica as shipped (`execute()` every 0.1 s);
- `tenure, 1 s loop`: the same replica with `idle_backoff_s = 1.0` (a config file), so its control thread calls
  into the JVM a tenth as often; housekeeping still runs about once a second.

It writes every run's figures to `results.json` and the medians over rounds to `results.md` in
`bench/results/issue-29-loop/` (`--render` writes `results.md` again from `results.json`): the figures
`docs/performance/delta-output.md` quotes for the control loop (issue 29).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench._paired import main
from bench._throughput import _run_bare, _run_tenure
from bench.probes import results_folder
from tenure.service.replica import ReplicaSpec


def _quiet_loop(work: Path, source: Path, records: int) -> dict[str, Any]:
    return _run_tenure(work, source, records, spec=ReplicaSpec(idle_backoff_s=1.0))


if __name__ == "__main__":
    main("bench.probes.control_loop", results_folder("issue-29-loop"),
         "Does the control loop slow the leader's steady state?",
         {"bare": _run_bare, "tenure": _run_tenure, "tenure, 1 s loop": _quiet_loop})
