"""User code that misbehaves on purpose, for the stuck-leader drills and their tests.

``tenure drill stuck-leader`` runs replicas with ``--row-function tenure.career.drills:hang_when_told`` and
``--transform tenure.career.drills:fail_on_poison_pill``: harmless until told otherwise, so a drill can make one
replica's row function hang, or one batch fail on every leader, while the others stay healthy.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the conventional PySpark alias)
from pyspark.sql.types import StringType

__all__ = ["HANG_ENV", "POISON_PILL", "fail_on_poison_pill", "hang_when_told"]

HANG_ENV = "TENURE_DRILL_HANG"
"""Names a file; while it exists, :func:`hang_when_told` hangs in the replica (and its Spark workers) whose
environment names it. Its content says how: ``socket HOST:PORT`` waits for an answer that never comes (a
dependency called without a timeout: ``--row-timeout-s`` interrupts it), ``native`` blocks the timeout's signal
first (a call into C that ignores signals: only the progress watchdog helps), anything else sleeps."""

POISON_PILL = "poison_pill"
"""A payload field: a batch holding a record whose payload has it true fails in :func:`fail_on_poison_pill`; one
whose payload has it naming a file fails while that file exists (a cause a test or an operator can fix)."""


def hang_when_told(record: dict[str, Any]) -> None:
    """A row function that accepts every record, unless this replica's hang file exists: then it hangs."""
    path = os.environ.get(HANG_ENV)
    if not path or not os.path.exists(path):
        return None
    how = Path(path).read_text().strip()
    if how.startswith("socket "):
        host, _, port = how.removeprefix("socket ").rpartition(":")
        with socket.create_connection((host, int(port))) as conn:
            conn.recv(1)  # the peer accepted and never answers
        return None
    if how == "native":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            while os.path.exists(path):
                time.sleep(0.1)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
        return None
    while os.path.exists(path):
        time.sleep(0.1)
    return None


def _swallow_poison(payload: str | None) -> str | None:
    if payload is None or POISON_PILL not in payload:
        return payload
    pill = json.loads(payload).get(POISON_PILL) if payload.lstrip().startswith("{") else None
    if pill is True or (isinstance(pill, str) and os.path.exists(pill)):
        raise ValueError(f"a record's payload holds {POISON_PILL}: this batch fails on every leader")
    return payload


def fail_on_poison_pill(records: DataFrame) -> DataFrame:
    """A transform that passes every record through, but fails the whole batch when one holds the poison pill
    (a UDF raising on the executors, as a bad record would in real code): always when the pill is true, while
    the file it names exists when it is a path."""
    return records.withColumn("payload", F.udf(_swallow_poison, StringType())(F.col("payload")))
