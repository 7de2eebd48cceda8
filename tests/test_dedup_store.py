"""The dedup store of tenure's own (``career/spark/_dedup.py``): what it drops, when it forgets, and that a store
replayed from the published files judges every batch as the leader's own store does."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tenure.career.spark._dedup import (
    DedupStore,
    Judged,
    load_seed,
    load_store,
    published_batches,
    write_judged,
    write_seed,
)
from tenure.career.spark._prepared import Preloaded

WINDOW_MS = 120_000


def _publish(judged: Judged, folder: Path) -> None:
    """Stage and publish a committed batch's file as the batch writer does (a staging folder, then a link)."""
    staging = folder.parent / "_staging" / f"batch={judged.batch_id}"
    write_judged(judged, staging)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"batch-{judged.batch_id:012d}-part-00000.parquet").hardlink_to(staging / "part-00000.parquet")


def _publish_abc(folder: Path) -> None:
    """Batches 0, 1 and 2 committed and published, each the first to see key ``a``, ``b`` and ``c``."""
    store = DedupStore(WINDOW_MS)
    for batch, key in enumerate("abc"):
        judged = store.judge(batch, _keys(key), batch)
        _publish(judged, folder)
        store.apply(judged)


def _keys(*keys: str) -> pa.Array:
    return pa.array(keys, pa.string())


def test_a_key_repeated_in_its_batch_or_of_a_remembered_one_is_dropped_and_the_first_copy_kept() -> None:
    """Within a batch the first copy is kept and later ones dropped; a later batch drops every copy of a key the
    store remembers."""
    store = DedupStore(WINDOW_MS)
    first = store.judge(0, _keys("a", "b", "a", "c", "b"), 1_000)
    assert first.repeats.to_pylist() == [False, False, True, False, True] and first.new == ["a", "b", "c"]
    store.apply(first)
    second = store.judge(1, _keys("d", "a", "d"), 2_000)
    assert second.repeats.to_pylist() == [False, True, True] and second.new == ["d"] and second.repeat_count == 2


def test_a_key_is_forgotten_once_the_window_has_passed_it_in_event_time() -> None:
    """A key first seen at t is remembered while the newest batch is within the window of t, and forgotten after:
    its repeat then counts as new (the per-key marks catch it as late), and is remembered again from its time."""
    store = DedupStore(WINDOW_MS)
    store.apply(store.judge(0, _keys("a"), 0))
    store.apply(store.judge(1, _keys("b"), WINDOW_MS))
    assert store.forget_expired() == []
    assert store.judge(2, _keys("a"), WINDOW_MS + 1).repeats.to_pylist() == [True]
    store.apply(store.judge(2, _keys("c"), WINDOW_MS + 1))
    again = store.judge(3, _keys("a", "b"), WINDOW_MS + 2)
    assert again.repeats.to_pylist() == [False, True]
    assert store.forget_expired() == [0] and len(store) == 2
    store.apply(again)
    store.apply(store.judge(4, _keys("d"), 2 * WINDOW_MS + 1))
    assert store.judge(5, _keys("a", "b"), 2 * WINDOW_MS + 2).repeats.to_pylist() == [True, False]


def test_a_batch_stamped_earlier_than_the_newest_is_taken_as_of_the_newest() -> None:
    """Event times that go back (an ingestion-time source on a leader whose clock is behind the last one's): the
    batch counts as of the newest event time, so its keys are remembered a whole window from there, not forgotten
    at once, and nothing the window still holds is forgotten early."""
    store = DedupStore(WINDOW_MS)
    store.apply(store.judge(0, _keys("a"), 10 * WINDOW_MS))
    behind = store.judge(1, _keys("b"), 0)
    assert behind.admitted_ms == 10 * WINDOW_MS
    store.apply(behind)
    store.apply(store.judge(2, _keys("c"), 11 * WINDOW_MS))
    assert store.forget_expired() == []
    assert store.judge(3, _keys("a", "b", "c"), 11 * WINDOW_MS).repeats.to_pylist() == [True, True, True]
    store.apply(store.judge(3, _keys("d"), 11 * WINDOW_MS + 1))
    assert store.forget_expired() == [0, 1]
    assert store.judge(4, _keys("a", "b", "c"), 11 * WINDOW_MS + 1).repeats.to_pylist() == [False, False, True]


