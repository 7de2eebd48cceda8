"""The daemon of Spark's planner workers under tenure: ``pyspark.daemon`` with the queue sources imported first.

Spark plans a Python data source in workers of their own (``pyspark.sql.worker.create_data_source``,
``plan_data_source_read``, …), forked by a daemon per kind, each fork importing the source's module as it unpickles
it. A worker idle for a minute is stopped, so on a follower that has led nothing for a while, a new leader's query
start and first trigger fork workers that import the queue source, PyArrow and the pipeline on its path. Under this
daemon every fork has them imported. The launcher (:mod:`tenure.career.spark._worker_python`) runs it in place of
``pyspark.daemon`` for the planner workers when the replica's fork server is on; the executors' ``pyspark.worker``
daemon is Spark's own.
"""

from __future__ import annotations

import sys
from typing import Final

__all__ = ["PRELOAD", "main"]

PRELOAD: Final = ("pyarrow", "tenure.career.spark._intake", "tenure.career.spark._redis_source",
                  "tenure.career.spark._pipeline")


def main() -> None:
    """Import the planner's module (``sys.argv[1]``) and :data:`PRELOAD`, then serve as ``pyspark.daemon``."""
    from pyspark import daemon

    for name in (sys.argv[1], *PRELOAD):
        __import__(name)
    daemon.manager()


if __name__ == "__main__":
    main()
