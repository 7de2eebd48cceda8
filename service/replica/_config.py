"""Replica configuration: flags, ``TENURE_*`` variables and an optional TOML file, validated at start-up."""

from __future__ import annotations

import re
import socket
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from election import ConfigError

__all__ = ["ReplicaConfig", "load_config"]

_HOSTS = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d+(,[A-Za-z0-9_.\-\[\]:]+:\d+)*(/[\w/.\-]*)?$")


class ReplicaConfig(BaseModel):
    """Everything ``tenure run`` needs. Durations carry their unit in the name.

    Hazards: ``session_timeout_s`` bounds crash failover (a dead leader is noticed only when its session
    expires) but too short a value turns GC or network pauses into leadership changes. The ensemble only
    grants sessions of 2 to 20 ticks; a value outside is refused at start-up.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    zk: str = Field(description="ZooKeeper connect string, host:port[,host:port…][/chroot].")
    group: str = Field(default="default", description="Consumer group: its own election, commit and output.")
    data_root: Path = Field(default=Path(".tenure/data"), description="Holds landing/, table/, checkpoint/ …")
    queue_dir: Path | None = Field(default=None, description="Holds the queue (landing/, archive/) when several "
                                   "groups share it, each with its own --data-root; default: the data root.")
    replica_id: str = Field(default_factory=socket.gethostname, description="Unique per replica.")
    metrics_host: str = Field(default="0.0.0.0", description="Address for /metrics and health.")
    metrics_port: int = Field(default=9400, description="Port for /metrics and health.")
    career: str = Field(default="spark", description="spark, counter, or package.module:factory for a career "
                        "of your own (factory(config, observer) -> Career).")
    session_timeout_s: float = Field(default=10.0, description="ZooKeeper session timeout (default 10).")
    handover_timeout_s: float = Field(default=5.0, description="Graceful handover budget; must be below the "
                                      "session timeout, or a stuck leader outlives its lease.")
    connect_timeout_s: float = Field(default=15.0, description="How long to wait for ZooKeeper at start-up.")
    safe_fraction: float = Field(default=0.5, description="Stop committing this fraction of the session "
                                 "timeout after the last server response.")
    standby: Literal["warm", "cold"] = Field(default="warm", description="warm: followers hold a warmed "
                                             "SparkSession (fast takeover, ~1 GB each); cold: start Spark on election.")
    spark_master: str = Field(default="local[2]", description="Spark master: local[N], spark://…, k8s://…")
    max_files_per_trigger: int = Field(default=5, description="Flow control: queue files per batch.")
    max_bytes_per_trigger: int | None = Field(default=None, description="Flow control: bytes per batch, if set.")
    trigger_interval_s: float = Field(default=0.5, description="Spark processing-time trigger.")
    max_line_bytes: int = Field(default=1 << 20, description="Longer lines are quarantined as oversized; "
                                "`tenure verify` must use the same value.")
    dedup_window: str = Field(default="24 hours", description="How long a message id is remembered (a Spark "
                              "interval); a repeat arriving later is quarantined as late.")
    archive_retention_s: float = Field(default=7 * 86400.0, description="Archived queue files are deleted "
                                       "this long after archiving; `tenure verify` needs them.")
    shuffle_partitions: int = Field(default=2, description="Output partitions (part files) per batch, by key.")
    idle_backoff_s: float = Field(default=0.1, description="Pause after an execute() that found no work.")
    failure_backoff_s: float = Field(default=1.0, description="First back-off after the career raised; doubles.")
    failure_backoff_max_s: float = Field(default=60.0, description="Cap of the failure back-off; a term "
                                         "longer than this forgives earlier failures.")
    liveness_timeout_s: float = Field(default=30.0, description="/livez fails when the loop stalls this long.")
    zk_auth: str | None = Field(default=None, description="Digest credential user:password for the znodes.")
    counter_interval_s: float = Field(default=0.2, description="Counter career: one commit per interval.")
    transform: str | None = Field(default=None, description="package.module:function applied to each batch's "
                                  "records (a DataFrame) before the write; must keep id, key, seq.")
    row_function: str | None = Field(default=None, description="package.module:function called per record; "
                                     "a raise sends the record (and its key's later ones) to the retry store.")
    retry_attempts: int = Field(default=5, description="Attempts of a failing record before it is "
                                "dead-lettered (1: no retry).")
    retry_backoff_s: float = Field(default=1.0, description="Delay after a record's first failure; doubles "
                                   "with each attempt.")
    retry_backoff_max_s: float = Field(default=300.0, description="Cap of the retry delay.")
    fault_file: Path | None = Field(default=None, description="Tests and drills: a file that arms one fault "
                                    "(POINT ACTION) at a named point of a term; see Fault injection.")

    @field_validator("zk")
    @classmethod
    def _zk_format(cls, value: str) -> str:
        if not _HOSTS.match(value):
            raise ValueError("is not a ZooKeeper connect string: use host:port[,host:port…], "
                             "e.g. 127.0.0.1:2181,127.0.0.1:2182")
        return value

    @field_validator("career")
    @classmethod
    def _career_name(cls, value: str) -> str:
        if value not in ("spark", "counter") and not re.fullmatch(r"[\w.]+:\w+", value):
            raise ValueError("is not a career: use spark, counter, or package.module:factory")
        return value

    @field_validator("group")
    @classmethod
    def _group_format(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", value):
            raise ValueError("must be 1–64 letters, digits, '.', '_' or '-' (it becomes a znode name)")
        return value

    @field_validator("metrics_port")
    @classmethod
    def _port_range(cls, value: int) -> int:
        if not 0 <= value <= 65535:
            raise ValueError("is not a TCP port: choose 1024–65535 (0 picks a free one)")
        return value

    @field_validator("session_timeout_s")
    @classmethod
    def _session_range(cls, value: float) -> float:
        if not 1.0 <= value <= 600.0:
            raise ValueError("is outside 1–600 s: ZooKeeper grants 2 to 20 ticks (4–40 s at tickTime 2000)")
        return value

    @field_validator("safe_fraction")
    @classmethod
    def _fraction(cls, value: float) -> float:
        if not 0.1 <= value <= 0.9:
            raise ValueError("must be between 0.1 and 0.9 of the session timeout (0.5 is a good default)")
        return value

    @field_validator("transform", "row_function")
    @classmethod
    def _hook_format(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
            raise ValueError("is not package.module:function (e.g. career.examples:enrich)")
        return value

    @field_validator("max_files_per_trigger", "max_line_bytes", "shuffle_partitions", "retry_attempts")
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        return value

    @field_validator("handover_timeout_s", "connect_timeout_s", "idle_backoff_s", "failure_backoff_s",
                     "failure_backoff_max_s", "liveness_timeout_s", "counter_interval_s", "trigger_interval_s",
                     "archive_retention_s", "retry_backoff_s", "retry_backoff_max_s")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be a positive number of seconds")
        return value

    @field_validator("zk_auth")
    @classmethod
    def _auth_format(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[^:\s]+:\S+", value):
            raise ValueError("must be user:password")
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> ReplicaConfig:
        if self.handover_timeout_s >= self.session_timeout_s:
            raise ValueError(f"handover_timeout_s={self.handover_timeout_s:g} is not below session_timeout_s="
                             f"{self.session_timeout_s:g}: lower handover_timeout_s or raise session_timeout_s, "
                             "or a stuck leader outlives its lease")
        if self.retry_backoff_max_s < self.retry_backoff_s:
            raise ValueError(f"retry_backoff_max_s={self.retry_backoff_max_s:g} is below retry_backoff_s="
                             f"{self.retry_backoff_s:g}: raise retry_backoff_max_s")
        if self.failure_backoff_max_s < self.failure_backoff_s:
            raise ValueError(f"failure_backoff_max_s={self.failure_backoff_max_s:g} is below failure_backoff_s="
                             f"{self.failure_backoff_s:g}: raise failure_backoff_max_s")
        return self


def _one_line(err: ValidationError, source: dict[str, Any]) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = str(first["msg"]).removeprefix("Value error, ")
    if not loc:
        return msg
    if first["type"] == "missing":
        return f"{loc} is required: pass --{loc.replace('_', '-')} or set TENURE_{loc.upper()}"
    if first["type"] == "extra_forbidden":
        return f"{loc} is not a setting: remove it from the config file (see `tenure run --help`)"
    value = source.get(loc, first.get("input"))
    return f"{loc}={value!r} {msg}"


def load_config(overrides: dict[str, Any], config_file: Path | None = None) -> ReplicaConfig:
    """Merge ``overrides`` (flags and environment, already resolved) over the TOML file, then validate.

    Raises:
        ConfigError: with one line naming the field, the value and the fix.
    """
    values: dict[str, Any] = {}
    if config_file is not None:
        try:
            values.update(tomllib.loads(config_file.read_text()))
        except OSError as exc:
            raise ConfigError(f"config file {config_file} cannot be read ({exc.strerror}): check the path") \
                from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {config_file} is not valid TOML ({exc}): fix the syntax") from exc
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return ReplicaConfig(**values)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, values)) from exc

