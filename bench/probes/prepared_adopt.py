"""What the prepared copy saves at inauguration: a term's checkpoint taken in full against one taken from a
follower's prepared copy (issue 53), alternating in one process on one data root.

`.venv/bin/python -m bench.probes.prepared_adopt [ROUNDS] [BATCHES]` builds a term folder shaped like a handover
run's (BATCHES batches, default 160: per batch an offset and a commit file and a state changelog per partition, with
their checksum files; a snapshot zip per partition every 40 batches), syncs it, and lets a follower's
``PreparedCheckpoint`` catch up with it. Then, for each round: the leader adds one batch; a new term adopts the
checkpoint in full (``adopt_checkpoint``: link every file, fsync every file and folder) and, in the other order the
next round, from the prepared copy (catch it up with what is new, check it, fsync what it linked and its folders,
rename); each new term's folder is removed again and the follower catches up for the next round (untimed). Prints
one JSON line per round and a summary line: the rounds behind `bench/results/issue-53-standby/prepared-adopt.md`,
which `docs/performance/standby-state.md` quotes.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tenure.career._durable import sync_tree
from tenure.career.spark._checkpoints import PreparedCheckpoint, adopt_checkpoint
from tenure.career.spark._layout import Layout

_SNAPSHOT_EVERY = 40


def _batch(term: Path, batch: int) -> None:
    """One batch's files, each written under a temporary name and renamed, as Spark's checkpoint manager does."""
    files = {f"offsets/{batch}": 400, f"commits/{batch}": 30}
    for partition in (0, 1):
        files[f"state/0/{partition}/{batch + 1}.changelog"] = 20_000
        if (batch + 1) % _SNAPSHOT_EVERY == 0:
            files[f"state/0/{partition}/{batch + 1}.zip"] = 2_000_000
    for name, size in files.items():
        path = term / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for written in (path, path.with_name(f".{path.name}.crc")):
            tmp = written.with_name(f".{written.name}.tmp")
            tmp.write_bytes(os.urandom(size if written is path else 16))
            os.replace(tmp, written)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 160
    scratch = Path(tempfile.mkdtemp(prefix="prepared-adopt-"))
    layout = Layout(scratch)
    source = layout.term_checkpoint(1)
    for batch in range(batches):
        _batch(source, batch)
    sync_tree(source)
    prepared = PreparedCheckpoint(layout, "probe")
    prepared.catch_up()
    times: dict[str, list[float]] = {"full": [], "prepared": []}
    try:
        for index in range(rounds):
            batch = batches + index
            _batch(source, batch)  # the leader's last batch, after the follower's last catch-up
            row: dict[str, float | int | str] = {"round": index, "files": sum(len(f) for _, _, f in os.walk(source))}
            for way in ("full", "prepared")[:: 1 if index % 2 else -1]:
                started = time.perf_counter()
                term, _ = adopt_checkpoint(layout, 2 + index, prepared=prepared if way == "prepared" else None,
                                           committed=batch)
                row[way] = round(time.perf_counter() - started, 4)
                if way == "prepared":
                    row["verdict"], row["linked"] = prepared.verdict, prepared.linked_at_take
                times[way].append(float(row[way]))
                shutil.rmtree(term)
                prepared.catch_up()  # the follower again, untimed
            print(json.dumps(row), flush=True)
        print(json.dumps({"median_full_s": statistics.median(times["full"]),
                          "median_prepared_s": statistics.median(times["prepared"]),
                          "ratio": round(statistics.median(times["prepared"]) / statistics.median(times["full"]), 3)}))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
