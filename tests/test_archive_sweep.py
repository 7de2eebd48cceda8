"""The archive sweep never holds the leader's control loop.

It stats every archived file, the retention's worth (7 days by default: millions of files on a busy queue, at
1.7 s per 300 000 on an idle machine, ``bench/results/archive-sweep``). On the control thread, every minute, that
held ``execute`` and, past the liveness timeout (30 s), made the watchdog fail a healthy leader, and its successor
after it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tenure.career import Outcome
from tenure.career.spark import SparkCareer, _housekeeping
from tenure.career.spark._archive import sweep_archive
from tenure.career.spark._layout import Layout
from tenure.service.local import wait_for
from tests.test_spark_career import Queue, Recorder, drained, leadership, make_config, run_until


def _archived_long_ago(layout: Layout, name: str) -> Path:
    """An empty queue file archived at the epoch: past retention by any clock, and no record for the audit."""
    layout.archive.mkdir(parents=True, exist_ok=True)
    path = layout.archive / name
    path.touch()
    os.utime(path, (1.0, 1.0))
    return path


def test_a_sweep_told_to_stop_deletes_no_further_file(tmp_path: Path) -> None:
    """A sweep whose ``stop`` turns true after two files (the career closing) deletes those two and no more; the files
    past retention it left are deleted by the next sweep."""
    layout = Layout(tmp_path / "data")
    old = [_archived_long_ago(layout, f"q-{i}.jsonl") for i in range(5)]
    asked: list[int] = []

    def stop_after_two() -> bool:
        asked.append(1)
        return len(asked) > 2

    assert sweep_archive(layout.queue, 60.0, time.time(), stop=stop_after_two) == 2
    assert sum(p.exists() for p in old) == 3
    assert sweep_archive(layout.queue, 60.0, time.time()) == 3


def test_the_leader_goes_on_while_the_archive_sweep_is_held(
        spark: Any, zk_client: KazooClient, zk_group: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep is held (as a huge archive holds it) until the leader has drained a queue: the leader's batches,
    archiving and audit go on beside it, and once let go it deletes what is past retention."""
    root = tmp_path / "data"
    old = _archived_long_ago(Layout(root), "old.jsonl")
    Queue(root).standard(files=2)
    release, threads = threading.Event(), []
    sweep = _housekeeping.sweep_archive

    def held(*args: Any, **kwargs: Any) -> int:
        threads.append(threading.current_thread())
        release.wait(300)  # until let go (the finally below lets it go if the test fails): longer than draining
        return sweep(*args, **kwargs)

    monkeypatch.setattr(_housekeeping, "sweep_archive", held)
    career = SparkCareer(make_config(root), Recorder(), replica_id="r1")
    try:
        with leadership(zk_client, zk_group, "r1") as (_, ctx):
            career.inaugurate(ctx)
            run_until(career, drained(root))
            assert threads and threads[0] is not threading.current_thread(), "the sweep ran on the control thread"
            assert old.exists(), "the held sweep deleted a file"
            release.set()
            wait_for(lambda: not old.exists(), 30, "the sweep, let go, to delete the file past retention")
            career.hand_over(Outcome.CLEAN)
    finally:
        release.set()
        career.close()
