"""The Spark career's settings: each declared once, with its default, unit and hazard, and validated at construction."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from tenure.career._health import HealthSettings
from tenure.career.lifecycle._states import RunnerSettings
from tenure.career.queue import DEFAULT_MAX_LINE_BYTES
from tenure.career.redis_queue import RedisTopic
from tenure.career.spark._pipeline import BINARY_FILE
from tenure.career.spark._retry import RetryPolicy
from tenure.errors import ConfigError
from tenure.settings import default_of, setting

__all__ = ["HandoverSplit", "SparkCareerConfig"]

_WINDOW = re.compile(r"^\s*(\d+)\s+(second|minute|hour|day|week)s?\s*$", re.IGNORECASE)
_UNIT_MS = {"second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}


class HandoverSplit(NamedTuple):
    """How a clean hand-over spends the Spark career's part of the handover budget, in seconds."""

    batch_s: float  # waiting for the batch in flight
    query_stop_s: float  # stopping the streaming query
    application_stop_s: float  # on a cluster, stopping the term's application


@dataclass(frozen=True, kw_only=True)
class SparkCareerConfig:
    """Settings of :class:`SparkCareer`: the operator's settings, each declared with its default, unit and hazard
    (``tenure run``'s flags of the same names), and what the replica or a library caller wires in.

    Example::

        SparkCareerConfig(data_root=Path("/srv/tenure"), standby="warm", max_files_per_trigger=5)

    Attributes:
        data_root: holds ``landing/``, ``archive/``, ``table/``, ``quarantine/``, ``checkpoint/``. Must be on a
            filesystem with atomic rename (local, HDFS mount); not plain S3 (the replica's ``--data-root``).
        queue_dir: holds the queue — ``landing/``, ``archive/`` and the groups' ``consumed/<group>/`` marks —
            when several consumer groups share one queue (default None: the data root; the replica's
            ``--queue-dir``). A queue file is archived once every registered group has consumed it.
        health: the probe deadline and the disk minimum, shared by every career (the replica's).
        handover_budget_s: the whole handover budget the runner allows (the replica's ``--handover-timeout-s``);
            this career takes ``handover_spark_share`` of it (:meth:`handover_split`).
        source_format: Spark source format (default ``binaryFile`` over ``landing/``). Any other format is read
            as one line per row from its ``value`` column (e.g. ``kafka``; its connector must be on the classpath).
        source_path: the source's path (default: ``<data_root>/landing`` for ``binaryFile``, none otherwise).
        source_options: options for the source (e.g. ``kafka.bootstrap.servers``, ``subscribe``).
        source_schema: a DDL schema for sources that need one (``binaryFile``'s is built in).
        source_file_expr: for a non-file source, the SQL expression naming where a row came from
            (quarantine's ``source_file``; default ``'stream'``; Kafka: ``concat(topic, '-', partition)``).
        line_expr: for a non-file source, the SQL expression for quarantine's ``line`` (default ``0``; Kafka:
            ``offset``).
        app_name: the Spark application name (default ``tenure``).
        warmup_timeout_s: bound on the warm-up run in ``prepare``, on starting Spark and the query, and on a
            cluster's standby executors registering (default 120).

    Raises:
        ConfigError: a setting cannot work; the message names it, its value and the fix (a ``ValueError`` too).
    """

    data_root: Path
    queue_dir: Path | None = None
    health: HealthSettings = field(default_factory=HealthSettings)
    handover_budget_s: float = default_of(RunnerSettings, "handover_timeout_s")
    source_format: str = BINARY_FILE
    source_path: str | None = None
    source_options: Mapping[str, str] = field(default_factory=dict)
    source_schema: str | None = None
    source_file_expr: str = "'stream'"
    line_expr: str = "0"
    app_name: str = "tenure"
    warmup_timeout_s: float = 120.0
    standby: Literal["warm", "cold"] = setting(
        "warm", help="warm: followers hold a warmed SparkSession that has run the real pipeline once on a scratch "
        "sample, so a new leader's first batch runs hot; cold: Spark starts at election (7–9 s here) and stops at "
        "hand-over.", hazard="warm costs about 1 GB per follower; cold adds Spark's start to every failover.")
    spark_master: str = setting(
        "local[2]", help="Spark master: local[N], spark://…, k8s://…; on a cluster only the leader's application "
        "holds its share of cores, followers --standby-executors each. Ignored when a SparkSession already exists "
        "in the process (its master wins).")
    spark_conf: Mapping[str, str] = setting(
        factory=dict, help="Extra Spark settings, key=value[,key=value…], e.g. "
        "spark.executor.memory=512m; static ones apply only when this career starts Spark.")
    keep_warm_interval_s: float = setting(
        20.0, unit="s", help="Warm standby, local Spark: a follower runs a tiny Python job this often so its Python "
        "workers stay alive (Spark stops them after 60 s idle); 0: off.",
        hazard="Off, or above 60 s, a new leader's first batch starts Python workers again (seconds).")
    fork_server: Literal["on", "off"] = setting(
        "on", help="Local Spark: a process per replica, its imports done, forks each streaming query's Python source "
        "runner, which Spark would start as a new interpreter on a new leader's path (0.3 s), and the daemon of "
        "Spark's planner workers imports the queue sources before it forks them; a runner the server cannot fork "
        "starts as before. off: Spark starts every runner itself, and its planner workers import the queue sources "
        "on first use.", hazard="off adds the runner's imports (0.3 s) to every query start: each leadership change "
        "and each restart of the query.")
    standby_state: Literal["on", "off"] = setting(
        "off", help="on: a follower keeps a hard-linked copy of the newest term's checkpoint, caught up after each "
        "commit, and the committed per-key marks and retry store loaded, so its inauguration links only what is new "
        "and its first batch reads neither; each is checked against the commit record before use. off: a new term "
        "copies the whole checkpoint and reads both from disk (the default until its gain is measured on an idle "
        "machine and the power-loss tests have run with it on).", hazard="on costs a follower a thread, one "
        "directory entry per checkpoint file, and the marks and retry store in memory (one row per key, per held "
        "record).")
    standby_executors: int = setting(
        1, unit="executors", help="Warm standby on a cluster: executors a follower's own application holds, warmed "
        "(spark.executor.cores each, default 1); it joins the election once they have registered, and its "
        "application grows to the leader's share once it leads. If the cluster gives none within the warm-up's "
        "deadline, the follower warms up locally and holds none (`standby_without_executors`). 0: followers hold "
        "none (the leader's application starts at election).",
        hazard="Each follower's executors are cores the leader cannot use.")
    queue_url: str | None = setting(
        None, default_text="none: the queue folder", help="A Redis topic to read instead of a queue folder: "
        "redis://host:port[/db]?prefix=<prefix>, queue k the stream <prefix>:<k> (docs/operating/redis.md); "
        "not with --queue-dir.", hazard="Run Redis with appendonly yes and appendfsync always: an acknowledged "
        "entry Redis loses stops the queue's leader until the stream is restored.")
    max_files_per_trigger: int | None = setting(
        5, unit="files", help="Flow control: queue files per batch (ignored when --max-bytes-per-trigger is set).")
    max_entries_per_trigger: int = setting(
        10_000, unit="entries", help="Flow control on a Redis topic: stream entries per batch (ignored when "
        "--max-bytes-per-trigger is set).")
    max_bytes_per_trigger: int | None = setting(
        None, unit="bytes", help="Flow control: bytes per batch, if set; at least one file per batch.")
    trigger_interval_s: float = setting(
        0.1, unit="s", help="How often an idle consumer polls the queue (a sleep, not a wall-clock trigger): the "
        "longest a file landing on an idle consumer waits. A busy query starts its next batch as soon as the last "
        "one ends.", hazard="An idle poll lists the queue: measured 4.4 % of a core idle at 0.1 s, 1.7 % at 0.5 s.")
    max_line_bytes: int = setting(
        DEFAULT_MAX_LINE_BYTES, unit="bytes", help="Longer lines are quarantined as oversized.",
        hazard="`tenure verify` must use the same value, or it counts those lines as lost.")
    dedup_window: str = setting(
        "2 minutes", help="How long a message id is remembered (a Spark interval); a repeat arriving later is "
        "quarantined as late.", hazard="Each batch scans every remembered id (about 0.09 s a batch per million "
        "ids on 2 cores): keep rate × window small.")
    archive_retention_s: float = setting(
        7 * 24 * 3600.0, unit="s", help="Archived queue files are deleted this long after archiving.",
        hazard="`tenure verify` needs the queue files to audit; after deletion their ids count as unexpected.")
    shuffle_partitions: int = setting(
        2, unit="partitions", help="Output partitions (part files) per batch, by key; a batch of up to 20 000 "
        "records is one part file.")
    transform: str | None = setting(
        None, help="package.module:function applied to each batch's records (a DataFrame) before the write; must "
        "keep id, key, seq and one row per record. Checked at start-up.")
    row_function: str | None = setting(
        None, help="package.module:function called per record (a dict: id, key, seq, ts, payload), returning the "
        "record (its payload may change) or None; a raise sends the record (and its key's later ones) to the retry "
        "store.")
    retry_attempts: int = setting(
        5, unit="attempts", help="Attempts of a failing record before it is dead-lettered (1: no retry).")
    retry_backoff_s: float = setting(
        1.0, unit="s", help="Delay after a record's first failure; doubles with each attempt.")
    retry_backoff_max_s: float = setting(300.0, unit="s", help="Cap of the retry delay.")
    row_timeout_s: float = setting(
        30.0, unit="s", help="Deadline of one row-function call; past it the call is interrupted (a signal in the "
        "Python worker) and the record fails with RowTimeout into the retry and dead-letter path; the batch goes "
        "on (0: none).",
        hazard="A call stuck in native code that ignores signals cannot be interrupted: its batch stalls until the "
        "watchdog moves the lock. Keep retry_attempts × row_timeout_s above stall_timeout_s, so that a replica "
        "whose row function hangs gives the lock up before its records are dead-lettered.")
    split_max_trials: int = setting(
        48, unit="trials", help="A poison batch (failed max_batch_attempts terms for set_aside_after_s) that "
        "fails once more is split: its records are bisected, by file then by line, each half tried with the user's "
        "code, so that only the records that fail are set aside and the rest is written; this caps the trials "
        "(one record among 1 000 lines of 5 files costs 26). Once spent, the parts still failing are set aside "
        "whole.", hazard="Each trial is a Spark job within the batch: a split that outlasts the stall timeout is a "
        "stall, and the next term sets the batch aside whole; low, healthy records beside a failing one are set "
        "aside with it.")
    handover_spark_share: float = setting(
        0.8, unit="share of handover_timeout_s", help="The Spark career's part of the handover budget: waiting "
        "for the batch in flight, stopping the query and, on a cluster, the application; the rest is for the "
        "handover record and the release.",
        hazard="Near 1 the record and the release have only the 2 s grace past the budget; low, a clean handover "
        "gives up on the batch in flight sooner (the successor runs it again).")
    handover_query_stop_share: float = setting(
        0.25, unit="share of the Spark career's part", help="Of the Spark career's part of the handover budget, "
        "the share for stopping the streaming query (Spark's stopTimeout), at most handover_query_stop_max_s; the "
        "batch in flight gets what the stops leave.",
        hazard="Too small, a query that does not stop in time is left to the process's exit.")
    handover_query_stop_max_s: float = setting(
        1.5, unit="s", help="The most the streaming query's stop may take of a clean hand-over.")
    handover_application_stop_share: float = setting(
        0.25, unit="share of the Spark career's part", help="On a cluster, the share of the Spark career's part of "
        "the handover budget for stopping the term's application (freeing its executors), at most "
        "handover_application_stop_max_s.",
        hazard="Too small, the application's executors are freed only when the master notices the driver gone.")
    handover_application_stop_max_s: float = setting(
        2.0, unit="s", help="On a cluster, the most stopping the term's application may take of a clean hand-over.")

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_root", Path(self.data_root))
        if self.queue_dir is not None:
            object.__setattr__(self, "queue_dir", Path(self.queue_dir))
        if self.standby not in ("warm", "cold"):
            raise ConfigError(f"standby={self.standby!r} is not a standby mode; use 'warm' or 'cold'")
        for name in ("max_files_per_trigger", "max_bytes_per_trigger", "max_entries_per_trigger"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name}={value} is below 1: raise it to at least 1")
        for name in ("max_line_bytes", "shuffle_partitions", "retry_attempts", "split_max_trials"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} is below 1; raise it to at least 1")
        for name in ("trigger_interval_s", "handover_budget_s", "archive_retention_s", "warmup_timeout_s",
                     "retry_backoff_s", "handover_query_stop_max_s", "handover_application_stop_max_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name):g} is not above 0 seconds; raise it")
        for name in ("handover_spark_share", "handover_query_stop_share", "handover_application_stop_share"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"{name}={getattr(self, name):g} is not a share: choose a value above 0 and at "
                                  "most 1")
        if self.handover_query_stop_share + self.handover_application_stop_share >= 1:
            raise ConfigError(f"handover_query_stop_share={self.handover_query_stop_share:g} and "
                              f"handover_application_stop_share={self.handover_application_stop_share:g} add up to "
                              "1 or more, leaving the batch in flight no time: lower them")
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
        stray = next((key for key in self.spark_conf if not key.startswith("spark.")), None)
        if stray is not None:
            raise ConfigError(f"spark_conf has {stray!r}, which is not a Spark setting: keys start with 'spark.'")
        if self.queue_url is not None:
            topic = RedisTopic.parse(self.queue_url)  # a bad URL is refused at start-up
            if self.queue_dir is not None:
                raise ConfigError(f"queue_dir={str(self.queue_dir)!r} and queue_url={topic}: a group reads one "
                                  "topic, a queue folder or a Redis topic: drop one")
            if self.source_format != BINARY_FILE or self.source_path is not None:
                raise ConfigError(f"source_format={self.source_format!r} and queue_url={topic}: a Redis topic is "
                                  "read by tenure's own source: leave source_format and source_path unset")
        clean = next((key for key in self.source_options if key.lower() == "cleansource"), None)
        if clean is not None:
            raise ConfigError(f"source_options sets {clean}={self.source_options[clean]!r}; remove it: the career "
                              "archives consumed files itself, and Spark's cleanSource is unsafe with two drivers")

    def handover_split(self) -> HandoverSplit:
        """How a clean hand-over spends this career's part of the budget (``handover_spark_share`` of
        ``handover_budget_s``): each stop its share, up to its cap; the batch in flight what they leave. Each step
        is bounded, so the three add up to the career's part, and the runner's overrun timer, which allows the
        whole budget plus the handover record and the release, never fires on a hand-over that works."""
        budget_s = self.handover_spark_share * self.handover_budget_s
        query_s = min(self.handover_query_stop_max_s, self.handover_query_stop_share * budget_s)
        application_s = (min(self.handover_application_stop_max_s, self.handover_application_stop_share * budget_s)
                         if self.on_cluster else 0.0)
        return HandoverSplit(budget_s - query_s - application_s, query_s, application_s)

    @property
    def retry_policy(self) -> RetryPolicy:
        """The retry settings as the batch writer uses them."""
        return RetryPolicy(self.retry_attempts, self.retry_backoff_s, self.retry_backoff_max_s,
                           self.row_timeout_s or None)

    @property
    def dedup_window_ms(self) -> int:
        """``dedup_window`` in milliseconds of event time (the dedup store's window)."""
        match = _WINDOW.match(self.dedup_window)
        assert match is not None  # checked at construction
        return int(match[1]) * _UNIT_MS[match[2].lower()]

    @property
    def on_cluster(self) -> bool:
        """Whether the master is a cluster's (executors elsewhere) rather than ``local…``."""
        return not self.spark_master.startswith("local")

    @property
    def file_source(self) -> bool:
        """Whether the source is the landing directory's files (so consumed files are archived)."""
        return self.source_format == BINARY_FILE and self.queue_url is None

    @property
    def redis_topic(self) -> RedisTopic | None:
        """The Redis topic read instead of a queue folder (``queue_url``), if any.

        Raises:
            ConfigError: ``queue_url`` is not a Redis topic's URL.
        """
        return None if self.queue_url is None else RedisTopic.parse(self.queue_url)
