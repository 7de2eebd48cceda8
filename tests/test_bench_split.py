"""The leader-change split of bench/_split.py on synthetic events: each segment between the right boundaries."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench._cluster import Commit
from bench._split import (
    PROGRESS_FIGURES,
    SEGMENTS,
    Event,
    SplitError,
    batch_progress,
    median_segments,
    read_log,
    seconds_to,
    split_change,
    steady_progress,
)
from tenure.career.lifecycle import HANDED_OVER, HANDING_OVER, HANDOVER_RECORDED, INAUGURATED, INAUGURATING
from tenure.career.spark import BATCH_COMMITTED, BATCH_PROGRESS, QUERY_STARTED, SPARK_SESSION_READY
from tenure.election import ELECTED, RELEASED

OLD, NEW = 7, 9  # the old leader's epoch and the successor's


def commit(batch: int, epoch: int, at: float, replica: str) -> Commit:
    return Commit(observed_at=at + 0.01, batch_id=batch, epoch=epoch, committed_at=at, replica_id=replica,
                  written=100)


def ev(event: str, at: float, **fields: Any) -> Event:
    return Event(event, at, fields)


def iso(at: float) -> str:
    """Epoch seconds as Spark's progress writes a trigger's start (UTC, milliseconds, ``Z``)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# replica-1 leads epoch 7 until its last commit at 1002.0; replica-2 (epoch 9) commits batch 12 at 1007.0.
COMMITS = [commit(10, OLD, 1000.0, "replica-1"), commit(11, OLD, 1002.0, "replica-1"),
           commit(12, NEW, 1007.0, "replica-2"), commit(13, NEW, 1009.0, "replica-2")]
ROW = {"from": "replica-1", "to": "replica-2", "first_batch_id": 12, "gap_s": 5.0}

OLD_EVENTS = [
    ev(RELEASED, 900.5, node="n_3"),  # an earlier term's release: before the last commit
    ev(HANDED_OVER, 900.0, epoch=5, outcome="clean"),  # an earlier term of the same replica
    ev(HANDING_OVER, 1002.5, epoch=OLD, outcome="clean"),
    ev(HANDED_OVER, 1003.0, epoch=OLD, outcome="clean", batch=11),  # the career's: query stopped
    ev(HANDOVER_RECORDED, 1003.2, epoch=OLD, clean=True),
    ev(RELEASED, 1003.5, node="n_7"),
    ev(HANDED_OVER, 1003.6, epoch=OLD, seconds=1.1),  # the runner's, after the release: no outcome
]
NEW_EVENTS = [
    ev(SPARK_SESSION_READY, 500.0, master="local[2]"),  # the warm standby's session, long before
    ev(BATCH_COMMITTED, 600.0, epoch=0, batch=12, warmup=True, read_s=9.0, stage_s=9.0, commit_s=0.0),
    ev(ELECTED, 800.0, epoch=6),  # the successor's own earlier term
    ev(INAUGURATED, 801.0, epoch=6, rolled_forward=0),
    ev(QUERY_STARTED, 802.0, epoch=6),
    ev(BATCH_COMMITTED, 803.0, epoch=6, batch=5, read_s=1.0, stage_s=1.0, commit_s=0.01),
    ev(ELECTED, 1003.8, epoch=NEW),
    ev(INAUGURATING, 1003.85, epoch=NEW),
    ev(INAUGURATED, 1004.0, epoch=NEW, rolled_forward=0),  # the career's
    ev(INAUGURATED, 1004.05, epoch=NEW, seconds=0.25),  # the runner's: no rolled_forward
    ev(QUERY_STARTED, 1004.7, epoch=NEW),
    # batch 12's trigger starts at 1004.8, its function is called at 1004.9 (1007.2 − batch_s), its scan starts at
    # 1005.0 (committed_at 1007.0 − stage_s − read_s − dedup_s) and its counts at 1005.1
    ev(BATCH_COMMITTED, 1007.2, epoch=NEW, batch=12, read_s=1.1, stage_s=0.8, commit_s=0.05, dedup_s=0.1,
       batch_s=2.3),
    ev(BATCH_PROGRESS, 1007.3, epoch=NEW, batch=12, trigger_started=iso(1004.8), duration_ms={"addBatch": 2300}),
    ev(BATCH_COMMITTED, 1009.2, epoch=NEW, batch=13, read_s=1.0, stage_s=0.9, commit_s=0.02),
]
GRACEFUL = {"stop_query": 1.0, "release": 0.5, "election": 0.3, "session": None, "inauguration": 0.2,
            "query_start": 0.7, "stream_init": 0.1, "planning": 0.1, "prepare": 0.1, "scan": 0.1, "read": 1.1,
            "stage": 0.8, "commit": 0.05, "publish": 0.15}


