"""Replica configuration: flags, ``TENURE_*`` variables and an optional TOML file, validated at start-up."""

from __future__ import annotations

import dataclasses
import functools
import re
import socket
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tenure.career.lifecycle import RunnerSettings
from tenure.election import ConfigError, DigestCredential, ElectionSettings, GroupPaths
from tenure.service.replica._faults import FaultFile

if TYPE_CHECKING:
    from tenure.career.spark import SparkCareerConfig

__all__ = ["ReplicaConfig", "load_config"]

_HOSTS = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d+(,[A-Za-z0-9_.\-\[\]:]+:\d+)*(/[\w/.\-]*)?$")


class ReplicaConfig(BaseModel):
    """Everything ``tenure run`` needs. Durations carry their unit in the name.

    Hazards: ``session_timeout_s`` bounds crash failover (a dead leader is noticed only when its session
    expires) but too short a value turns GC or network pauses into leadership changes. The ensemble only
    grants sessions within its bounds (embedded: 2–60 s); a value outside is refused at start-up.
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
                                      "session timeout, or a stuck leader outlives its lease. After SIGTERM the "
                                      "handover gets this + 2 s, then closing Spark gets as long again "
                                      "(`career_closed` logs how long it took); past either, the replica kills its "
                                      "Spark processes and exits 3 (`handover_overrun`, `close_overrun`). A second "
                                      "signal exits at once (128 + the signal), killing them too.")
    connect_timeout_s: float = Field(default=15.0, description="How long to wait for ZooKeeper at start-up.")
    safe_fraction: float = Field(default=0.5, description="Stop committing this fraction of the session "
                                 "timeout after the last server response.")
    standby: Literal["warm", "cold"] = Field(default="warm", description="warm: followers hold a warmed "
                                             "SparkSession (fast takeover, ~1 GB each); cold: start Spark on election.")
    spark_master: str = Field(default="local[2]", description="Spark master: local[N], spark://…, k8s://…; "
                              "on a cluster only the leader's application holds its share of cores, followers "
                              "--standby-executors each.")
    spark_master_webui: str | None = Field(default=None, description="A spark:// master's web UI, "
                                           "http://host:port[,…]; default port 8080 on each master host. A new "
                                           "leader kills there the applications of earlier terms (a paused "
                                           "leader's), so their cores come free.")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings, "
                                       "key=value[,key=value…], e.g. spark.executor.memory=512m.")
    keep_warm_interval_s: float = Field(default=20.0, description="Warm standby, local Spark: a follower runs a "
                                        "tiny Python job this often so its Python workers stay alive (Spark "
                                        "stops them after 60 s idle); 0: off.")
    standby_executors: int = Field(default=1, description="Warm standby on a cluster: executors a follower's "
                                   "own application holds, warmed (spark.executor.cores each, default 1); it "
                                   "joins the election once they have registered, and its application grows "
                                   "to the leader's share once it leads. 0: followers hold none (the leader's "
                                   "application starts at election).")
    max_files_per_trigger: int = Field(default=5, description="Flow control: queue files per batch.")
    max_bytes_per_trigger: int | None = Field(default=None, description="Flow control: bytes per batch, if set.")
    trigger_interval_s: float = Field(default=0.1, description="How often an idle consumer polls the queue (a "
                                      "sleep, not a wall-clock trigger): the longest a file landing on an idle "
                                      "consumer waits.")
    max_line_bytes: int = Field(default=1 << 20, description="Longer lines are quarantined as oversized; "
                                "`tenure verify` must use the same value.")
    dedup_window: str = Field(default="2 minutes", description="How long a message id is remembered (a Spark "
                              "interval); a repeat arriving later is quarantined as late. Each batch scans every "
                              "remembered id: keep rate × window small.")
    archive_retention_s: float = Field(default=7 * 86400.0, description="Archived queue files are deleted "
                                       "this long after archiving; `tenure verify` needs them.")
    shuffle_partitions: int = Field(default=2, description="Output partitions (part files) per batch, by key; "
                                    "a batch of up to 20 000 records is one part file.")
    idle_backoff_s: float = Field(default=0.1, description="Pause after an execute() that found no work.")
    failure_backoff_s: float = Field(default=1.0, description="First back-off after the career raised; doubles.")
    failure_backoff_max_s: float = Field(default=60.0, description="Cap of the failure back-off; a term "
                                         "longer than this forgives earlier failures.")
    liveness_timeout_s: float = Field(default=30.0, description="The control loop must come round this often: "
                                      "past it /livez fails and the replica gives its lock up and exits.")
    stall_timeout_s: float = Field(default=120.0, description="A leader with input waiting that finishes no batch "
                                   "this long gives its lock up at once, records why, and exits non-zero "
                                   "(restarted by its supervisor as a follower).")
    first_batch_allowance_s: float = Field(default=60.0, description="Added to the stall timeout for a term's "
                                           "first batch and to the liveness timeout for an inauguration (starting "
                                           "Spark, a cluster's executors, loading state).")
    max_batch_attempts: int = Field(default=3, description="A batch that failed or stalled this many terms in a "
                                    "row is set aside under set-aside/ with its files and error, and the queue "
                                    "moves on; failures while storage, Spark or ZooKeeper is down do not count.")
    probe_timeout_s: float = Field(default=10.0, description="Deadline of every call into Spark's JVM from the "
                                   "control thread and of the storage probe: no answer makes a follower unhealthy "
                                   "and a leader give its lock up.")
    row_timeout_s: float = Field(default=30.0, description="Deadline of one row-function call; past it the record "
                                 "fails with RowTimeout into the retry and dead-letter path (0: none).")
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
    canary_handover_every_s: float | None = Field(default=None, description="A leader hands over to the next "
                                                  "ready follower after this long, so a broken standby shows "
                                                  "before a real failure needs it (default: never).")
    min_free_disk_mb: int = Field(default=512, description="Below this much free disk on the data root the "
                                  "replica leaves the election (handing over first) until there is room again.")
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
    def _group_name(cls, value: str) -> str:
        GroupPaths(value)  # the election's rule: the name becomes a znode
        return value

    @field_validator("metrics_port")
    @classmethod
    def _port_range(cls, value: int) -> int:
        if not 0 <= value <= 65535:
            raise ValueError("is not a TCP port: choose 1024–65535 (0 picks a free one)")
        return value

    @field_validator("connect_timeout_s", "counter_interval_s")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be a positive number of seconds")
        return value

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_settings(cls, value: object) -> object:
        """``key=value,key=value`` (a flag or variable) or a table (TOML); every key a ``spark.`` setting."""
        if isinstance(value, str):
            pairs = [item.strip() for item in value.split(",") if item.strip()]
            bad = next((item for item in pairs if "=" not in item), None)
            if bad is not None:
                raise ValueError(f"has {bad!r} without '=': use key=value[,key=value…]")
            value = dict(item.split("=", 1) for item in pairs)
        if isinstance(value, dict):
            value = {str(k).strip(): str(v).strip() for k, v in value.items()}
            stray = next((key for key in value if not key.startswith("spark.")), None)
            if stray is not None:
                raise ValueError(f"has {stray!r}, which is not a Spark setting: keys start with 'spark.'")
        return value

    @field_validator("zk_auth")
    @classmethod
    def _auth_format(cls, value: str | None) -> str | None:
        if value is not None:
            DigestCredential.parse(value)  # the election's rules for a digest credential
        return value

    @model_validator(mode="after")
    def _parts(self) -> ReplicaConfig:
        """Each part validates its own settings where they are defined; a bad value surfaces here as one line."""
        self.election_settings()
        self.runner_settings()
        if self.career == "spark":
            self.spark_career_config()
        if self.probe_timeout_s >= self.liveness_timeout_s:
            raise ValueError(f"probe_timeout_s={self.probe_timeout_s:g} is not below liveness_timeout_s="
                             f"{self.liveness_timeout_s:g}: a probe on the control thread would outlast the loop's "
                             "liveness; lower probe_timeout_s or raise liveness_timeout_s")
        if self.handover_timeout_s >= self.session_timeout_s:
            raise ValueError(f"handover_timeout_s={self.handover_timeout_s:g} is not below session_timeout_s="
                             f"{self.session_timeout_s:g}: lower handover_timeout_s or raise session_timeout_s, "
                             "or a stuck leader outlives its lease")
        return self

    @functools.cached_property
    def credential(self) -> DigestCredential | None:
        """``zk_auth`` parsed, once (validated above): the client's auth data and the ACL of every node made."""
        return DigestCredential.parse(self.zk_auth) if self.zk_auth else None

    @functools.cached_property
    def faults(self) -> FaultFile | None:
        """The one fault file of this replica (tests and drills), shared by its election and its career."""
        return FaultFile(self.fault_file) if self.fault_file is not None else None

    def election_settings(self) -> ElectionSettings:
        """The election's timing: every ZooKeeper call bounded by the safe-until window, so a commit stuck on a
        dead link cannot hold the control thread for a whole session timeout."""
        return ElectionSettings.resolve(session_timeout_s=self.session_timeout_s, safe_fraction=self.safe_fraction,
                                        op_timeout_s=self.safe_fraction * self.session_timeout_s)

    def runner_settings(self) -> RunnerSettings:
        """The runner's timings, by name."""
        return RunnerSettings(**self._same_names(RunnerSettings))

    def spark_career_config(self) -> SparkCareerConfig:
        """The Spark career's settings, by name. The runner's watchdog allows ``handover_timeout_s`` for
        everything (stop the query, write the handover record, release the node): the batch in flight gets 80 %.

        Raises:
            ConfigError: a Spark setting that cannot work (imports Spark's settings only when called).
        """
        from tenure.career.spark import SparkCareerConfig

        return SparkCareerConfig(**{**self._same_names(SparkCareerConfig),
                                    "handover_timeout_s": 0.8 * self.handover_timeout_s})

    def _same_names(self, settings: type[Any]) -> dict[str, Any]:
        """This config's values for the fields ``settings`` (a dataclass) shares with it."""
        names = type(self).model_fields
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(settings) if f.name in names}


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
    if msg.startswith(f"{loc}="):  # a part's own message names the setting already
        return msg
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

