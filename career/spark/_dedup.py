"""The dedup store: the ids a queue's dedup window remembers, kept by tenure instead of Spark's state store (issue 53).

Spark's ``dropDuplicatesWithinWatermark`` keeps its ids in the query's checkpoint (RocksDB), and a new query loads
them in its first batch: 1.3–2.8 s for a window of 450 000–590 000 ids, most of a leadership change's gap. Spark ties
a loaded store to one query run, so no follower can load it ahead. This store is plain data that any replica can
hold: a leader judges each batch against it on the driver, and a follower keeps its copy caught up from the files
committed batches publish, as it keeps the per-key marks.

**What it remembers.** Every dedup key (``_pipeline.CLASSIFIED_SCHEMA``'s ``dedup_key``: a record's id, a bad line's
or a file marker's position) with the event time of the batch that first saw it: the batch's ``admitted`` (the
group clock the queue source planned it by, or the micro-batch's ingestion time for any other source; both are in
the offset log, so a re-run of a batch sees the same value). An id is remembered for ``window_ms`` of event time:
it is forgotten once the newest committed batch's event time is more than ``window_ms`` past it. A repeat later
than that is caught as late by the per-key order marks. No wall clock takes part.

**Checked, never trusted.** A store states the batch it is as of (:attr:`DedupStore.batch_id`); a term uses it for
batch ``B`` only when the commit record names ``B - 1``'s as the newest (the batch writer's check), else it loads the
store from the published files again (:func:`load_store`). A batch's new ids are staged with its other outputs, named
in its commit record and published after the fenced commit, like the marks: a term killed between staging and its
commit leaves nothing another term reads, and a store moves to a batch only after that batch's commit
(:meth:`DedupStore.apply`).

**Files.** ``dedup/batch-<B>-part-00000.parquet``, one per batch, published in batch order: the keys batch ``B``
saw first with their first-seen event time (``id``, ``first_seen_ms``) and, in the file's metadata, the batch's
event time (``admitted_ms``: a batch of nothing but repeats moves the window too). Replaying them in order gives
the store any replica had at ``B`` (:func:`load_store`): a key is kept with the time of the newest batch that saw it
first, if that is within the window of ``B``'s. A file whose keys the window has all passed holds only forgotten
keys and may be purged (:meth:`DedupStore.forget_expired`).

**Upgrade.** A data root whose commit record has no ``dedup_since`` was deduplicated by Spark's state store. The
first term of this release writes that state's keys, once, as ``dedup/seed-<B>.parquet`` for the committed batch
``B`` (:func:`write_seed`, ``_upgrade``); a store seeded from it (:func:`load_seed`) carries the keys, with their
own first-seen times, in the next committed batch's file, so no term after that one needs the seed.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tenure.career._durable import fsync

__all__ = ["DEDUP_COLUMNS", "DedupStore", "Judged", "load_seed", "load_store", "published_batches",
           "read_published", "seed_name", "write_judged", "write_seed"]

DEDUP_COLUMNS = pa.schema([("id", pa.string()), ("first_seen_ms", pa.int64())])
"""A published batch's new keys and when each was first seen; the batch's event time is the file's ``admitted_ms``
metadata."""
_ADMITTED = b"admitted_ms"

_PUBLISHED = re.compile(r"batch-(\d{12})-part-00000\.parquet")


@dataclass(frozen=True)
class Judged:
    """One batch judged against a store: which of its rows repeat a key (the store's, or an earlier row's of the
    batch), and the keys it saw first, to stage and, after the batch's commit, to add to the store."""

    batch_id: int
    admitted_ms: int
    repeats: pa.Array
    """One boolean per row of the judged batch, in its order: True for a row to drop."""
    new: list[str]
    """The keys the batch saw first, in the batch's order: what it stages and publishes."""
    carried: dict[str, int] = field(default_factory=dict)
    """Keys of a seeded store no file holds yet, with their first-seen times: published with the batch."""

    @property
    def repeat_count(self) -> int:
        return int(pc.sum(self.repeats).as_py() or 0)

    def table(self) -> pa.Table:
        """The published file's contents: the carried and the new keys with their first-seen times, the batch's
        event time in the metadata."""
        ids = [*self.carried, *self.new]
        times = [*self.carried.values(), *[self.admitted_ms] * len(self.new)]
        return pa.table({"id": pa.array(ids, pa.string()), "first_seen_ms": pa.array(times, pa.int64())},
                        schema=DEDUP_COLUMNS).replace_schema_metadata({_ADMITTED: str(self.admitted_ms).encode()})