def test_a_store_judges_only_the_batch_after_its_own() -> None:
    """A store as of batch 3 refuses to judge batch 6 or batch 3 again: the term loads the right one instead."""
    store = load_store(Path("/nonexistent"), None, WINDOW_MS)
    store.apply(store.judge(0, _keys("a"), 0))
    for batch in (0, 2):
        with pytest.raises(ValueError, match="as of batch 0"):
            store.judge(batch, _keys("a"), 0)


def test_a_store_replayed_from_the_published_files_judges_every_batch_as_the_leaders(tmp_path: Path) -> None:
    """A producer that repeats ids within and across batches and after the window, over 200 batches (some of
    nothing but repeats, some stamped earlier than the one before), the leader purging the files of batches the
    window has passed: a follower's store caught up batch by batch, at every batch, and a store loaded cold from
    the files left, at every seventh, judge the next batch exactly as the leader's own store does."""
    rng = random.Random(53)
    folder = tmp_path / "dedup"
    leader, follower = DedupStore(WINDOW_MS), DedupStore(WINDOW_MS)
    issued: list[str] = []
    now = dropped = purged = 0
    for batch in range(200):
        now += rng.choice((0, 400, 1_000, 5_000, -3_000))  # a clock that steps back too
        keys = [f"id-{len(issued) + i}" for i in range(rng.randint(0, 40))]
        issued.extend(keys)
        keys += [rng.choice(issued) for _ in range(rng.randint(0, 10))] if issued else []
        rng.shuffle(keys)
        judged = leader.judge(batch, _keys(*keys), now)
        others = [follower, load_store(folder, batch - 1 if batch else None, WINDOW_MS)] if batch % 7 == 0 \
            else [follower]
        for other in others:
            mirror = other.judge(batch, _keys(*keys), now)
            assert mirror.repeats.equals(judged.repeats) and mirror.new == judged.new, f"batch {batch}"
        dropped += judged.repeat_count
        _publish(judged, folder)
        leader.apply(judged)
        for gone in leader.forget_expired():  # the leader purges the files of batches the window has passed
            (folder / f"batch-{gone:012d}-part-00000.parquet").unlink()
            purged += 1
        follower.caught_up(folder, batch)
        assert len(follower) == len(leader)
    assert dropped and purged and 0 < len(leader) < len(issued), "the run must drop, remember, forget and purge"


def test_files_of_batches_after_the_committed_one_are_not_read(tmp_path: Path) -> None:
    """A file published by a batch later than the commit record's (the record read before it) is left out."""
    folder = tmp_path / "dedup"
    _publish_abc(folder)
    assert [b for b, _ in published_batches(folder)] == [0, 1, 2]
    at_1 = load_store(folder, 1, WINDOW_MS)
    assert at_1.batch_id == 1 and at_1.judge(2, _keys("a", "b", "c"), 2).repeats.to_pylist() == [True, True, False]


def test_a_foreign_file_among_the_published_is_refused_by_name(tmp_path: Path) -> None:
    """A Parquet file under a published name without the batch's event time is refused with its path."""
    folder = tmp_path / "dedup"
    folder.mkdir()
    pq.write_table(pa.table({"id": ["a"]}), folder / f"batch-{0:012d}-part-00000.parquet")
    with pytest.raises(ValueError, match=r"batch-000000000000-part-00000\.parquet has no admitted_ms"):
        load_store(folder, 0, WINDOW_MS)


