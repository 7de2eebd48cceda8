"""Footprint: resident memory of a follower (warm and cold standby) and of the leader, vs the naive recipe."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._cluster import Cluster, CommitTimeline, NaiveCluster, TenureCluster, rss
from bench._common import BenchContext, Result
from bench._handover import steady

__all__ = ["run_footprint"]

_RATE = 2000.0
_MIB = 1 << 20


def _sample(cluster: Cluster, samples: int, interval_s: float) -> dict[str, Any]:
    cluster.start()
    try:
        with CommitTimeline(cluster.connect_string, cluster.group) as timeline:
            leader = steady(cluster, timeline, 600.0).replica_id
            time.sleep(interval_s * 2)  # past the warm-up's and the first batches' peaks
            leader_rss: list[float] = []
            follower_rss: list[float] = []
            for _ in range(samples):
                current = timeline.latest()
                leader = current.replica_id if current is not None else leader
                for replica_id in cluster.replica_ids():
                    value = rss(cluster, replica_id) / _MIB
                    (leader_rss if replica_id == leader else follower_rss).append(value)
                time.sleep(interval_s)
    finally:
        cluster.stop()
    return {"leader_mib": round(statistics.median(leader_rss), 1),
            "follower_mib": round(statistics.median(follower_rss), 1),
            "follower_max_mib": round(max(follower_rss), 1), "leader_max_mib": round(max(leader_rss), 1),
            "samples": samples}


def run_footprint(ctx: BenchContext) -> Result:
    """RSS (process tree from /proc: the replica's Python plus its Spark JVM) per role and standby mode."""
    samples, interval_s = (2, 1.0) if ctx.quick else (6, 2.0)
    result = Result(
        name="footprint", title="Footprint: resident memory per replica (process + Spark JVM)",
        command="python -m bench.run --only footprint",
        params={"samples": samples, "interval_s": interval_s, "producer_records_per_s": _RATE, "contenders": 3,
                "spark_driver_memory": "Spark's default (1 GiB heap cap, local[2])"},
    )
    recipes: list[tuple[str, Callable[[Path], Cluster]]] = [
        ("tenure-warm", lambda d: TenureCluster(d, standby="warm", rate=_RATE)),
        ("tenure-cold", lambda d: TenureCluster(d, standby="cold", rate=_RATE)),
        ("naive", lambda d: NaiveCluster(d, rate=_RATE)),
    ]
    figures: dict[str, Any] = {}
    for label, factory in recipes:
        figures[label] = _sample(factory(ctx.work / label), samples, interval_s)
        result.table.append({"recipe": label, "follower RSS MiB (median)": figures[label]["follower_mib"],
                             "leader RSS MiB (median)": figures[label]["leader_mib"],
                             "follower max MiB": figures[label]["follower_max_mib"],
                             "leader max MiB": figures[label]["leader_max_mib"]})
    result.figures = figures
    result.notes += [
        "RSS summed over the replica's process tree from /proc/<pid>/statm (the Python process, its Spark JVM "
        "and Spark's Python workers), while the leader consumes a steady 2000 records/s.",
        "A warm follower holds a started and exercised SparkSession: that is the price of a sub-second "
        "handover. A cold (or naive) follower is a Python process with a ZooKeeper session.",
    ]
    return result
