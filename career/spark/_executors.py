"""How many executors an application holds on a cluster: a follower's few, a leader's share.

A follower on a cluster holds a small application of its own, with ``standby_executors`` warm executors, so that
it leads without waiting for executor JVMs to start; once it leads (after its first batch) the same application
grows to the leader's share. The application runs under Spark's dynamic allocation, for one reason: an application
that uses it registers with the master asking for no executors, and then for its ``initialExecutors``, whereas any
other takes every free core up to ``spark.cores.max`` at once. Its timeouts are set beyond reach, so that Spark
itself never grows a follower's application (its warm-up queues tasks) nor shrinks a leader's (idle between files):
the career alone sets the number, through the master's executor limit.

Measured on the embedded cluster (2 workers × 2 cores): without dynamic allocation a standby application took all
4 cores at registration and gave them back only when its driver killed the executors beyond its count, which
registered seconds apart; with it, the application registered with 1 core, a 6-task job on it stayed on 1, and
raising the limit gave it all 4 at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from pyspark.sql import SparkSession

__all__ = ["StandbyExecutors", "standby_conf"]

_UNBOUNDED = 1 << 20  # an executor limit that leaves spark.cores.max (or the cluster's size) as the only bound
_NEVER: Final = "36500d"
_POLL_S = 0.1


def standby_conf(executors: int) -> dict[str, str]:
    """The settings of a standby application that holds ``executors`` executors until it grows."""
    return {
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        "spark.dynamicAllocation.minExecutors": str(executors),
        "spark.dynamicAllocation.initialExecutors": str(executors),
        "spark.dynamicAllocation.schedulerBacklogTimeout": _NEVER,
        "spark.dynamicAllocation.sustainedSchedulerBacklogTimeout": _NEVER,
        "spark.dynamicAllocation.executorIdleTimeout": _NEVER,
        "spark.dynamicAllocation.cachedExecutorIdleTimeout": _NEVER,
        "spark.dynamicAllocation.shuffleTracking.timeout": _NEVER,
    }


class StandbyExecutors:
    """A standby application's executors: wait until they have registered; grow to the leader's share.

    Every method calls into Spark's JVM: the career calls them within a deadline.
    """

    def __init__(self, session: SparkSession, count: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._session = session
        self._count = count
        self._clock = clock
        self._grown = False

    @property
    def _context(self) -> Any:
        return self._session.sparkContext._jsc.sc()

    def registered(self) -> int:
        """How many executors have registered with the driver."""
        return int(self._context.getExecutorIds().size())

    def hold(self, timeout_s: float) -> int:
        """Wait, up to ``timeout_s``, until ``count`` executors have registered; returns how many have."""
        deadline = self._clock() + timeout_s
        while (held := self.registered()) < self._count and self._clock() < deadline:
            time.sleep(_POLL_S)
        return min(held, self._count)

    @property
    def grown(self) -> bool:
        return self._grown

    def grow(self) -> None:
        """Raise the master's executor limit to the leader's share: it launches executors on the free cores."""
        self._grown = True
        self.renew()

    def renew(self) -> None:
        """Tell the master the limit again: a master that restarts recovers an application of this kind with a
        limit of none, so it would not replace an executor lost after its restart."""
        jvm: Any = self._session.sparkContext._jvm
        empty = getattr(jvm.scala.collection.immutable, "Map$").__getattr__("MODULE$").empty()
        self._context.requestTotalExecutors(_UNBOUNDED if self._grown else self._count, 0, empty)
