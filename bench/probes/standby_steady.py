"""Does the warm-up slow the leader's steady state? The throughput bench's runs, with a cold-standby replica added.

`.venv/bin/python -m bench.probes.standby_steady [ROUNDS]` (from the repository root, nothing else
running) produces the throughput bench's records (1 000 000 in files of 10 000), then, ROUNDS times in a rotating
order, runs the bench's three ways over hard links of them (`bench/_throughput.py`, paired by `bench/_paired.py`):

- `bare`: the bare query (`bench/_bare.py`);
- `tenure warm`: one `tenure run --career spark` replica with the default warm standby, whose JVM ran the warm-up's
  query over a scratch sample (`career/spark/_warmup.py`) before it led;
- `tenure cold`: the same replica with `--standby cold`, whose JVM starts at inauguration and runs only the
  leader's query.

It writes every run's figures to `results.json` and the medians over rounds to `results.md` in
`bench/results/issue-29-standby/` (`--render` writes `results.md` again from `results.json`): the figures
`docs/performance/delta-output.md` quotes for the warm-up's effect on the steady state (issue 29).
"""

from __future__ import annotations

from bench._paired import main
from bench._throughput import _run_bare, _run_tenure
from bench.probes import results_folder

if __name__ == "__main__":
    main("bench.probes.standby_steady", results_folder("issue-29-standby"),
         "Does the warm-up slow the leader's steady state?", {
             "bare": _run_bare,
             "tenure warm": lambda work, source, records: _run_tenure(work, source, records, standby="warm"),
             "tenure cold": lambda work, source, records: _run_tenure(work, source, records, standby="cold"),
         })
