"""Shared fixtures: one real ZooKeeper ensemble, one Redis and one SparkSession per test session."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from tenure.career.redis_queue import RedisTopic
from tenure.career.spark import worker_python
from tenure.service.local import Ensemble, RedisServer, free_base_port, start_ensemble, start_redis
from tests._powerloss import PowerLossFS, powerloss_fs

# Spark's Python workers must run this interpreter (with pyarrow), not whatever python3 PATH finds first, and
# through the launcher a replica uses (tenure-spark-python: the installed PySpark, not Spark's archive of it).
os.environ.setdefault("PYSPARK_PYTHON", worker_python())
# Spark's Python workers import user pipeline code (tests.pipelines) from the repository, whatever the cwd.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")) if p)

# Every JVM the tests start (Spark drivers, replicas', cluster daemons, ZooKeeper) compiles with C1 only and
# collects with the serial collector: a replica's Spark start-up and warm-up then take 0.58× the CPU
# (bench/results/test-jvm/results.md), and the suite starts dozens of Spark replicas on 2 cores. Steady speed is the
# benches' to measure, under the product's own JVM settings. Set JDK_JAVA_OPTIONS yourself to run under others.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# The embedded default (200 ms): sessions of 2–60 s are granted as asked and expire within 0.3 s of their
# timeout, so the tests run the ZooKeeper that `tenure zk` and `tenure up` run.
ZK_TICK_MS = Ensemble.DEFAULT_TICK_MS


def free_zk_base_port(servers: int = 3) -> int:
    """A client port range free for an ensemble of ``servers`` (see ``Ensemble`` for the layout)."""
    return free_base_port(servers)


def _docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


class DockerZooKeeper:
    """The official ``zookeeper`` image through testcontainers (only where a Docker engine runs)."""

    def __init__(self) -> None:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.waiting_utils import wait_for_logs

        self._container = DockerContainer("zookeeper:3.9").with_exposed_ports(2181).with_env(
            "ZOO_4LW_COMMANDS_WHITELIST", "*")
        self._container.start()
        wait_for_logs(self._container, "binding to port", timeout=60)
        self.connect_string = (f"{self._container.get_container_host_ip()}:"
                               f"{self._container.get_exposed_port(2181)}")

    def stop(self) -> None:
        self._container.stop()


@pytest.fixture(scope="session")
def zk_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One 3-server ensemble for the whole test session (or the Docker image with TENURE_TEST_ZK=docker)."""
    if os.environ.get("TENURE_TEST_ZK") == "docker":
        if not _docker_available():
            pytest.skip("TENURE_TEST_ZK=docker needs a running Docker engine, and none answers here")
        docker_zk = DockerZooKeeper()
        yield docker_zk
        docker_zk.stop()
        return
    ensemble = start_ensemble(tmp_path_factory.mktemp("zk"), tick_ms=ZK_TICK_MS)
    yield ensemble
    ensemble.stop()


@pytest.fixture()
def zk_hosts(zk_ensemble: Any) -> str:
    """The shared ensemble's connect string."""
    return str(zk_ensemble.connect_string)


@pytest.fixture()
def zk_group(request: pytest.FixtureRequest) -> str:
    """A consumer group of the test's own, so tests never see each other's znodes."""
    name = re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name)[:40]
    return f"t-{name}-{uuid.uuid4().hex[:6]}"


@pytest.fixture()
def zk_client(zk_hosts: str) -> Iterator[KazooClient]:
    """A started kazoo client on the shared ensemble, stopped after the test."""
    client = KazooClient(hosts=zk_hosts, timeout=10.0)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for the test session: few shuffle partitions, UI off."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tenure-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture()
def private_ensemble(tmp_path: Path) -> Iterator[Ensemble]:
    """A 3-server ensemble of the test's own, for tests that stop or kill ZooKeeper servers."""
    ensemble = start_ensemble(tmp_path / "zk", tick_ms=ZK_TICK_MS)
    yield ensemble
    ensemble.stop()


@pytest.fixture()
def counter_replicas(zk_hosts: str, zk_group: str, tmp_path: Path) -> Iterator[Any]:
    """Counter-career replicas of the test's group on one data root (`tests._replicas.ReplicaSet`), reaped after."""
    from tests._replicas import counter_replica_set  # imported here: tests._replicas imports this module

    replica_set = counter_replica_set(zk_hosts, zk_group, tmp_path)
    yield replica_set
    replica_set.reap_all()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One Redis for the whole test session (Debian's redis-server, append-only file on, ``appendfsync always``)."""
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.kill()


@pytest.fixture()
def redis_topic(redis_server: RedisServer, zk_group: str) -> RedisTopic:
    """A topic of the test's own on the shared Redis (its streams' prefix is the test's), so tests never see each
    other's streams."""
    return RedisTopic.parse(f"{redis_server.url}?prefix={zk_group}")


@pytest.fixture()
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of the test's own (append-only file on, ``appendfsync always``), for tests that kill or restart it;
    killed and reaped after the test, whatever it did."""
    server = start_redis(tmp_path / "redis")
    yield server
    server.kill()


@pytest.fixture()
def fs(tmp_path: Path) -> Iterator[PowerLossFS]:
    """A fresh power-loss mount at tmp_path/mnt over tmp_path/backing (skips, naming the fix, without FUSE)."""
    with powerloss_fs(tmp_path / "backing", tmp_path / "mnt") as mounted:
        yield mounted
