"""Wires one replica together: ZooKeeper client, one election per queue of its group on it, the standby and each
queue's career, metrics and health, the runner (``_lifecycle``)."""

from __future__ import annotations

import importlib
import os
import re
import socket
import time
from collections.abc import Callable, Collection
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from tenure.career import Career, CareerObserver, Careers, Standby, counter_careers
from tenure.career.identity import Topic, ensure_data_root_id, ensure_topic, read_topic
from tenure.career.redis_queue import Position, RedisTopic, committed_positions
from tenure.election import (
    Election,
    ElectionEvent,
    GroupIdentity,
    Identity,
    Membership,
    OperatorRequests,
    QueueKey,
    TermHistory,
    ZooKeeperClient,
    bind_group,
    connect,
    disconnect,
    four_letter_word,
    is_connected,
    read_commit,
    read_group_identity,
    register_group,
    registered_groups,
)
from tenure.errors import ConfigError, ElectionError, ZooKeeperUnavailable
from tenure.service.replica._cluster_master import StandaloneMaster, master_webuis
from tenure.service.replica._config import ReplicaConfig
from tenure.service.replica._health import HealthServer
from tenure.service.replica._lifecycle import build_runner
from tenure.service.replica._metrics import Metrics
from tenure.service.replica._progress import ProgressClock, QueueProgress

__all__ = ["run_replica"]

_log = structlog.get_logger("tenure.replica")


def _check_session_timeout(hosts: str, session_timeout_s: float) -> None:
    """Refuse a session timeout the ensemble would silently clamp to its bounds (embedded ensemble: 2–60 s).

    kazoo does not expose the negotiated timeout, so ask a server for its bounds with the ``conf`` command;
    where four-letter words are disabled the check is skipped with a warning.
    """
    for host_port in hosts.split("/", 1)[0].split(","):
        host, _, port = host_port.rpartition(":")
        try:
            conf = four_letter_word(host.strip("[]"), int(port), "conf")
        except (OSError, ValueError):
            continue
        bounds = {k: int(v) for k, v in re.findall(r"^(minSessionTimeout|maxSessionTimeout)=(\d+)", conf, re.M)}
        if len(bounds) < 2:
            break
        low, high = bounds["minSessionTimeout"] / 1000, bounds["maxSessionTimeout"] / 1000
        if not low <= session_timeout_s <= high:
            raise ConfigError(f"session_timeout_s={session_timeout_s:g} is outside the ensemble's bounds of "
                              f"{low:g}–{high:g} s: choose a value in that range")
        return
    _log.warning("session_timeout_unchecked", reason="no server answered the conf four-letter word")


def _connect(config: ReplicaConfig) -> ZooKeeperClient:
    try:
        return connect(config.zk, session_timeout_s=config.election.session_timeout_s,
                       connect_timeout_s=config.connect_timeout_s, credential=config.credential, persistent=True)
    except ZooKeeperUnavailable as exc:
        raise ConfigError(f"zk={config.zk!r} did not answer within connect_timeout_s="
                          f"{config.connect_timeout_s:g}: check --zk and that the ensemble is serving") from exc


def _queue_groups(config: ReplicaConfig, client: ZooKeeperClient,
                  queue: QueueKey) -> Callable[[], Collection[str]]:
    """The registry read the Spark career's archiving waits on: the groups registered on its queue."""
    timeout_s = config.election.op_timeout_s  # a ZooKeeper read on the control thread, bounded as the election's
    return lambda: registered_groups(client, queue, timeout_s=timeout_s)


def _group_positions(config: ReplicaConfig, client: ZooKeeperClient, queue: QueueKey,
                     queues: int) -> Callable[[int], dict[str, Position | None]]:
    """A Redis topic's trimming reads: each group registered on the topic and its committed and checkpointed
    position in queue k's stream, from its commit record in ZooKeeper (a group registered with none: None)."""
    timeout_s = config.election.op_timeout_s

    def positions(k: int) -> dict[str, Position | None]:
        return {group: committed_positions(read_commit(client, group, queue=k, queues=queues,
                                                       timeout_s=timeout_s)[0]).checkpointed
                for group in registered_groups(client, queue, timeout_s=timeout_s)}

    return positions


def _on_redis(topic: RedisTopic, call: Callable[[Any], Topic | None]) -> Topic | None:
    """``call`` with a client of the Redis topic's server (closed after), Redis's refusal a ``ConfigError``."""
    from tenure.career import redis_streams  # redis-py: only a replica of a Redis topic loads it

    client = redis_streams.connect(topic)
    try:
        return call(client)
    except (redis_streams.RedisUnavailable, redis_streams.RedisRefused) as exc:
        raise ConfigError(f"queue_url={topic}: {exc}") from exc
    finally:
        client.close()


def _topic_of(config: ReplicaConfig) -> Topic | None:
    """What the Spark career's topic records (its identity and number of queues), if anything."""
    redis_topic = config.spark.redis_topic if config.spark is not None else None
    if redis_topic is None:
        return read_topic(config.queue_dir or config.data_root)
    from tenure.career.redis_streams import read_topic as read_redis_topic

    return _on_redis(redis_topic, lambda client: read_redis_topic(client, redis_topic))


