"""A follower's state kept ready to lead its queue (issue 53): the newest term's checkpoint hard-linked and caught up
(``_checkpoints.PreparedCheckpoint``), and the committed per-key marks and retry store loaded, each checked against the
commit record before the successor's term uses it (``--standby-state``)."""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from tenure.career.spark._checkpoints import PreparedCheckpoint
from tenure.career.spark._dedup import DedupStore
from tenure.career.spark._layout import Layout
from tenure.career.spark._order import HighWaterMarks
from tenure.career.spark._retry import read_snapshot
from tenure.career.spark._term import committed_batch

__all__ = ["STANDBY_STATE_FAILED", "Preloaded", "StatePreparer"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
STANDBY_STATE_FAILED: Final = "standby_state_failed"

#: How often a follower looks for a commit it has not seen (a stat of the newest term's commit log): the longest a
#: prepared copy lags the leader's last batch when no inauguration catches it up anyway.
_POLL_S = 0.5
#: How long a follower leaves a term folder its copy does not mirror yet alone while that term commits nothing new
#: (:meth:`StatePreparer._defers`): a term that stays idle is mirrored all the same, this much later.
_DEFER_S = 10.0
_SNAPSHOT = re.compile(r"batch-(\d{12})-part-00000\.parquet")


@dataclass(frozen=True)
class Preloaded:
    """The marks and the retry store of the newest batch Spark committed in the followed term's checkpoint, loaded.

    Keyed by that batch id and by the files they were read from (paths as a commit record names them, relative to
    the data root): a term uses each only when the commit record names that batch and that very file
    (:meth:`marks_for`, :meth:`held_for`). Published snapshots are written once under a name of their batch, so the
    same name is the same content.
    """

    batch_id: int
    order: tuple[str, HighWaterMarks] | None
    retry: tuple[str, pa.Table] | None
    dedup: DedupStore | None = None

    def marks_for(self, record: dict[str, Any] | None) -> tuple[str, HighWaterMarks] | None:
        """The marks, if ``record`` is this batch's and names this marks snapshot."""
        if self.order is None or committed_batch(record) != self.batch_id or (record or {}).get("order") != \
                self.order[0]:
            return None
        return self.order

    def held_for(self, record: dict[str, Any] | None) -> tuple[str, pa.Table] | None:
        """The retry store, if ``record`` is this batch's and names this retry snapshot."""
        if self.retry is None or committed_batch(record) != self.batch_id or (record or {}).get("retry") != \
                self.retry[0]:
            return None
        return self.retry

    def dedup_for(self, record: dict[str, Any] | None, folder: Path) -> DedupStore | None:
        """The dedup store as of ``record``'s batch, if its data root keeps the store's files (``dedup_since``:
        otherwise the term seeds the store from Spark's state, which the files do not hold): caught up from the
        files published in ``folder`` when it is behind (at a graceful handover the old leader's last batch commits
        just before it hands over, so a follower's store is most often one batch behind). Call after the committed
        batch was rolled forward: its file is then in ``folder``. None for a store ahead of the record."""
        committed = committed_batch(record)
        if self.dedup is None or committed is None or "dedup_since" not in (record or {}):
            return None
        if self.dedup.batch_id != committed:
            try:
                self.dedup.caught_up(folder, committed)
            except ValueError:  # ahead of the record: it followed a checkpoint the record does not name
                return None
        return self.dedup


class StatePreparer:
    """What a follower of one queue keeps ready to lead it: its thread follows the newest term's checkpoint and,
    after each commit it sees there (a new file in its ``commits/``), catches the prepared copy up and loads that
    batch's marks and retry store. It pauses while the career leads (:meth:`pause`, :meth:`resume`).

    The follower does not read ZooKeeper while it follows: it mirrors what the leader's checkpoint and published
    snapshots hold, and the new term checks both against the commit record it reads at inauguration, so a copy
    that lags, or that follows a term no longer the newest, costs time, never correctness.

    A term folder the copy does not mirror yet (a new term's, or any, for the replica whose own term has just
    ended and so holds no copy) is left alone until that term commits a batch of its own (:meth:`_defers`): its
    first batch is the handover's gap, which a catch-up would slow on the same cores and disk.

    Args:
        layout: the queue's layout on the data root.
        owner: the replica id: names the prepared copy (several replicas may share a data root).
        log: the career's logger.
        window_ms: the dedup window, in milliseconds of event time (the dedup store's).
        defer_s: how long a term that commits nothing new is left alone before its folder is mirrored anyway.
    """

    def __init__(self, layout: Layout, owner: str, log: Any, *, window_ms: int, defer_s: float = _DEFER_S) -> None:
        self.checkpoint = PreparedCheckpoint(layout, owner)
        self._layout = layout
        self._log = log
        self._window_ms = window_ms
        self._defer_s = defer_s
        # Held while the thread moves the dedup store: the store is moved in place, and is the term's once handed.
        self._dedup_lock = threading.Lock()
        self._preloaded: Preloaded | None = None
        self._seen: tuple[int, int] | None = None  # (term, mtime of its commit log) last caught up with
        # A term folder not mirrored yet: (term, newest batch in its commit log, monotonic time) when first seen.
        self._first_seen: tuple[int, int, float] | None = None
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tenure-standby-state-{layout.index}", daemon=True)
        self._thread.start()

    def pause(self) -> Preloaded | None:
        """The career is inaugurating: the thread stops touching the copy and the dedup store (a round in progress
        finishes first); returns what it preloaded, which the term owns from now on."""
        self._leading.set()
        with self.checkpoint.lock:
            preloaded, self._preloaded, self._seen, self._first_seen = self._preloaded, None, None, None
        with self._dedup_lock:
            return preloaded

    def resume(self) -> None:
        """The career's term has ended: follow again."""
        self._leading.clear()

    def close(self) -> None:
        """Stop the thread and drop the copy."""
        self._stop.set()
        self._thread.join(10.0)
        with self.checkpoint.lock:
            self.checkpoint.discard()

    def catch_up(self) -> bool:
        """One round, unless the career leads: when the newest term's commit log has changed since the last round,
        catch the copy up and load the newest committed batch's marks and retry store. True if it did.

        Only the links are made holding the copy's lock; their fsyncs and the Parquet reads come after, so an
        inauguration that begins meanwhile waits for the links alone (and drops what the round loads)."""
        with self.checkpoint.lock:
            if self._leading.is_set():
                return False
            found = self.checkpoint.newest_term()
            if found is None:
                return False
            newest, folder = found
            try:
                seen = (newest, os.stat(folder / "commits").st_mtime_ns)
            except FileNotFoundError:
                return False
            if seen == self._seen or self._defers(newest, folder):
                return False
            self.checkpoint.catch_up()
            self._seen, before = seen, self._preloaded
        self.checkpoint.sync_linked()
        loaded = self._load(folder, before)
        with self.checkpoint.lock:
            if not self._leading.is_set() and self._seen == seen:
                self._preloaded = loaded
        return True

    def _defers(self, term: int, folder: Path) -> bool:
        """Whether to leave ``term``'s folder alone this round: the copy does not mirror it, and since it was first
        seen it has committed no batch past the newest its commit log held then, for less than ``defer_s``."""
        if term == self.checkpoint.source_epoch:
            return False
        newest = _newest_batch(folder)
        if self._first_seen is None or self._first_seen[0] != term:
            self._first_seen = (term, newest, time.monotonic())
            return True
        _, at_first_sight, since = self._first_seen
        return newest <= at_first_sight and time.monotonic() - since < self._defer_s

    def _run(self) -> None:
        while not self._stop.wait(_POLL_S):
            try:
                self.catch_up()
            except Exception as exc:  # the next round starts from nothing; a term copies in full meanwhile
                with self.checkpoint.lock:
                    self._preloaded, self._seen = None, None
                self._log.warning(STANDBY_STATE_FAILED, error=f"{type(exc).__name__}: {str(exc)[:500]}",
                                  effect="a new term of this replica copies its checkpoint in full and reads its "
                                         "marks and retry store from disk, as with --standby-state off")

    def _load(self, term: Path, before: Preloaded | None) -> Preloaded | None:
        """The marks, retry store and dedup store as of the newest batch in ``term``'s commit log (the marks and
        retry store already loaded kept when their files are the same; the dedup store caught up in place)."""
        batch = _newest_batch(term)
        if batch < 0:
            return None
        layout = self._layout
        order = _newest_snapshot(layout, layout.order, batch)
        retry = _newest_snapshot(layout, layout.retry, batch)
        marks = before.order if before is not None and before.order is not None and before.order[0] == order else None
        held = before.retry if before is not None and before.retry is not None and before.retry[0] == retry else None
        if order is not None and marks is None:
            marks = (order, HighWaterMarks.read(layout.resolve(order)))
        if retry is not None and held is None:
            table = read_snapshot(layout.resolve(retry))
            held = (retry, table) if table is not None else None
        return Preloaded(batch_id=batch, order=marks, retry=held, dedup=self._dedup_at(before, batch))

    def _dedup_at(self, before: Preloaded | None, batch: int) -> DedupStore | None:
        """The dedup store caught up to ``batch`` from the published files (the one kept before, unless it is
        ahead: a newer term's folder restarts it), or None once the career leads."""
        with self._dedup_lock:
            if self._leading.is_set():
                return None
            store = before.dedup if before is not None else None
            if store is None or (store.batch_id is not None and store.batch_id > batch):
                store = DedupStore(self._window_ms)
            store.caught_up(self._layout.dedup, batch)
            return store


def _newest_batch(term: Path) -> int:
    """The newest batch in ``term``'s commit log (-1: none, or no commit log yet)."""
    with contextlib.suppress(FileNotFoundError):
        return max((int(e.name) for e in os.scandir(term / "commits") if e.name.isdigit()), default=-1)
    return -1


def _newest_snapshot(layout: Layout, folder: Path, batch: int) -> str | None:
    """The newest snapshot published in ``folder`` by a batch up to ``batch``, as a commit record names it."""
    found: tuple[int, str] | None = None
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            match = _SNAPSHOT.fullmatch(entry.name)
            if match is not None and int(match[1]) <= batch and (found is None or int(match[1]) > found[0]):
                found = (int(match[1]), entry.name)
    return None if found is None else layout.relative(folder / found[1])
