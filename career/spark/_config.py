"""The Spark career's settings: one frozen dataclass, validated at construction (``ConfigError`` names the fix)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tenure.career.queue import DEFAULT_MAX_LINE_BYTES
from tenure.career.spark._pipeline import BINARY_FILE
from tenure.career.spark._retry import RetryPolicy
from tenure.election._errors import ConfigError

__all__ = ["SparkCareerConfig"]

_WINDOW = re.compile(r"^\s*\d+\s+(second|minute|hour|day|week)s?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class SparkCareerConfig:
    """Settings of :class:`SparkCareer`; durations carry their unit in the name.

    Example::

        SparkCareerConfig(data_root=Path("/srv/tenure"), standby="warm", max_files_per_trigger=5)

    Attributes:
        data_root: holds ``landing/``, ``archive/``, ``table/``, ``quarantine/``, ``checkpoint/``. Must be on a
            filesystem with atomic rename (local, HDFS mount); not plain S3.
        queue_dir: holds the queue — ``landing/``, ``archive/`` and the groups' ``consumed/<group>/`` marks —
            when several consumer groups share one queue (default None: the data root, one group). Each group
            keeps its own data root; a queue file is archived once every registered group has consumed it.
        spark_master: ``local[2]`` (default), ``spark://host:7077``, ``k8s://…``. Ignored when a SparkSession
            already exists in the process (its master wins). On a cluster (any master but ``local…``) the
            cluster's cores are the leader's, but for the few of a warm follower's standby application
            (``standby_executors``); the leader's application stops at hand-over, releasing its executors.
        standby: ``warm`` (default): ``prepare`` starts Spark and runs the real pipeline once on a scratch sample,
            so a new leader's first batch runs hot (costs about 1 GB per follower). ``cold``: Spark starts at
            inauguration (7–9 s here) and stops at hand-over when this career started it.
        max_files_per_trigger: flow control, files per batch (default 5). Ignored when
            ``max_bytes_per_trigger`` is set (Spark refuses both at once).
        max_bytes_per_trigger: flow control, bytes per batch (default None: off); at least one file per batch.
        trigger_interval_s: processing-time trigger (default 0.1): how long a file that lands on an idle consumer
            waits at most. An idle trigger lists the source (measured: 4.4 % of a core idle at 0.1 s, 1.7 % at
            0.5 s); a busy query starts its next batch as soon as the last one ends, whatever the interval.
        max_line_bytes: longer lines are quarantined as ``oversized`` (default 1 MiB; ``tenure verify`` must use
            the same value).
        dedup_window: how long a message id is remembered, as a Spark interval (default ``2 minutes``). Spark
            scans every remembered id in every batch to expire old ones, so a batch costs time in proportion to
            ``rate × window`` (measured: about 0.09 s a batch per million ids on 2 cores). A repeat arriving later
            than this after the first copy is quarantined as late, not written (per-key order catches it).
        archive_retention_s: archived queue files are deleted this long after archiving (default 7 days).
            Hazard: ``tenure verify`` needs the queue files to audit; after deletion their ids count as
            unexpected.
        shuffle_partitions: partitions of each batch's output, by key (default 2: one part file per partition);
            a batch of up to ``SMALL_BATCH_RECORDS`` (20 000) records is one part file, with no shuffle.
        handover_timeout_s: a clean hand-over waits this long for the batch in flight before stopping the query
            (default 5). Keep it below the ZooKeeper session timeout.
        source_format: Spark source format (default ``binaryFile`` over ``landing/``). Any other format is read
            as one line per row from its ``value`` column (e.g. ``kafka``; its connector must be on the classpath).
        source_path: the source's path (default: ``<data_root>/landing`` for ``binaryFile``, none otherwise).
        source_options: options for the source (e.g. ``kafka.bootstrap.servers``, ``subscribe``).
        source_schema: a DDL schema for sources that need one (``binaryFile``'s is built in).
        source_file_expr: for a non-file source, the SQL expression naming where a row came from
            (quarantine's ``source_file``; default ``'stream'``; Kafka: ``concat(topic, '-', partition)``).
        line_expr: for a non-file source, the SQL expression for quarantine's ``line`` (default ``0``; Kafka:
            ``offset``).
        spark_conf: extra Spark settings (static ones apply only when this career starts Spark).
        app_name: the Spark application name (default ``tenure``).
        warmup_timeout_s: bound on the warm-up run in ``prepare`` (default 120).
        keep_warm_interval_s: warm standby on a local master: while following, run a tiny Python job this often
            so Spark does not stop the idle Python workers a new leader's first batch needs (default 20; Spark
            stops them after 60 s idle). 0 turns it off.
        standby_executors: warm standby on a cluster: the executors a follower's own application holds while it
            waits (default 1; each has ``spark.executor.cores`` cores, 1 unless set), warmed by the warm-up and
            kept warm; elected, it leads on them, and after its first batch the application grows to the leader's
            share (``spark.cores.max``, or every free core). A follower is ready, and joins the election, once they
            have registered; if the cluster gives none within ``warmup_timeout_s`` it warms up locally and holds
            none (``standby_without_executors``).
            0: followers hold no executors, and the leader's application starts at inauguration.
        transform: ``package.module:function`` taking and returning a DataFrame, applied to each batch's
            validated, deduplicated, ordered records before the write (default None). It must keep ``id``,
            ``key`` and ``seq`` and one row per record; it is checked at ``prepare``.
        row_function: ``package.module:function`` called with each record (a dict: ``id``, ``key``, ``seq``,
            ``ts``, ``payload``), returning the record (its ``payload`` may change) or None (default None).
            A raise holds the record, and its key's later records, in the retry store.
        retry_attempts: attempts of a failing record before it is dead-lettered (default 5).
        retry_backoff_s: delay after the first failure; doubles per attempt (default 1).
        retry_backoff_max_s: cap of the retry delay (default 300); at least ``retry_backoff_s``.
        min_free_disk_mb: below this much free space on the data root (or the queue's volume) the career reports
            itself unhealthy and the replica leaves the election until there is room again (default 512).
        probe_timeout_s: the deadline of every call the control thread makes into Spark's JVM (a query's
            status, the health check) and of the storage probe (default 10). A JVM or a file system that does
            not answer in time makes a follower unhealthy and a leader give its lock up (a stall). Hazard: below
            the longest stop-the-world GC pause the driver sees, a pause becomes a failover.
        row_timeout_s: the deadline of one row-function call (default 30; 0: none). A call that exceeds it is
            interrupted (a signal in the Python worker) and fails its record with ``RowTimeout`` into the retry
            and dead-letter path; the batch goes on. A call stuck in native code that ignores signals cannot be
            interrupted: its batch stalls until the progress watchdog moves the lock. Keep ``retry_attempts ×
            row_timeout_s`` above the replica's ``stall_timeout_s``, so that a replica whose row function hangs
            gives the lock up before its records are dead-lettered.

    Raises:
        ConfigError: a setting cannot work; the message names it, its value and the fix (a ``ValueError`` too).
    """

    data_root: Path
    queue_dir: Path | None = None
    spark_master: str = "local[2]"
    standby: Literal["warm", "cold"] = "warm"
    max_files_per_trigger: int | None = 5
    max_bytes_per_trigger: int | None = None
    trigger_interval_s: float = 0.1
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    dedup_window: str = "2 minutes"
    archive_retention_s: float = 7 * 24 * 3600.0
    shuffle_partitions: int = 2
    handover_timeout_s: float = 5.0
    source_format: str = BINARY_FILE
    source_path: str | None = None
    source_options: Mapping[str, str] = field(default_factory=dict)
    source_schema: str | None = None
    source_file_expr: str = "'stream'"
    line_expr: str = "0"
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    app_name: str = "tenure"
    warmup_timeout_s: float = 120.0
    keep_warm_interval_s: float = 20.0
    standby_executors: int = 1
    transform: str | None = None
    row_function: str | None = None
    retry_attempts: int = 5
    retry_backoff_s: float = 1.0
    retry_backoff_max_s: float = 300.0
    min_free_disk_mb: int = 512
    probe_timeout_s: float = 10.0
    row_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_root", Path(self.data_root))
        if self.queue_dir is not None:
            object.__setattr__(self, "queue_dir", Path(self.queue_dir))
        if self.standby not in ("warm", "cold"):
            raise ConfigError(f"standby={self.standby!r} is not a standby mode; use 'warm' or 'cold'")
        for name in ("max_files_per_trigger", "max_bytes_per_trigger"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name}={value} is below 1: raise it to at least 1")
        if self.min_free_disk_mb < 0:
            raise ConfigError(f"min_free_disk_mb={self.min_free_disk_mb} is negative: use 0 to turn the check off")
        for name in ("max_line_bytes", "shuffle_partitions", "retry_attempts"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} is below 1; raise it to at least 1")
        for name in ("trigger_interval_s", "handover_timeout_s", "archive_retention_s", "warmup_timeout_s",
                     "retry_backoff_s", "probe_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name):g} is not above 0 seconds; raise it")
        if self.row_timeout_s < 0:
            raise ConfigError(f"row_timeout_s={self.row_timeout_s:g} is negative; use 0 for no deadline")
        if self.standby_executors < 0:
            raise ConfigError(f"standby_executors={self.standby_executors} is negative; use 0 for followers that "
                              "hold no executors on the cluster")
        if self.keep_warm_interval_s < 0:
            raise ConfigError(f"keep_warm_interval_s={self.keep_warm_interval_s:g} is negative; use 0 to turn "
                              "keep-warm off")
        if self.retry_backoff_max_s < self.retry_backoff_s:
            raise ConfigError(f"retry_backoff_max_s={self.retry_backoff_max_s:g} is below retry_backoff_s="
                              f"{self.retry_backoff_s:g}; raise it to at least {self.retry_backoff_s:g}")
        if not _WINDOW.match(self.dedup_window):
            raise ConfigError(f"dedup_window={self.dedup_window!r} is not a Spark interval; use e.g. '2 minutes'")
        clean = next((key for key in self.source_options if key.lower() == "cleansource"), None)
        if clean is not None:
            raise ConfigError(f"source_options sets {clean}={self.source_options[clean]!r}; remove it: the career "
                              "archives consumed files itself, and Spark's cleanSource is unsafe with two drivers")

    @property
    def retry_policy(self) -> RetryPolicy:
        """The retry settings as the batch writer uses them."""
        return RetryPolicy(self.retry_attempts, self.retry_backoff_s, self.retry_backoff_max_s,
                           self.row_timeout_s or None)

    @property
    def on_cluster(self) -> bool:
        """Whether the master is a cluster's (executors elsewhere) rather than ``local…``."""
        return not self.spark_master.startswith("local")

    @property
    def file_source(self) -> bool:
        """Whether the source is the landing directory's files (so consumed files are archived)."""
        return self.source_format == BINARY_FILE
