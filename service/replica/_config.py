"""The replica's configuration: its own settings and its parts' (flags, variables, TOML), each checked by its part."""

from __future__ import annotations

import functools
import re
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tenure.career import CounterSettings, HealthSettings
from tenure.career.lifecycle import RunnerSettings
from tenure.career.spark import SparkCareerConfig
from tenure.election import DigestCredential, ElectionSettings, GroupPaths
from tenure.errors import ConfigError
from tenure.service.replica._cluster_master import MasterSettings
from tenure.service.replica._faults import FaultFile
from tenure.service.replica._watchdog import WatchdogSettings
from tenure.settings import Declaration, declarations, parse_value, part, setting

__all__ = ["SETTINGS", "ReplicaConfig", "load_config", "setting_named"]

_HOSTS = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d+(,[A-Za-z0-9_.\-\[\]:]+:\d+)*(/[\w/.\-]*)?$")


@dataclass(frozen=True, kw_only=True)
class ReplicaConfig:
    """Everything ``tenure run`` needs: the replica's own settings (declared below) and each part's settings as the
    part declares them: ``election``, ``runner``, ``watchdog``, ``health`` (every career's probe and disk minimum),
    ``counter``, ``master`` (a Spark standalone master's web UI) and, for the Spark career only, ``spark`` (None
    for any other career, whose Spark settings are then not checked).

    Every setting has one flat name, its flag (``--max-files-per-trigger``), variable
    (``TENURE_MAX_FILES_PER_TRIGGER``) and TOML key (``max_files_per_trigger``): :data:`SETTINGS` lists them. Build
    a config with :func:`load_config`; a value one part needs from another (the data root, the handover budget) is
    passed to it there, not declared twice.

    Example::

        config = load_config({"zk": "127.0.0.1:2181", "max_files_per_trigger": 2})
        config.spark.max_files_per_trigger, config.runner.handover_timeout_s   # (2, 5.0)
    """

    zk: str = setting(help="ZooKeeper connect string, host:port[,host:port…][/chroot].")
    group: str = setting("default", help="Consumer group: its own election, commit and output.")
    data_root: Path = setting(Path(".tenure/data"), help="Holds landing/, table/, checkpoint/ …",
                              hazard="It must be on a file system with atomic rename (local, an HDFS mount), not "
                              "plain S3: publishing a batch is a rename.")
    queue_dir: Path | None = setting(None, default_text="the data root", help="Holds the queue (landing/, "
                                     "archive/) when several groups share it, each with its own --data-root.")
    replica_id: str = setting(factory=socket.gethostname, default_text="the host name", help="Unique per replica.")
    metrics_host: str = setting("0.0.0.0", help="Address for /metrics and health.")
    metrics_port: int = setting(9400, help="Port for /metrics and health (0 picks a free one).")
    queues: int | None = setting(
        None, unit="queues", default_text="the group's recorded number, or 1 for a new group",
        help="The group's number of queues: each has its own election line, commit record and term history, and "
        "this replica stands in every queue's line and may lead several. Recorded by the group's first replica; "
        "a replica given another number refuses to start.",
        hazard="Fixed for the group's life: progress is laid out per queue.")
    career: str = setting("spark", help="spark, counter, or package.module:factory for a career of your own "
                          "(factory(config, observer) -> Career; for several queues, -> Careers).")
    connect_timeout_s: float = setting(15.0, unit="s", help="How long to wait for ZooKeeper at start-up.")
    zk_auth: str | None = setting(None, help="Digest credential user:password for the znodes.")
    fault_file: Path | None = setting(None, help="Tests and drills: a file that arms one fault (POINT ACTION) at "
                                      "a named point of a term; see Fault injection.")
    election: ElectionSettings = part(ElectionSettings)
    runner: RunnerSettings = part(RunnerSettings)
    watchdog: WatchdogSettings = part(WatchdogSettings)
    health: HealthSettings = part(HealthSettings)
    counter: CounterSettings = part(CounterSettings)
    master: MasterSettings = part(MasterSettings)
    spark: SparkCareerConfig | None = part(SparkCareerConfig)

    def __post_init__(self) -> None:
        if not _HOSTS.match(self.zk):
            raise ConfigError(f"zk={self.zk!r} is not a ZooKeeper connect string: use host:port[,host:port…], "
                              "e.g. 127.0.0.1:2181,127.0.0.1:2182")
        GroupPaths(self.group, queues=self.queues or 1)  # the election's rules: the name becomes a znode
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port={self.metrics_port} is not a TCP port: choose 1024–65535 (0 picks a "
                              "free one)")
        if self.career not in ("spark", "counter") and not re.fullmatch(r"[\w.]+:\w+", self.career):
            raise ConfigError(f"career={self.career!r} is not a career: use spark, counter, or "
                              "package.module:factory")
        if self.connect_timeout_s <= 0:
            raise ConfigError(f"connect_timeout_s={self.connect_timeout_s:g} must be a positive number of seconds")
        if self.zk_auth is not None:
            try:
                DigestCredential.parse(self.zk_auth)  # the election's rules for a digest credential
            except ConfigError as exc:
                raise ConfigError(f"zk_auth={self.zk_auth!r} {exc}") from None
        # Rules between the parts: each part checks its own settings when it is built.
        if self.health.probe_timeout_s >= self.watchdog.liveness_timeout_s:
            raise ConfigError(f"probe_timeout_s={self.health.probe_timeout_s:g} is not below liveness_timeout_s="
                              f"{self.watchdog.liveness_timeout_s:g}: a probe on the control thread would outlast "
                              "the loop's liveness; lower probe_timeout_s or raise liveness_timeout_s")
        if self.runner.handover_timeout_s >= self.election.session_timeout_s:
            raise ConfigError(f"handover_timeout_s={self.runner.handover_timeout_s:g} is not below "
                              f"session_timeout_s={self.election.session_timeout_s:g}: lower handover_timeout_s or "
                              "raise session_timeout_s, or a stuck leader outlives its lease")

    @functools.cached_property
    def credential(self) -> DigestCredential | None:
        """``zk_auth`` parsed, once (validated above): the client's auth data and the ACL of every node made."""
        return DigestCredential.parse(self.zk_auth) if self.zk_auth else None

    @functools.cached_property
    def faults(self) -> FaultFile | None:
        """The one fault file of this replica (tests and drills), shared by its election and its career."""
        return FaultFile(self.fault_file) if self.fault_file is not None else None


