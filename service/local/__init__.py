"""Infrastructure on this machine: the embedded ZooKeeper ensemble and Redis, replica processes and their topology,
network namespaces, and the commands built on them (``tenure zk``, ``tenure redis``, ``tenure up``, ``tenure demo``)."""

from tenure.service.local._demo import run_demo
from tenure.service.local._ensemble import (
    Ensemble,
    EnsembleError,
    Server,
    die_with_parent,
    find_java,
    free_base_port,
    running_ensemble,
    start_ensemble,
)
from tenure.service.local._free_port import free_port
from tenure.service.local._netns import NetNamespace, NetnsError, netns_unavailable
from tenure.service.local._redis import RedisServer, RedisServerError, running_redis, start_redis
from tenure.service.local._replica_process import ReplicaLaunch, ReplicaProcess, ReplicaStatus
from tenure.service.local._spark_cluster import (
    SPARK_PROCESS_DIED,
    SparkCluster,
    SparkClusterError,
    SparkDaemon,
    SparkWorker,
)
from tenure.service.local._topology import LOCAL_SPEC, REPLICA_STOPPED, TOPOLOGY_STOPPED, Topology
from tenure.service.local._up import run_up
from tenure.service.local._wait import wait_for

__all__ = [
    "LOCAL_SPEC",
    "REPLICA_STOPPED",
    "SPARK_PROCESS_DIED",
    "TOPOLOGY_STOPPED",
    "Ensemble",
    "EnsembleError",
    "NetNamespace",
    "NetnsError",
    "RedisServer",
    "RedisServerError",
    "ReplicaLaunch",
    "ReplicaProcess",
    "ReplicaStatus",
    "Server",
    "SparkCluster",
    "SparkClusterError",
    "SparkDaemon",
    "SparkWorker",
    "Topology",
    "die_with_parent",
    "find_java",
    "free_base_port",
    "free_port",
    "netns_unavailable",
    "run_demo",
    "run_up",
    "running_ensemble",
    "running_redis",
    "start_ensemble",
    "start_redis",
    "wait_for",
]
