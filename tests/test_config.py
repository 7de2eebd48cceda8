"""The replica's configuration: each setting validated once, by the part that defines it, as one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tenure.career.lifecycle import RunnerSettings
from tenure.career.spark import SparkCareerConfig
from tenure.election import ConfigError, GroupPaths
from tenure.service.replica import ReplicaConfig, load_config

ZK = "127.0.0.1:2181"


def _one_line(**overrides: object) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config({"zk": ZK, **overrides})
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"group": "_queues"}, "group='_queues' is not a valid group name"),  # the CLI once accepted what ZK refused
    ({"group": "-x"}, "starting with a letter or digit"),
    ({"safe_fraction": 1.5}, "safe_fraction=1.5 is out of range"),
    ({"session_timeout_s": -1, "handover_timeout_s": 0.5}, "session_timeout_s=-1"),
    ({"zk_auth": "nouser"}, "zk_auth='nouser' must be user:password"),
    ({"zk_auth": ":secret"}, "DigestCredential.user=''"),
    ({"failure_backoff_s": 5, "failure_backoff_max_s": 1}, "failure_backoff_max_s=1 is below failure_backoff_s=5"),
    ({"liveness_timeout_s": 0}, "liveness_timeout_s=0"),
    ({"max_files_per_trigger": 0}, "max_files_per_trigger=0 is below 1"),
    ({"retry_backoff_s": 2, "retry_backoff_max_s": 1}, "retry_backoff_max_s=1 is below retry_backoff_s=2"),
    ({"dedup_window": "forever"}, "dedup_window='forever' is not a Spark interval"),
    ({"handover_timeout_s": 10, "session_timeout_s": 10}, "handover_timeout_s=10 is not below session_timeout_s=10"),
    ({"metrics_port": 70000}, "metrics_port=70000 is not a TCP port"),
    ({"no_such": 1}, "no_such is not a setting"),
])
def test_a_bad_setting_is_one_line_naming_it(overrides: dict[str, object], expected: str) -> None:
    assert expected in _one_line(**overrides)


def test_spark_settings_are_checked_only_for_the_spark_career() -> None:
    assert load_config({"zk": ZK, "career": "counter", "dedup_window": "forever"}).career == "counter"


def test_group_names_follow_one_rule() -> None:
    for name in ("orders", "a", "x.y-z_1", "9" * 128):
        assert load_config({"zk": ZK, "group": name}).group == GroupPaths(name).group
    for name in ("_queues", ".hidden", "", "a/b", "x" * 129):
        with pytest.raises(ConfigError):
            GroupPaths(name)
        with pytest.raises(ConfigError):
            load_config({"zk": ZK, "group": name})


def test_parts_are_built_from_the_config_by_name() -> None:
    config = load_config({"zk": ZK, "data_root": "/srv/t", "max_files_per_trigger": 7, "retry_attempts": 3,
                          "handover_timeout_s": 4, "failure_backoff_s": 2, "safe_fraction": 0.4,
                          "session_timeout_s": 10})
    spark = config.spark_career_config()
    assert (spark.data_root, spark.max_files_per_trigger, spark.retry_attempts) == (Path("/srv/t"), 7, 3)
    assert spark.handover_timeout_s == pytest.approx(3.2)  # 80 % of the runner's budget
    runner = config.runner_settings()
    assert (runner.handover_timeout_s, runner.failure_backoff_s, runner.replica_id) == (4, 2, config.replica_id)
    election = config.election_settings()
    assert (election.safe_fraction, election.op_timeout_s) == (0.4, pytest.approx(4.0))


@pytest.mark.parametrize("part", [SparkCareerConfig, RunnerSettings])
def test_defaults_agree_with_the_parts(part: type) -> None:
    """A flag's default is the part's default (except the handover budget the runner shares with Spark)."""
    shared = {f.name: f.default for f in dataclasses.fields(part)
              if f.name in ReplicaConfig.model_fields and f.default is not dataclasses.MISSING}
    config = ReplicaConfig(zk=ZK)
    differ = {name: (getattr(config, name), default) for name, default in shared.items()
              if name != "handover_timeout_s" and getattr(config, name) != default}
    assert not differ
    assert shared  # the comparison saw fields