def approx(segments: dict[str, float | None]) -> dict[str, Any]:
    return {k: (None if v is None else pytest.approx(v, abs=1e-6)) for k, v in segments.items()}


def test_graceful_split_bounds_each_segment_by_its_events() -> None:
    """Each graceful segment runs between its two boundaries; earlier terms' and warm-up events are ignored."""
    split = split_change(COMMITS, ROW, OLD_EVENTS, NEW_EVENTS, crash=False)
    assert split["segments_s"] == approx(GRACEFUL)
    assert list(split["segments_s"]) == [k for k in SEGMENTS if k in GRACEFUL]  # in time order
    assert (split["old_epoch"], split["new_epoch"], split["elected_at"]) == (OLD, NEW, 1003.8)
    assert split["split_origin"] == "old leader's last commit"


def test_graceful_segments_up_to_stage_add_up_to_the_gap() -> None:
    """The gap (last old commit → first new committed_at) is the sum of the segments before commit and publish."""
    segments = split_change(COMMITS, ROW, OLD_EVENTS, NEW_EVENTS, crash=False)["segments_s"]
    assert seconds_to(segments, "stage") == pytest.approx(ROW["gap_s"])
    assert seconds_to(segments, "publish") == pytest.approx(ROW["gap_s"] + 0.05 + 0.15)


def test_cold_successor_counts_its_spark_start_between_election_and_inauguration() -> None:
    """A SparkSession started after the election and before inauguration is the session segment."""
    events = sorted([*NEW_EVENTS, ev(SPARK_SESSION_READY, 1003.9, master="local[2]")], key=lambda e: e.at)
    segments = split_change(COMMITS, ROW, OLD_EVENTS, events, crash=False)["segments_s"]
    assert segments["session"] == pytest.approx(0.1)
    assert segments["inauguration"] == pytest.approx(0.1)  # from the session, not from the election


def test_crash_split_starts_at_the_signal_and_has_no_old_leader_segments() -> None:
    """A crash: signal → elected is detection; the old leader's log (a graceful past) plays no part."""
    row = {**ROW, "signalled_at": 997.8}
    split = split_change(COMMITS, row, OLD_EVENTS, NEW_EVENTS, crash=True)
    assert split["split_origin"] == "signal"
    assert split["segments_s"] == approx({"detection": 6.0, "session": None, "inauguration": 0.2,
                                          "query_start": 0.7, "stream_init": 0.1, "planning": 0.1, "prepare": 0.1,
                                          "scan": 0.1, "read": 1.1, "stage": 0.8, "commit": 0.05,
                                          "publish": 0.15})
    assert seconds_to(split["segments_s"], "stage") == pytest.approx(1007.0 - 997.8)


def test_crash_without_a_signal_time_is_an_error() -> None:
    """A crash split needs the signal time: without it there is no origin."""
    with pytest.raises(SplitError, match="signalled_at"):
        split_change(COMMITS, ROW, [], NEW_EVENTS, crash=True)


def test_missing_event_leaves_its_segment_empty_and_its_time_to_the_next() -> None:
    """Without query_started, query_start is None and the stream's start runs from the inauguration."""
    events = [e for e in NEW_EVENTS if e.event != QUERY_STARTED]
    segments = split_change(COMMITS, ROW, OLD_EVENTS, events, crash=False)["segments_s"]
    assert segments["query_start"] is None
    assert segments["stream_init"] == pytest.approx(0.7 + 0.1)
    assert seconds_to(segments, "stage") == pytest.approx(ROW["gap_s"])


