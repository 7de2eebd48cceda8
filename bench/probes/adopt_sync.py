"""What a term's checkpoint copy spends its time on: linking the tree, then making it durable file by file.

`.venv/bin/python -m bench.probes.adopt_sync CHECKPOINT [ROUNDS]` copies the term folder CHECKPOINT (a real one,
from a handover run) to a scratch folder beside it and syncs it once, as the previous term's per-batch fsyncs leave
it. Then, alternating,
for each round: hard-link the tree into a new folder (`_link_tree`, as `adopt_checkpoint` does), and make the
links durable either as `sync_tree` does (`fsync` of every file and folder) or with `fdatasync` for the files
(their data, and none of the metadata a new link dirties) and `fsync` for the folders. Prints one JSON line per
round with the seconds of each step: the rounds behind `bench/results/issue-30-adopt/adopt-sync.md`, which
`docs/performance/first-batch.md` quotes (`fdatasync` tried on paper, issue 30).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tenure.career._durable import fsync, sync_tree
from tenure.career.spark._checkpoints import _link_tree


def _datasync_tree(path: Path) -> None:
    for folder, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(Path(folder) / name, os.O_RDONLY)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        fsync(Path(folder), directory=True)


def _timed(step: Callable[[], None]) -> float:
    started = time.perf_counter()
    step()
    return round(time.perf_counter() - started, 4)


def main() -> None:
    given = Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    scratch = given.parent / f".adopt-sync-{os.getpid()}"
    source = scratch / "source"
    shutil.copytree(given, source)
    sync_tree(source)
    files = sum(len(names) for _, _, names in os.walk(source))
    results: dict[str, list[float]] = {"fsync": [], "fdatasync": []}
    try:
        for index in range(rounds):
            for way, sync in (("fsync", sync_tree), ("fdatasync", _datasync_tree))[:: 1 if index % 2 else -1]:
                target = scratch / f"{way}-{index}"
                target.mkdir()
                link_s = _timed(lambda: _link_tree(source, target))  # noqa: B023 (called at once)
                sync_s = _timed(lambda: sync(target))  # noqa: B023
                results[way].append(sync_s)
                print(json.dumps({"round": index, "way": way, "files": files, "link_s": link_s, "sync_s": sync_s}))
                shutil.rmtree(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({way: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)}
                      for way, v in results.items()}))


if __name__ == "__main__":
    main()
