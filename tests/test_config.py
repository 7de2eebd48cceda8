"""The replica's configuration: each setting validated once, by the part that defines it, as one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure.election import GroupPaths
from tenure.errors import ConfigError
from tenure.service.replica import load_config

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
    ({"handover_spark_share": 1.5}, "handover_spark_share=1.5 is not a share"),
    ({"handover_query_stop_share": 0.6, "handover_application_stop_share": 0.5}, "leaving the batch in flight no time"),
    ({"op_timeout_share": 0}, "op_timeout_share=0 is out of range"),
    ({"master_request_share": 2}, "master_request_share=2 is not a share"),
    ({"probe_timeout_s": 40}, "probe_timeout_s=40 is not below liveness_timeout_s=30"),
    ({"stall_timeout_s": -1}, "stall_timeout_s=-1.0 must be a positive number of seconds"),
    ({"counter_interval_s": 0}, "counter_interval_s=0 must be a positive number of seconds"),
    ({"standby": "hot"}, "standby='hot' is not one of warm, cold"),
])
def test_a_bad_setting_is_one_line_naming_it(overrides: dict[str, object], expected: str) -> None:
    """Each bad setting, or bad combination, fails the configuration with one line naming the setting, its value and
    what is wrong."""
    assert expected in _one_line(**overrides)


def test_spark_settings_are_checked_only_for_the_spark_career() -> None:
    """A Spark setting that would be refused (a dedup window that is no interval) does not stop a counter-career
    replica: the Spark career's settings are checked only when it is the career."""
    assert load_config({"zk": ZK, "career": "counter", "dedup_window": "forever"}).career == "counter"


def test_group_names_follow_one_rule() -> None:
    """The configuration and the znode layout accept and refuse the same group names (one rule, ``GroupPaths``):
    letters, digits, ``.``, ``-`` and ``_`` up to 128 characters, none starting with ``_`` or ``.``."""
    for name in ("orders", "a", "x.y-z_1", "9" * 128):
        assert load_config({"zk": ZK, "group": name}).group == GroupPaths(name).group
    for name in ("_queues", ".hidden", "", "a/b", "x" * 129):
        with pytest.raises(ConfigError):
            GroupPaths(name)
        with pytest.raises(ConfigError):
            load_config({"zk": ZK, "group": name})


def test_each_part_gets_its_own_settings_and_what_it_needs_of_the_others() -> None:
    """Flat names land in the part that declares them; the Spark career gets the data root, the queue folder, the
    health settings and the whole handover budget at wiring time, and spends its share of the budget as declared."""
    config = load_config({"zk": ZK, "data_root": "/srv/t", "max_files_per_trigger": 7, "retry_attempts": 3,
                          "handover_timeout_s": 4, "failure_backoff_s": 2, "safe_fraction": 0.4,
                          "session_timeout_s": 10, "probe_timeout_s": 3, "stall_timeout_s": 50})
    spark = config.spark
    assert spark is not None
    assert (spark.data_root, spark.max_files_per_trigger, spark.retry_attempts) == (Path("/srv/t"), 7, 3)
    assert spark.health is config.health and config.health.probe_timeout_s == 3
    assert spark.handover_budget_s == 4 and spark.handover_split() == pytest.approx((2.4, 0.8, 0.0))
    assert (config.runner.handover_timeout_s, config.runner.failure_backoff_s, config.runner.replica_id) == \
        (4, 2, config.replica_id)
    assert (config.election.safe_fraction, config.election.op_timeout_s) == (0.4, pytest.approx(4.0))
    assert config.watchdog.stall_timeout_s == 50
    assert load_config({"zk": ZK, "op_timeout_share": 0.2}).election.op_timeout_s == pytest.approx(2.0)
    assert load_config({"zk": ZK, "career": "counter"}).spark is None


def test_a_spark_career_on_a_cluster_splits_its_handover_budget_three_ways() -> None:
    """On a cluster the application's stop takes its share too, each stop capped, the batch what is left."""
    config = load_config({"zk": ZK, "spark_master": "spark://m:7077", "handover_timeout_s": 9,
                          "session_timeout_s": 20})
    assert config.spark is not None
    assert config.spark.handover_split() == pytest.approx((7.2 - 1.5 - 1.8, 1.5, 1.8))


def test_settings_come_from_a_toml_file_as_their_declared_types(tmp_path: Path) -> None:
    """TOML keys are the flat names; numbers, paths and a table of Spark settings are read as declared, and flags
    (overrides) win over the file."""
    toml = tmp_path / "tenure.toml"
    toml.write_text('zk = "127.0.0.1:2181"\nsession_timeout_s = 12\ndata_root = "/srv/x"\n'
                    'row_timeout_s = "4"\n[spark_conf]\n"spark.executor.memory" = "512m"\n')
    config = load_config({"session_timeout_s": 14.0, "max_files_per_trigger": None}, toml)
    assert config.election.session_timeout_s == 14.0 and config.data_root == Path("/srv/x")
    assert config.spark is not None and config.spark.row_timeout_s == 4.0
    assert dict(config.spark.spark_conf) == {"spark.executor.memory": "512m"}
    assert "max_files_per_trigger='x' is not a whole number" in _one_line(max_files_per_trigger="x")
    assert "spark_conf has 'x', which is not a Spark setting" in _one_line(spark_conf="x=1")
    with pytest.raises(ConfigError, match="zk is required: pass --zk or set TENURE_ZK"):
        load_config({})