def test_missing_batch_event_leaves_the_batch_steps_empty_and_stage_holds_the_rest() -> None:
    """Without the first batch's ``batch_committed``, only its trigger's start and committed_at are known: the time
    from the trigger's start is in stage."""
    events = [e for e in NEW_EVENTS if not (e.event == BATCH_COMMITTED and e.fields.get("epoch") == NEW)]
    segments = split_change(COMMITS, ROW, OLD_EVENTS, events, crash=False)["segments_s"]
    assert [segments[k] for k in ("planning", "prepare", "scan", "read", "commit", "publish")] == [None] * 6
    assert segments["stream_init"] == pytest.approx(0.1)
    assert segments["stage"] == pytest.approx(0.1 + 0.1 + 0.1 + 1.1 + 0.8)


def test_a_batch_without_its_progress_or_newer_fields_gives_its_time_to_the_next_known_step() -> None:
    """A replica of an earlier release logs no trigger start, ``batch_s`` or ``dedup_s``: the query's stream start,
    the trigger and the function's preparation then all fall into the scan, which ends where the counts begin."""
    events = [e for e in NEW_EVENTS if e.event != BATCH_PROGRESS]
    events = [ev(e.event, e.at, **{k: v for k, v in e.fields.items() if k not in ("batch_s", "dedup_s")})
              for e in events]
    segments = split_change(COMMITS, ROW, OLD_EVENTS, events, crash=False)["segments_s"]
    assert [segments[k] for k in ("stream_init", "planning", "prepare")] == [None] * 3
    assert segments["scan"] == pytest.approx(0.4)
    assert seconds_to(segments, "stage") == pytest.approx(ROW["gap_s"])


def test_no_career_handed_over_is_not_replaced_by_the_runners() -> None:
    """A handover that overran logs no career ``handed_over``: stop_query is None, not the runner's event after
    the release (which would swallow the release)."""
    old = [e for e in OLD_EVENTS if not (e.event == HANDED_OVER and "outcome" in e.fields and e.at > 1000)]
    segments = split_change(COMMITS, ROW, old, NEW_EVENTS, crash=False)["segments_s"]
    assert segments["stop_query"] is None
    assert segments["release"] == pytest.approx(1.5)


def test_release_logged_after_the_election_gives_a_zero_election_not_a_negative_one() -> None:
    """The old leader's release line may land after the successor's election line; no segment goes negative."""
    old = [e if e.event != RELEASED or e.at < 1000 else ev(RELEASED, 1003.9, node="n_7") for e in OLD_EVENTS]
    segments = split_change(COMMITS, ROW, old, NEW_EVENTS, crash=False)["segments_s"]
    assert segments["release"] == pytest.approx(0.9)
    assert segments["election"] == 0.0
    assert segments["inauguration"] == pytest.approx(0.1)
    assert all(v is None or v >= 0 for v in segments.values())
    assert seconds_to(segments, "stage") == pytest.approx(ROW["gap_s"])


def test_naive_split_finds_its_term_by_the_election_time_in_its_epoch() -> None:
    """The naive replica's epoch is its election time in ms: that names its term's "elected" among others."""
    epoch = int(1004.25 * 1000)
    commits = [commit(3, 995_000, 1002.0, "replica-1"), commit(4, epoch, 1030.0, "replica-2")]
    old = [ev("stepped_down", 990.0), ev("stepped_down", 1003.0)]
    new = [ev(ELECTED, 900.0, replica_id="replica-2"), ev(ELECTED, 1004.25, replica_id="replica-2")]
    row = {"from": "replica-1", "to": "replica-2", "first_batch_id": 4}
    split = split_change(commits, row, old, new, crash=False, naive=True)
    assert split["segments_s"] == approx({"stop_query": 1.0, "election": 1.25, "naive_start": 25.75})
    crash = split_change(commits, {**row, "signalled_at": 1001.0}, old, new, crash=True, naive=True)
    assert crash["segments_s"] == approx({"detection": 3.25, "naive_start": 25.75})