@dataclass
class DedupStore:
    """The keys remembered as of batch :attr:`batch_id` (None: before any batch), with their event times.

    Not thread-safe: one term's batch writer, or one follower's preparer thread, owns a store.

    Args:
        window_ms: how long, in event time, a key is remembered after the batch that first saw it.
    """

    window_ms: int
    batch_id: int | None = None
    newest_ms: int | None = None
    """The newest event time of a batch applied: the window ends ``window_ms`` before it."""
    _keys: dict[str, int] = field(default_factory=dict)
    _by_batch: deque[tuple[int, int, list[str]]] = field(default_factory=deque)
    """(batch, its keys' newest first-seen time, keys first seen) per batch applied, in batch order (so in event
    time): what expiry drops, a batch at a time."""
    _unpublished: dict[str, int] = field(default_factory=dict)
    """A seeded store's keys that no file holds yet (:meth:`seeded`)."""

    @classmethod
    def seeded(cls, window_ms: int, batch_id: int, newest_ms: int, keys: dict[str, int]) -> DedupStore:
        """The store as of committed batch ``batch_id`` of a data root that Spark's state store deduplicated: its
        remembered ``keys`` with their first-seen times and its newest event time. The next batch's file carries
        them (:attr:`Judged.carried`)."""
        store = cls(window_ms)
        store._add(batch_id, newest_ms, dict(keys))
        store._unpublished = dict(keys)
        return store

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def horizon_ms(self) -> int | None:
        """Keys first seen before this event time are forgotten (None: nothing applied yet)."""
        return None if self.newest_ms is None else self.newest_ms - self.window_ms

    def judge(self, batch_id: int, keys: pa.Array | pa.ChunkedArray, admitted_ms: int) -> Judged:
        """Judge batch ``batch_id``'s rows, whose dedup keys are ``keys`` in the batch's order (the first of several
        copies in the batch is the one kept): a row repeats a key the store remembers or an earlier row's.

        The batch's event time is ``admitted_ms``, or the newest applied if that is later: event time never goes
        back, so a batch stamped by a clock behind an earlier leader's (an ingestion-time source) has its keys
        remembered a whole window, not forgotten at once.

        Raises:
            ValueError: the store is not as of the batch before ``batch_id`` (a term must load the right one).
        """
        if self.batch_id is not None and batch_id != self.batch_id + 1:
            raise ValueError(f"the dedup store is as of batch {self.batch_id}, not batch {batch_id - 1}: load it "
                             "again from the published files")
        remembered = self._keys
        horizon = self.horizon_ms
        seen: set[str] = set()
        repeats: list[bool] = []
        new: list[str] = []
        for key in keys.to_pylist():
            first = remembered.get(key)
            if key in seen or (first is not None and horizon is not None and first >= horizon):
                repeats.append(True)
                continue
            seen.add(key)
            new.append(key)
            repeats.append(False)
        event_ms = admitted_ms if self.newest_ms is None else max(admitted_ms, self.newest_ms)
        return Judged(batch_id, event_ms, pa.array(repeats, pa.bool_()), new, dict(self._unpublished))

    def apply(self, judged: Judged) -> None:
        """Move the store to ``judged``'s batch, once that batch is committed: remember its new keys."""
        self._add(judged.batch_id, judged.admitted_ms, dict.fromkeys(judged.new, judged.admitted_ms))
        if judged.carried:
            self._unpublished = {}

    def _add(self, batch_id: int, admitted_ms: int, first_seen: dict[str, int]) -> None:
        self._keys.update(first_seen)  # new to the store: never remembered, or forgotten since
        newest_key = max(first_seen.values(), default=admitted_ms)
        self._by_batch.append((batch_id, newest_key, list(first_seen)))
        self.newest_ms = admitted_ms if self.newest_ms is None else max(self.newest_ms, admitted_ms)
        self.batch_id = batch_id

    def forget_expired(self) -> list[int]:
        """Drop from memory the keys of batches the window has passed (their event time before the horizon);
        returns those batches, whose published files hold only forgotten keys now and may be deleted. Judging does
        not depend on it: a key first seen before the horizon is not a repeat either way."""
        horizon = self.horizon_ms
        gone: list[int] = []
        while horizon is not None and self._by_batch and self._by_batch[0][1] < horizon:
            batch, _admitted, keys = self._by_batch.popleft()
            for key in keys:
                if self._keys.get(key, horizon) < horizon:
                    del self._keys[key]
            gone.append(batch)
        return gone

    def caught_up(self, folder: Path, batch_id: int) -> None:
        """A follower's step: move the store to committed batch ``batch_id`` by the files published since, and forget
        what the window has passed.

        Raises:
            ValueError: the store is ahead of ``batch_id``.
        """
        if self.batch_id is not None and batch_id < self.batch_id:
            raise ValueError(f"the dedup store is as of batch {self.batch_id}, ahead of committed batch {batch_id}")
        start = -1 if self.batch_id is None else self.batch_id
        for batch, path in published_batches(folder):
            if start < batch <= batch_id:
                try:
                    admitted_ms, first_seen = read_published(path)
                except FileNotFoundError:
                    continue  # purged since the listing: only a batch whose keys were all forgotten is
                self._add(batch, admitted_ms, first_seen)
        self.batch_id = batch_id
        self.forget_expired()


