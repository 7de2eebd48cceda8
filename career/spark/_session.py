"""SparkSession creation for the consumer: small, UI-less, RocksDB state, the driver's Python on workers."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import structlog
from pyspark.sql import SparkSession

from tenure.career.spark._forkserver import fork_server
from tenure.career.spark._worker_python import FORK_SERVER_ENV, LAUNCHER, worker_python

__all__ = ["SESSION_CONF", "SPARK_SESSION_READY", "build_session", "use_driver_python"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
SPARK_SESSION_READY: Final = "spark_session_ready"

_log = structlog.get_logger("tenure.career.spark")

SESSION_CONF: dict[str, str] = {
    # Runtime SQL settings, set on the career's own child session (so a shared session's users are untouched).
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # No empty batches just to advance the watermark: state is evicted when data next arrives, and every
    # batch id the consumer sees then carries data worth a commit.
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    # The outputs are Delta tables (tenure.career.output): a timestamp a transform adds is written as Delta's
    # microsecond timestamp, not Spark's legacy INT96, which Delta has no type for.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
"""Runtime settings of the consumer's session; the caller's ``shuffle_partitions`` and extra conf come on top."""

_STATIC_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def use_driver_python(session: SparkSession, master: str, *, fork_server_on: bool = True) -> None:
    """On a local master, run Python workers with the driver's interpreter unless PYSPARK_PYTHON says otherwise.

    PySpark's default worker is ``python3`` from PATH, which outside an activated virtualenv lacks pyarrow
    (the pipeline's ``mapInArrow`` needs it). The interpreter is started through ``tenure-spark-python``
    (:mod:`tenure.career.spark._worker_python`), so that it imports PySpark's compiled modules, not Spark's
    archive of its sources; and a query's source runner is forked by this process's fork server, its imports done
    (:mod:`tenure.career.spark._forkserver`) unless ``fork_server_on`` is False. On a cluster the workers' Python
    is the cluster's business.
    """
    if not master.startswith("local"):
        return
    context: Any = session.sparkContext
    python = os.environ.get("PYSPARK_PYTHON") or worker_python()
    if "PYSPARK_PYTHON" not in os.environ and context.pythonExec != python:
        context.pythonExec = python  # read when each Python function is wrapped: takes effect now
    server = fork_server() if fork_server_on and Path(python).name == LAUNCHER else None
    if server is not None:
        context.environment[FORK_SERVER_ENV] = server.socket_path  # each data source registered from now on
    else:
        context.environment.pop(FORK_SERVER_ENV, None)


def build_session(
    master: str, *, app_name: str, shuffle_partitions: int, extra_conf: Mapping[str, str], fork_server_on: bool = True
) -> tuple[SparkSession, bool]:
    """Get (or create) the process's SparkSession and return a child session configured for the consumer.

    An existing session (a test fixture, an embedding application) is reused: ``getOrCreate`` returns it,
    and static settings such as the master then come from it. The child session shares its SparkContext
    (so the JVM stays warm) but has its own SQL conf and streaming queries.

    Returns:
        ``(session, owned)``: ``owned`` is True when this call started the SparkContext (the career stops it).
    """
    owned = SparkSession.getActiveSession() is None and _no_context()
    if owned and master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    builder: Any = SparkSession.builder.master(master).appName(app_name)
    if owned:  # on an existing session the builder's settings would overwrite its owner's conf
        for key, value in {**_STATIC_CONF, **extra_conf}.items():
            builder = builder.config(key, value)
    base = builder.getOrCreate()
    if owned:
        base.sparkContext.setLogLevel("WARN")
    session = base.newSession()
    for key, value in {**SESSION_CONF, "spark.sql.shuffle.partitions": str(shuffle_partitions),
                       **extra_conf}.items():
        if key.startswith("spark.sql."):
            session.conf.set(key, value)
    use_driver_python(session, master, fork_server_on=fork_server_on)
    _log.info(SPARK_SESSION_READY, master=base.sparkContext.master, owned=owned,
              version=base.version)
    return session, owned


def _no_context() -> bool:
    from pyspark import SparkContext

    return getattr(SparkContext, "_active_spark_context", None) is None