@pytest.mark.parametrize(
    ("commits", "match"),
    [
        pytest.param(COMMITS[:2], "no commit of batch 12 by replica-2", id="first-commit-not-seen"),
        pytest.param([commit(12, NEW, 1007.0, "replica-2")], "no commit of an epoch before", id="no-older-epoch"),
    ],
)
def test_split_error_when_the_commits_cannot_place_the_change(commits: list[Commit], match: str) -> None:
    """Without the successor's first commit, or any older epoch's commit before it, there is nothing to split."""
    with pytest.raises(SplitError, match=match):
        split_change(commits, ROW, OLD_EVENTS, NEW_EVENTS, crash=False)


def test_read_log_reads_both_formats_in_time_order_and_skips_other_lines(tmp_path: Path) -> None:
    """tenure's ISO timestamps and the naive recipe's epoch seconds both parse; Spark's lines are skipped."""
    tenure = tmp_path / "replica-1.log"
    tenure.write_text("\n".join([
        "26/11/22 17:36:30 WARN NativeCodeLoader: Unable to load native-hadoop library",
        'partial line{"event": "elected", "epoch": 9, "timestamp": "2026-11-22T17:37:55.500000Z"}',
        '{"event": "broken", "timestamp": ',
        json.dumps({"event": QUERY_STARTED, "epoch": 9, "timestamp": "2026-11-22T17:37:57Z"}),
    ]))
    naive = tmp_path / "replica-1.2.log"
    naive.write_text(json.dumps({"event": "stepped_down", "at": 1795369076.25}) + "\n")
    events = read_log([tenure, naive, tmp_path / "missing.log"])
    assert [(e.event, e.at) for e in events] == [(ELECTED, 1795369075.5), ("stepped_down", 1795369076.25),
                                                 (QUERY_STARTED, 1795369077.0)]
    assert events[0].fields["epoch"] == 9


def test_median_segments_labels_each_segment_and_skips_rows_without_a_split() -> None:
    """Medians per segment label, over the rows that have it; a segment no row measured is None."""
    rows = [{"segments_s": {"election": 0.1, "session": None, "read": 3.0}},
            {"segments_s": {"election": 0.3, "session": None, "read": 1.0}},
            {"segments_s": {"election": 0.2, "session": None, "read": 2.0}},
            {"split_error": "SplitError: …"}]
    assert median_segments(rows) == {SEGMENTS["election"]: 0.2, SEGMENTS["session"]: None, SEGMENTS["read"]: 2.0}


def _batch(at: float, epoch: int, batch: int, add_batch: int, to_call_s: float) -> list[Event]:
    """A batch's two events: its function is called ``to_call_s`` after its trigger starts and runs 1 s; Spark's
    progress comes after both."""
    called = at - to_call_s - 1.0
    return [ev(BATCH_COMMITTED, at, epoch=epoch, batch=batch, read_s=0.3, stage_s=0.4, dedup_s=0.2, durable_s=0.01,
               batch_s=1.0),
            ev(BATCH_PROGRESS, at + 0.1, epoch=epoch, batch=batch, input_rows=10, trigger_started=iso(called),
               duration_ms={"latestOffset": 5, "addBatch": add_batch, "triggerExecution": add_batch + 50})]


def test_batch_progress_finds_the_terms_batch_and_steady_progress_takes_medians_after_the_first_ones() -> None:
    """The successor's first batch is matched by epoch and id (a warm-up's epoch-0 batch of the same id is not
    it), with its function's steps and the time from its trigger's start to the function's call; the steady
    figures are medians over the term's batches after its first three."""
    events = sorted([*_batch(600.0, 0, 12, 9000, 3.0), *_batch(1007.3, NEW, 12, 2500, 0.75),
                     *(e for i in range(6) for e in _batch(1010.0 + 2 * i, OLD, 20 + i, 1000 + 100 * i, 0.1 * i))],
                    key=lambda e: e.at)
    first = batch_progress(events, NEW, 12)
    assert first is not None and first["addBatch"] == 2500 and first["to_call"] == 750
    assert [first[k] for k in ("durable", "dedup", "read", "stage", "function")] == [10, 200, 300, 400, 1000]
    assert list(first) == list(PROGRESS_FIGURES)
    assert first["walCommit"] is None
    assert batch_progress(events, NEW, 13) is None
    steady = steady_progress(events, OLD)
    assert steady is not None and steady["addBatch"] == 1400.0 and steady["to_call"] == 400.0  # of 300–500
    assert steady_progress(events, 99) is None
