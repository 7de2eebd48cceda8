"""The retry store's pure logic: the row processor's statuses and the due time the retry tick is set by.

The processor is the real ``mapInArrow`` body, driven here with Arrow batches in (key, seq) order as Spark would
hand it one key's partition; no Spark is needed.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

from tenure.career.spark._retry import (
    _PROCESSED_SCHEMA,
    _RETRY_SCHEMA,
    DEAD,
    HELD,
    WRITTEN,
    RetryPolicy,
    RowTimeout,
    _processor,
    next_due,
    snapshot_table,
    timed_out_now,
    unique_held,
)

POLICY = RetryPolicy(attempts=5, backoff_s=10.0, backoff_max_s=1000.0)


def new(rid: str, key: str, seq: int) -> dict[str, Any]:
    return {"id": rid, "key": key, "seq": seq, "ts": seq, "payload": "{}", "attempts": 0, "first_failed_at": None,
            "last_failed_at": None, "due_at": None, "error": None}


def process(rows: list[dict[str, Any]], now: float, failing: set[str], policy: RetryPolicy = POLICY) -> pa.Table:
    """One batch through the processor: ``rows`` sorted by (key, seq) as Spark sorts them."""
    def row_function(record: dict[str, Any]) -> None:
        if record["id"] in failing:
            raise RuntimeError(f"no {record['id']}")

    ordered = sorted(rows, key=lambda r: (r["key"], r["seq"]))
    batch = pa.RecordBatch.from_pylist(ordered, schema=_RETRY_SCHEMA)
    out = list(_processor(row_function, policy, now)(iter([batch])))
    return pa.Table.from_batches(out, schema=_PROCESSED_SCHEMA)


def status(processed: pa.Table) -> dict[str, str]:
    return dict(zip(processed.column("id").to_pylist(), processed.column("status").to_pylist(), strict=True))


def test_a_failed_record_holds_its_key_and_the_others_flow() -> None:
    """A record whose row function fails is held for retry with its back-off, and so are the later records of its key
    behind it; other keys are written."""
    processed = process([new("a1", "a", 1), new("a2", "a", 2), new("b1", "b", 1)], now=100.0, failing={"a1"})
    assert status(processed) == {"a1": HELD, "a2": HELD, "b1": WRITTEN}
    snapshot = snapshot_table(processed)
    assert next_due(snapshot) == 110.0  # a1's back-off; a2 waits behind it with no time of its own


def test_the_retry_tick_follows_each_keys_first_record_not_an_older_time_behind_it() -> None:
    """k's seq 5 fails first (due 110). Then seq 3 of k arrives (not late: nothing of k was written) and fails
    at 150 (due 160): seq 5, due since 110 and ticked for then, waits behind it, still carrying 110. Nothing of k
    can run before 160, so the next due time is 160. The earliest time over every row (110, in the past, already
    ticked) would pin the tick there, and k would wait for new data."""
    first = snapshot_table(process([new("k5", "k", 5)], now=100.0, failing={"k5"}))
    assert next_due(first) == 110.0
    second = process([*first.to_pylist(), new("k3", "k", 3)], now=150.0, failing={"k3", "k5"})
    assert status(second) == {"k3": HELD, "k5": HELD}
    snapshot = snapshot_table(second)
    assert {r["id"]: r["due_at"] for r in snapshot.to_pylist()} == {"k3": 160.0, "k5": 110.0}
    assert next_due(snapshot) == 160.0
    third = process(snapshot.to_pylist(), now=160.0, failing=set())
    assert status(third) == {"k3": WRITTEN, "k5": WRITTEN}
    assert next_due(snapshot_table(third)) is None


def test_next_due_is_the_earliest_over_keys() -> None:
    """The store's next due time is the earliest over its keys, and a record not yet due keeps its due time."""
    rows = [new("a1", "a", 1), new("b1", "b", 1)]
    snapshot = snapshot_table(process(rows, now=0.0, failing={"a1"}))
    later = snapshot_table(process([*snapshot.to_pylist(), new("c1", "c", 1)], now=5.0, failing={"a1", "c1"}))
    assert {r["id"]: r["due_at"] for r in later.to_pylist()} == {"a1": 10.0, "c1": 15.0}  # a1 was not due at 5
    assert next_due(later) == 10.0


def test_the_last_attempt_dead_letters_and_the_key_moves_on() -> None:
    """A record that fails its last attempt goes to the dead letter and the next record of its key is written: nothing
    is left due."""
    policy = RetryPolicy(attempts=1)
    processed = process([new("a1", "a", 1), new("a2", "a", 2)], now=0.0, failing={"a1"}, policy=policy)
    assert status(processed) == {"a1": DEAD, "a2": WRITTEN}
    assert next_due(snapshot_table(processed)) is None


