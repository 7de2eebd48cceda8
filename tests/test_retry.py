"""The retry store's pure logic: the row processor's statuses and the due time the retry tick is set by.

The processor is the real ``mapInArrow`` body, driven here with Arrow batches in (key, seq) order as Spark would
hand it one key's partition; no Spark is needed.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from career.spark._retry import (
    _PROCESSED_SCHEMA,
    _RETRY_SCHEMA,
    DEAD,
    HELD,
    WRITTEN,
    RetryPolicy,
    _processor,
    next_due,
    snapshot_table,
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
    rows = [new("a1", "a", 1), new("b1", "b", 1)]
    snapshot = snapshot_table(process(rows, now=0.0, failing={"a1"}))
    later = snapshot_table(process([*snapshot.to_pylist(), new("c1", "c", 1)], now=5.0, failing={"a1", "c1"}))
    assert {r["id"]: r["due_at"] for r in later.to_pylist()} == {"a1": 10.0, "c1": 15.0}  # a1 was not due at 5
    assert next_due(later) == 10.0


def test_the_last_attempt_dead_letters_and_the_key_moves_on() -> None:
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