def _queue(config: ReplicaConfig, queues: int) -> QueueKey:
    """The Spark career's topic, its identity recorded first if it has none (this replica is its first: a queue
    folder's ``_topic.json``, a Redis topic's ``<prefix>:topic``), of ``queues`` queues, or refused when it records
    another number."""
    assert config.spark is not None, "the Spark career's settings are built for the Spark career"
    topic = config.spark.redis_topic
    if topic is not None:
        from tenure.career.redis_streams import ensure_topic as ensure_redis_topic

        found = _on_redis(topic, lambda client: ensure_redis_topic(client, topic, queues))
        assert found is not None, "ensure_topic records one or finds one"
        return QueueKey(found.topic_id, str(topic))
    queue_dir = config.queue_dir or config.data_root
    queue_dir.mkdir(parents=True, exist_ok=True)
    return QueueKey(ensure_topic(queue_dir, queues).topic_id, str(queue_dir))


def _queue_count(config: ReplicaConfig, client: ZooKeeperClient) -> int:
    """The group's number of queues: ``--queues`` when given (``_bind_group`` then checks it against the group's),
    else what the group records, else what the Spark career's topic records, else one (a new group)."""
    if config.queues is not None:
        return config.queues
    try:
        recorded = read_group_identity(client, config.group, timeout_s=config.election.session_timeout_s)
    except ElectionError as exc:
        raise ConfigError(f"group={config.group!r}: its number of queues cannot be read in ZooKeeper ({exc}): check "
                          f"--zk-auth and the ACLs of /tenure/{config.group}") from exc
    if recorded is not None:
        return recorded.queue_count
    topic = _topic_of(config) if config.career == "spark" else None
    return 1 if topic is None else topic.queues


def _bind_group(config: ReplicaConfig, client: ZooKeeperClient, queue: QueueKey | None, queues: int) -> str:
    """Tie the group to this replica's data root (its ``_data_root.json``, written first if it has none), queue and
    number of queues, or refuse to start when the group is tied to other data or counts other queues; returns the
    data root's id."""
    data_root_id = ensure_data_root_id(config.data_root)
    wanted = GroupIdentity(data_root_id=data_root_id, data_root=str(config.data_root.resolve()),
                           topic_id=None if queue is None else queue.topic_id,
                           queue_dir=None if queue is None else queue.queue_dir, queues=queues)
    try:
        bind_group(client, config.group, wanted, credential=config.credential,
                   timeout_s=config.election.session_timeout_s)
    except ElectionError as exc:
        raise ConfigError(f"group={config.group!r} cannot be bound to its data in ZooKeeper ({exc}): check --zk-auth "
                          f"and the ACLs of /tenure/{config.group}") from exc
    return data_root_id


def _register_group(config: ReplicaConfig, client: ZooKeeperClient, queue: QueueKey, data_root_id: str) -> None:
    """Register the group as a consumer of its queue (idempotent)."""
    try:
        register_group(client, queue, config.group, config.data_root, data_root_id, credential=config.credential,
                       timeout_s=config.election.session_timeout_s)
    except ElectionError as exc:
        raise ConfigError(f"group={config.group!r} cannot be registered on queue_dir={queue.queue_dir!r} in "
                          f"ZooKeeper ({exc}): check --zk-auth and the ACLs of /tenure/_queues") from exc


def _cluster_master(config: ReplicaConfig, spark_master: str) -> StandaloneMaster | None:
    """The standalone master whose applications of earlier terms a new leader kills; None off such a master."""
    webuis = master_webuis(spark_master, config.master.spark_master_webui)
    timeout_s = config.master.request_timeout_s(config.health.probe_timeout_s)
    return StandaloneMaster(webuis, timeout_s=timeout_s) if webuis else None


def _careers(config: ReplicaConfig, queues: int, observer: QueueProgress,
             registered: Callable[[], Collection[str]] | None = None,
             positions: Callable[[int], dict[str, Position | None]] | None = None) -> Careers:
    """The replica's standby and how each queue's career is made: the counter's, the Spark career's, or those a
    factory of one's own returns (``observer`` is queue 0's)."""
    if ":" in config.career:
        module_name, _, attr = config.career.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"career={config.career!r} cannot be loaded ({exc}): check the module is "
                              "importable and defines that factory") from exc
        made = factory(config, observer)
        if isinstance(made, Careers):
            return made
        if queues > 1:
            raise ConfigError(f"career={config.career!r} returned one career, which serves a group of one queue, "
                              f"and this group has {queues}: have the factory return tenure.career.Careers (its "
                              "standby, and a career for each queue)")
        return Careers.solo(made)
    if config.career == "counter":
        return counter_careers(config.data_root, queues, config.counter, config.health)
    return _spark_careers(config, queues, observer, registered, positions)