def test_a_batch_of_nothing_but_repeats_moves_the_window_for_a_replayed_store_too(tmp_path: Path) -> None:
    """A batch whose every key is a repeat still publishes its event time: a store loaded from the files forgets
    what the window has passed, as the leader's does, and takes the next copy as new."""
    folder = tmp_path / "dedup"
    leader = DedupStore(WINDOW_MS)
    for batch, at in ((0, 0), (1, WINDOW_MS + 1)):
        judged = leader.judge(batch, _keys("a"), at)
        _publish(judged, folder)
        leader.apply(judged)
    assert [b for b, _ in published_batches(folder)] == [0, 1]
    for store in (leader, load_store(folder, 1, WINDOW_MS)):
        assert store.judge(2, _keys("a"), WINDOW_MS + 2).repeats.to_pylist() == [False]


def test_a_store_seeded_from_sparks_state_is_carried_by_the_first_batchs_file(tmp_path: Path) -> None:
    """An upgraded data root: the store seeded from the old state store's keys (each with its own first-seen time)
    publishes them with the first batch, so a store loaded from the files alone judges as the seeded one does,
    an old key forgotten at its own time and not the batch's."""
    folder = tmp_path / "dedup"
    seeded = DedupStore.seeded(WINDOW_MS, 41, WINDOW_MS, {"old": 1, "older": 0, "recent": WINDOW_MS})
    first = seeded.judge(42, _keys("old", "new"), WINDOW_MS + 1)
    assert first.repeats.to_pylist() == [True, False] and set(first.carried) == {"old", "older", "recent"}
    _publish(first, folder)
    seeded.apply(first)
    second = seeded.judge(43, _keys("x"), WINDOW_MS + 1)
    assert not second.carried
    loaded = load_store(folder, 42, WINDOW_MS)
    probe = _keys("old", "older", "recent", "new")
    for store, at in ((seeded, WINDOW_MS + 1), (loaded, WINDOW_MS + 1)):
        assert store.judge(43, probe, at).repeats.to_pylist() == [True, False, True, True]


def test_an_upgrades_seed_is_read_back_as_the_store_it_was_written_from(tmp_path: Path) -> None:
    """The seed an upgrading term writes for committed batch 41 gives the seeded store back (its keys, their times,
    the batch's event time); another batch has no seed."""
    folder = tmp_path / "dedup"
    write_seed(folder, 41, WINDOW_MS, {"old": 1, "recent": WINDOW_MS})
    store = load_seed(folder, 41, WINDOW_MS)
    assert store is not None and store.batch_id == 41 and store.newest_ms == WINDOW_MS
    judged = store.judge(42, _keys("old", "recent", "new"), WINDOW_MS)
    assert judged.repeats.to_pylist() == [True, True, False] and judged.carried == {"old": 1, "recent": WINDOW_MS}
    assert load_seed(folder, 40, WINDOW_MS) is None and not published_batches(folder)


def test_a_preloaded_store_behind_the_record_is_caught_up_and_one_ahead_refused(tmp_path: Path) -> None:
    """At inauguration a follower's store one batch behind the commit record (the old leader's last batch
    committed just before it handed over) is caught up from the published file and judges as the leader's store
    does; a store ahead of the record (it followed a checkpoint the record does not name) is not used, nor one of a
    data root without ``dedup_since``."""
    folder = tmp_path / "dedup"
    _publish_abc(folder)
    record = {"batch_id": 2, "dedup_since": 0}
    behind = Preloaded(batch_id=1, order=None, retry=None, dedup=load_store(folder, 1, WINDOW_MS))
    caught = behind.dedup_for(record, folder)
    assert caught is not None and caught.batch_id == 2
    assert caught.judge(3, _keys("a", "b", "c", "d"), 3).repeats.to_pylist() == [True, True, True, False]
    ahead = Preloaded(batch_id=2, order=None, retry=None, dedup=load_store(folder, 2, WINDOW_MS))
    assert ahead.dedup_for({"batch_id": 1, "dedup_since": 0}, folder) is None
    assert ahead.dedup_for({"batch_id": 2}, folder) is None, "a data root Spark's state deduplicated"