#: Every setting of ``tenure run``, the parts' included, in order: its flags, variables, TOML keys and the
#: documentation's table are made from these (a name declared twice fails here, at import).
SETTINGS: Final = declarations(ReplicaConfig)
_BY_NAME: Final = {d.name: d for d in SETTINGS}


def setting_named(name: str) -> Declaration:
    """The declaration of the setting ``name``.

    Raises:
        ConfigError: no setting has that name.
    """
    declaration = _BY_NAME.get(name)
    if declaration is None:
        raise ConfigError(f"{name} is not a setting of `tenure run` (see `tenure run --help`)")
    return declaration


def _read(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (flat names) as their declared types; names and required settings checked first."""
    unknown = next((name for name in values if name not in _BY_NAME), None)
    if unknown is not None:
        raise ConfigError(f"{unknown} is not a setting: remove it from the config file (see `tenure run --help`)")
    missing = next((d for d in SETTINGS if d.required and d.name not in values), None)
    if missing is not None:
        raise ConfigError(f"{missing.name} is required: pass {missing.flag} or set {missing.variable}")
    read: dict[str, Any] = {}
    for name, value in values.items():
        try:
            read[name] = parse_value(_BY_NAME[name], value)
        except ValueError as exc:
            raise ConfigError(f"{name}={value!r} {exc}") from None
    return read


def _compose(values: Mapping[str, Any]) -> ReplicaConfig:
    """Build each part from its own settings, passing it what it needs from the others, then the whole."""
    read = _read(values)

    def given(settings: type[Any]) -> dict[str, Any]:
        return {d.name: read[d.name] for d in declarations(settings) if d.name in read}

    own = {d.name: read.get(d.name, d.default) for d in SETTINGS if d.owner is ReplicaConfig}
    runner = RunnerSettings(replica_id=own["replica_id"], **given(RunnerSettings))
    health = HealthSettings(**given(HealthSettings))
    spark = None
    if own["career"] == "spark":  # Spark's settings are checked for the Spark career only
        spark = SparkCareerConfig(data_root=own["data_root"], queue_dir=own["queue_dir"], health=health,
                                  handover_budget_s=runner.handover_timeout_s, **given(SparkCareerConfig))
    return ReplicaConfig(**own, election=ElectionSettings(**given(ElectionSettings)), runner=runner,
                         watchdog=WatchdogSettings(**given(WatchdogSettings)), health=health,
                         counter=CounterSettings(**given(CounterSettings)),
                         master=MasterSettings(**given(MasterSettings)), spark=spark)


def load_config(overrides: Mapping[str, Any], config_file: Path | None = None) -> ReplicaConfig:
    """Merge ``overrides`` (flags and environment, already resolved; None means not given) over the TOML file,
    then validate.

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
    return _compose(values)
