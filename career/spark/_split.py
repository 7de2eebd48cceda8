"""Splitting a poison batch: bisect its records down to those that fail, so only they are set aside (as AWS Lambda's
``BisectBatchOnFunctionError`` does for a stream's batch).

A batch that failed ``--max-batch-attempts`` terms for ``--set-aside-after-s`` is run once more by the term told to
set it aside. If it fails again, that term bisects it on the leader, inside the same ``foreachBatch``: the
batch's records are cut into halves — by queue file first, then by line within a file — and the user's code (the
row function and the transform, as the batch runs them) is tried on each half; a half that fails is cut again,
until single records, and a half that passes is cleared. What fails is set aside, the rest is written in that
batch's one commit (one Delta version per batch still).

Cost, bounded: each cut costs two trials, so one bad record among ``n`` in ``f`` files costs about
``2·(log2 f + log2 n)`` trials (26 for one record among 1 000 lines of 5 files), each a Spark job over the
cached batch, small after the first cuts: about two runs of the batch in all, plus a fraction of a second a trial
on a warm session. ``--split-max-trials`` caps the trials: once spent, the halves still failing are set aside
whole. The split runs within the batch, so the progress watchdog bounds it too: a split that outlasts the stall
timeout (or hangs in user code) is a stall, counted against the batch, and the next term sets the batch aside
whole, as before splitting existed (``FailedBatch.split_failed``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)

from tenure.career.spark._pipeline import KIND_ROW

__all__ = ["Unit", "bisect", "in_units"]


@dataclass(frozen=True)
class Unit:
    """Some records of one source (a queue file, or a set-aside file being replayed): its record lines, ascending."""

    source: str
    lines: tuple[int, ...]

    @property
    def atomic(self) -> bool:
        return len(self.lines) == 1


def _halves(group: Sequence[Unit]) -> tuple[list[Unit], list[Unit]]:
    """Two halves of ``group`` (of two units or more: by unit; of one: by its lines)."""
    if len(group) > 1:
        middle = len(group) // 2
        return list(group[:middle]), list(group[middle:])
    unit = group[0]
    middle = len(unit.lines) // 2
    return [Unit(unit.source, unit.lines[:middle])], [Unit(unit.source, unit.lines[middle:])]


def bisect(group: Sequence[Unit], fails: Callable[[list[Unit]], bool], max_trials: int) -> list[Unit]:
    """The units of ``group`` to blame for its failure (``group`` is known to fail as a whole).

    Each half is tried (``fails``); a failing half is bisected again, down to single records; a group whose
    halves both pass fails only as a whole (its records together, or not at all any more): the group itself is
    blamed, as is any group left when ``max_trials`` trials have been made.

    Example:
        >>> bad = {("a", 3), ("b", 9)}
        >>> group = [Unit("a", (1, 2, 3, 4)), Unit("b", (7, 8, 9))]
        >>> sorted((u.source, u.lines) for u in bisect(group, lambda units: any(
        ...     (u.source, line) in bad for u in units for line in u.lines), 20))
        [('a', (3,)), ('b', (9,))]
    """
    trials = 0

    def search(suspects: Sequence[Unit]) -> list[Unit]:
        nonlocal trials
        if (len(suspects) == 1 and suspects[0].atomic) or trials + 2 > max_trials:
            return list(suspects)
        left, right = _halves(suspects)
        trials += 2
        left_fails, right_fails = fails(left), fails(right)
        if not (left_fails or right_fails):
            return list(suspects)
        return (search(left) if left_fails else []) + (search(right) if right_fails else [])

    return search(group)


def in_units(units: Sequence[Unit]) -> Column:
    """True for the record rows (``kind``, ``source_file``, ``line``) the units hold, False for every other row
    (a bad line or a file's marker included, never null)."""
    if not units:
        return F.lit(False)
    terms = [(F.col("source_file") == unit.source) & F.col("line").between(unit.lines[0], unit.lines[-1])
             for unit in units]
    return F.coalesce((F.col("kind") == KIND_ROW) & reduce(lambda a, b: a | b, terms), F.lit(False))