def test_a_store_holding_an_id_twice_keeps_the_original_copy() -> None:
    """A store committed by tenure before the held-repeat check may hold a repeat beside its held original: the
    copy with the most attempts stays, the other is dropped (and reported), so the id is written once."""
    original = {**new("k1", "k", 1), "attempts": 2, "first_failed_at": 1.0, "last_failed_at": 3.0, "due_at": 7.0,
                "error": "RuntimeError: no"}
    store = pa.Table.from_pylist([new("k1", "k", 1), original, new("k2", "k", 2)], schema=_RETRY_SCHEMA)
    held, dropped = unique_held(store)
    assert dropped == ["k1"]
    assert [(r["id"], r["attempts"]) for r in held.to_pylist()] == [("k1", 2), ("k2", 0)]
    assert status(process(held.to_pylist(), now=10.0, failing=set())) == {"k1": WRITTEN, "k2": WRITTEN}
    unchanged = snapshot_table(process([new("a1", "a", 1)], now=0.0, failing={"a1"}))
    assert unique_held(unchanged) == (unchanged, [])


def _run(rows: list[dict[str, Any]], row_function: Any, policy: RetryPolicy, now: float) -> pa.Table:
    batch = pa.RecordBatch.from_pylist(sorted(rows, key=lambda r: (r["key"], r["seq"])), schema=_RETRY_SCHEMA)
    return pa.Table.from_batches(list(_processor(row_function, policy, now)(iter([batch]))), schema=_PROCESSED_SCHEMA)


def _hangs_on(ids: set[str], released: threading.Event) -> Any:
    """A row function that blocks, as a call to a dependency without a timeout does, on the records ``ids``."""

    def row_function(record: dict[str, Any]) -> None:
        if record["id"] in ids:
            with socket.socket() as listener, socket.create_connection(_listening(listener)) as conn:
                conn.settimeout(None)
                while not released.is_set():
                    conn.recv(1)  # the peer accepted and never answers

    return row_function


def _listening(listener: socket.socket) -> tuple[str, int]:
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    host, port = listener.getsockname()
    return host, port


@pytest.mark.parametrize("thread", ["main", "worker"], ids=["signal on the main thread", "helper off it"])
def test_a_row_call_past_its_timeout_fails_its_record_and_the_batch_goes_on(thread: str) -> None:
    """A row function blocked on a socket read is cut at ``row_timeout_s``: the record fails with RowTimeout into
    the retry path (its key waits behind it), every other key is written, and the batch returns in about the
    timeout — on Spark's Python worker (the main thread, a signal) and off it (a helper thread)."""
    released = threading.Event()
    policy = RetryPolicy(attempts=5, backoff_s=10.0, backoff_max_s=1000.0, row_timeout_s=0.5)
    rows = [new("a1", "a", 1), new("a2", "a", 2), new("b1", "b", 1), new("c1", "c", 1)]
    result: list[pa.Table] = []
    before = signal.getsignal(signal.SIGALRM)

    def go() -> None:
        result.append(_run(rows, _hangs_on({"a1"}, released), policy, now=100.0))

    started = time.monotonic()
    try:
        if thread == "main":
            go()
        else:
            worker = threading.Thread(target=go)
            worker.start()
            worker.join(timeout=20)
            assert not worker.is_alive(), "the batch did not return"
    finally:
        released.set()
    took = time.monotonic() - started
    processed = result[0]
    assert status(processed) == {"a1": HELD, "a2": HELD, "b1": WRITTEN, "c1": WRITTEN}
    errors = dict(zip(processed.column("id").to_pylist(), processed.column("error").to_pylist(), strict=True))
    assert errors["a1"].startswith(f"{RowTimeout.__name__}: ") and "row_timeout_s" in errors["a1"]
    assert timed_out_now(processed, 100.0) == (1, 1)
    assert took < 5, f"the batch took {took:.1f} s with a 0.5 s row timeout"
    if thread == "main":
        assert signal.getsignal(signal.SIGALRM) is before, "the previous SIGALRM handler must be restored"
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0), "the timer must be disarmed after each call"


def test_a_row_function_that_returns_in_time_is_not_cut() -> None:
    """Calls well inside the timeout are untouched, and no alarm is left armed to hit later code."""
    policy = RetryPolicy(row_timeout_s=5.0)
    processed = _run([new("a1", "a", 1), new("b1", "b", 1)], lambda record: None, policy, now=1.0)
    assert status(processed) == {"a1": WRITTEN, "b1": WRITTEN}
    assert timed_out_now(processed, 1.0) == (0, 0)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