def _spark_careers(config: ReplicaConfig, queues: int, observer: QueueProgress,
                   registered: Callable[[], Collection[str]] | None,
                   positions: Callable[[int], dict[str, Position | None]] | None = None) -> Careers:
    """The Spark career: for a group of one queue, one ``SparkCareer``, its own standby, as before queues; for
    several, one ``SparkStandby`` (one SparkSession) shared by a ``SparkCareer`` per queue, each reading its queue's
    ``landing/`` and publishing beside the others."""
    from tenure.career.spark import HookError, SparkCareer, SparkStandby  # imported only when Spark is the career

    spark = config.spark
    assert spark is not None, "the Spark career's settings are built for the Spark career"
    cluster_master = _cluster_master(config, spark.spark_master)
    try:
        if queues == 1:
            return Careers.solo(SparkCareer(spark, observer, replica_id=config.replica_id, group=config.group,
                                            registered_groups=registered, faults=config.faults,
                                            cluster_master=cluster_master, positions=positions))
        standby = SparkStandby.for_replica(spark, replica_id=config.replica_id, group=config.group,
                                           cluster_master=cluster_master)
    except (ValueError, HookError) as exc:  # what only the career can check: the dedup interval, the hooks
        raise ConfigError(str(exc)) from exc

    def career_of(queue: int, queue_observer: CareerObserver) -> Career:
        return SparkCareer(spark, queue_observer, replica_id=config.replica_id, group=config.group,
                           registered_groups=registered, faults=config.faults, standby=standby, queue=queue,
                           queues=queues, positions=positions)

    return Careers(standby, career_of)


def run_replica(config: ReplicaConfig, *, registry: CollectorRegistry | None = None) -> int:
    """Run one replica in the foreground until a signal; returns the process exit code.

    Raises:
        ConfigError: for anything the operator must fix before the replica can start.
    """
    structlog.contextvars.bind_contextvars(replica_id=config.replica_id, group=config.group)
    registry = registry or CollectorRegistry()
    try:
        server = HealthServer(config.metrics_host, config.metrics_port, registry)
    except OSError as exc:
        raise ConfigError(f"metrics_port={config.metrics_port} cannot be bound on {config.metrics_host} "
                          f"({exc.strerror}): choose another --metrics-port or stop what holds it") from exc
    try:
        _check_session_timeout(config.zk, config.election.session_timeout_s)
        config.data_root.mkdir(parents=True, exist_ok=True)
        client = _connect(config)
    except BaseException:
        server.stop()
        raise
    try:
        queues = _queue_count(config, client)
        metrics = Metrics(registry, replica_id=config.replica_id, group=config.group, queues=queues)
        progress = ProgressClock(metrics)  # each queue's career observes its own queue's progress
        # The Spark career reads a queue other groups may share: archiving waits for every registered group.
        # Its settings are checked first, so a bad value registers nothing.
        queue = _queue(config, queues) if config.career == "spark" else None
        careers = _careers(config, queues, progress.queue(0), _queue_groups(config, client, queue) if queue else None,
                           _group_positions(config, client, queue, queues) if queue and queue.remote else None)
        data_root_id = _bind_group(config, client, queue, queues)
        if queue is not None:
            _register_group(config, client, queue, data_root_id)
        standby: Standby = careers.standby
        per_queue: list[Career] = [careers.career_of(q, progress.queue(q)) for q in range(queues)]
    except BaseException:
        server.stop()
        disconnect(client)
        raise
    advertised = socket.gethostname() if config.metrics_host in ("0.0.0.0", "::") else config.metrics_host
    identity = Identity(
        replica_id=config.replica_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        metrics_url=f"http://{advertised}:{server.port}/metrics",
        started_at=time.time(),
    )
    timing = config.election

    def election_factory(queue: int, on_event: Callable[[ElectionEvent], None]) -> Election:
        return Election(client, group=config.group, queue=queue, queues=queues, identity=identity, on_event=on_event,
                        credential=config.credential, session_timeout_s=timing.session_timeout_s,
                        safe_fraction=timing.safe_fraction, op_timeout_s=timing.op_timeout_s, faults=config.faults)

    runner, control = build_runner(
        election_factory, standby, per_queue, metrics, config.runner, watchdog=config.watchdog, progress=progress,
        requests=OperatorRequests(client, config.group, queues=queues, credential=config.credential,
                                  timeout_s=timing.op_timeout_s),
        histories=[TermHistory(client, config.group, queue=q, queues=queues, credential=config.credential,
                               timeout_s=timing.op_timeout_s) for q in range(queues)],
        balance=Membership(client, config.group, config.replica_id, queues=queues, credential=config.credential,
                           timeout_s=timing.op_timeout_s))

    control.install_signal_handlers()
    metrics.zk_connected.set(1 if is_connected(client) else 0)
    server.start(runner.health)
    _log.info("replica_started", metrics_port=server.port, career=config.career, zk=config.zk, queues=queues)
    try:
        return runner.run()
    finally:
        server.stop()
        disconnect(client)
