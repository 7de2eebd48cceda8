"""Pipeline code for the tests: the failure rule travels in each record, so every Spark worker agrees on it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812


def held(record: dict[str, Any]) -> dict[str, Any]:
    """Block while the file named by ``TENURE_TEST_HOLD`` exists (set on executors through
    ``spark.executorEnv``), so a test can catch a batch with its tasks running; the first record held on each
    Python worker leaves ``<hold>.reached.<pid>`` holding the worker's directory (which names the executor)."""
    hold = os.environ.get("TENURE_TEST_HOLD")
    if hold and os.path.exists(hold):
        marker = Path(f"{hold}.reaching.{os.getpid()}")  # renamed into place: a test never reads it half-written
        marker.write_text(os.getcwd())
        marker.replace(f"{hold}.reached.{os.getpid()}")
        while os.path.exists(hold):
            time.sleep(0.05)
    return record


def flaky(record: dict[str, Any]) -> None:
    """Raise while the file ``payload.fail_while`` exists, and always for ``payload.poison``."""
    payload = record["payload"]
    if isinstance(payload, dict):
        if payload.get("poison"):
            raise RuntimeError(f"poison {record['id']}")
        if payload.get("fail_while") and os.path.exists(payload["fail_while"]):
            raise RuntimeError(f"not yet {record['id']}")


def drops_seq(records: DataFrame) -> DataFrame:
    """A broken transform: it loses a column the output must keep."""
    return records.drop("seq")


def not_a_dataframe(records: DataFrame) -> int:
    return 1


def shouts(records: DataFrame) -> DataFrame:
    """An enriching transform: the key in capitals."""
    return records.withColumn("loud_key", F.upper("key"))


NOT_CALLABLE = 42


def scatters(records: DataFrame) -> DataFrame:
    """Round-robin over 4 partitions: each key's rows land in several partitions (a transform that reshuffles)."""
    return records.repartition(4)


def _fail_long(payload: str | None) -> str | None:
    if payload is not None and '"fail_long"' in payload:
        # As long as a py4j trace through a deep user stack, newlines included: Spark's interruption check runs a
        # backtracking regex over such a message (StreamExecution.PROXY_ERROR).
        raise ValueError("deep failure\n" + "\n".join(f"  at frame {i} of a long trace" for i in range(2000)))
    return payload


def fails_long(records: DataFrame) -> DataFrame:
    """A transform that fails the whole batch with a very long error when a record's payload has ``fail_long``."""
    fail_long = F.udf(lambda payload: _fail_long(payload), "string")  # noqa: PLW0108 (PySpark warns on the hints)
    return records.withColumn("payload", fail_long(F.col("payload")))