def published_batches(folder: Path) -> list[tuple[int, Path]]:
    """The batches that published new keys in ``folder``, with their files, oldest first."""
    found: list[tuple[int, Path]] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            match = _PUBLISHED.fullmatch(entry.name)
            if match is not None:
                found.append((int(match[1]), Path(entry.path)))
    return sorted(found)


def write_judged(judged: Judged, folder: Path) -> None:
    """Stage ``judged``'s file as the single part file ``part-00000.parquet`` of ``folder`` (replacing any)."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / ".part-00000.parquet"
    pq.write_table(judged.table(), partial)
    partial.replace(folder / "part-00000.parquet")


def read_published(path: Path) -> tuple[int, dict[str, int]]:
    """A published file's batch event time, and its keys with their first-seen times.

    Raises:
        ValueError: the file has no event time (not written by :func:`write_judged`).
    """
    table = pq.read_table(path)
    admitted = (table.schema.metadata or {}).get(_ADMITTED)
    if admitted is None:
        raise ValueError(f"{path} has no {_ADMITTED.decode()} metadata: not a published dedup file; move it away")
    return int(admitted), dict(zip(table.column("id").to_pylist(), table.column("first_seen_ms").to_pylist(),
                                   strict=True))


def load_store(folder: Path, batch_id: int | None, window_ms: int) -> DedupStore:
    """The store as of committed batch ``batch_id`` (None: before any batch), from the files published in ``folder``.

    Only batches up to ``batch_id`` count: a file of a later batch is a batch committed after the record read.
    """
    store = DedupStore(window_ms)
    if batch_id is not None:
        store.caught_up(folder, batch_id)
    return store


def seed_name(batch_id: int) -> str:
    """The name of the upgrade's seed of committed batch ``batch_id`` in ``dedup/``."""
    return f"seed-{batch_id:012d}.parquet"


def write_seed(folder: Path, batch_id: int, newest_ms: int, keys: dict[str, int]) -> None:
    """Write, durably, the keys an earlier release's Spark state remembered as of committed batch ``batch_id`` (with
    their first-seen times) and that batch's event time; replaces a seed of the same batch (the same state)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / seed_name(batch_id)
    partial = path.with_name(f".{path.name}")
    table = pa.table({"id": pa.array(list(keys), pa.string()),
                      "first_seen_ms": pa.array(list(keys.values()), pa.int64())}, schema=DEDUP_COLUMNS)
    table = table.replace_schema_metadata({_ADMITTED: str(newest_ms).encode()})
    pq.write_table(table, partial)
    fsync(partial)
    partial.replace(path)
    fsync(folder, directory=True)


def load_seed(folder: Path, batch_id: int, window_ms: int) -> DedupStore | None:
    """The store seeded from the seed of committed batch ``batch_id`` (None: no seed written for that batch)."""
    try:
        newest_ms, keys = read_published(folder / seed_name(batch_id))
    except FileNotFoundError:
        return None
    return DedupStore.seeded(window_ms, batch_id, newest_ms, keys)
