"""Each setting declared once: the declaration primitive (``tenure.settings``), the flags `tenure run` makes of the
declarations (the same as before they were declared), and the one way from settings to a replica's command line
(``ReplicaSpec``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import click
import pytest

from tenure.errors import ConfigError
from tenure.service.cli._replica import run
from tenure.service.replica import SETTINGS, ReplicaSpec, load_config
from tenure.settings import REQUIRED, declarations, default_of, parse_value, part, render_value, setting, values


@dataclass(frozen=True, kw_only=True)
class _Inner:
    limit_s: float = setting(3.0, unit="s", help="A limit.", hazard="Too low breaks things.")


@dataclass(frozen=True, kw_only=True)
class _Whole:
    name: str = setting(help="Required.")
    mode: Literal["a", "b"] = setting("a", help="A choice.")
    wired: int = 0  # not a setting: given at wiring, never a flag
    inner: _Inner = part(_Inner)


@dataclass(frozen=True, kw_only=True)
class _Twice:
    limit_s: float = setting(1.0, help="The same flat name as _Inner's.")
    inner: _Inner = part(_Inner)


def test_declarations_list_a_whole_and_its_parts_under_flat_names() -> None:
    """A whole's settings come first, then each part's, in field order; a plain field is no setting; each keeps its
    default, unit, help, hazard, owner and where it lives."""
    found = declarations(_Whole)
    assert [(d.name, d.path, d.owner) for d in found] == [
        ("name", ("name",), _Whole), ("mode", ("mode",), _Whole), ("limit_s", ("inner", "limit_s"), _Inner)]
    assert found[0].default is REQUIRED and found[0].required and found[0].flag == "--name"
    limit = found[2]
    assert (limit.default, limit.unit, limit.variable) == (3.0, "s", "TENURE_LIMIT_S")
    assert limit.describe() == "A limit. Hazard: Too low breaks things."
    assert default_of(_Whole, "limit_s") == 3.0
    assert values(_Whole(name="x", inner=_Inner(limit_s=4.0))) == {"name": "x", "mode": "a", "limit_s": 4.0}


def test_a_flat_name_declared_twice_is_refused() -> None:
    """Two parts may not both declare a name: a flag, a variable and a TOML key must say which setting they set."""
    with pytest.raises(TypeError, match="'limit_s' is declared twice: by _Twice and by _Inner"):
        declarations(_Twice)


@pytest.mark.parametrize(("name", "text", "value"), [
    ("session_timeout_s", "4", 4.0),
    ("max_line_bytes", "1024", 1024),
    ("data_root", "/srv/t", Path("/srv/t")),
    ("standby", "cold", "cold"),
    ("spark_conf", "spark.a=1, spark.b=x=y", {"spark.a": "1", "spark.b": "x=y"}),
    ("canary_handover_every_s", "2.5", 2.5),
    ("dedup_window", "3 minutes", "3 minutes"),
])
def test_a_value_reads_from_text_and_writes_back_to_the_same_value(name: str, text: str, value: object) -> None:
    """Text (a flag, a variable) reads as the declared type, and the text written for it reads back the same."""
    declaration = next(d for d in SETTINGS if d.name == name)
    assert parse_value(declaration, text) == value
    assert parse_value(declaration, render_value(declaration, value)) == value


#: ``tenure run``'s flags before the settings were declared once (``tenure run --help`` on the code before, issue
#: 49): flag, click type, default. Every one is still there, with its variable, type and default.
_BEFORE: list[tuple[str, str, Any]] = [
    ("--zk", "text", REQUIRED), ("--group", "text", "default"), ("--data-root", "Path", Path(".tenure/data")),
    ("--queue-dir", "Path", None), ("--replica-id", "text", "the host name"), ("--metrics-host", "text", "0.0.0.0"),
    ("--metrics-port", "integer", 9400), ("--career", "text", "spark"), ("--session-timeout-s", "float", 10.0),
    ("--handover-timeout-s", "float", 5.0), ("--connect-timeout-s", "float", 15.0),
    ("--safe-fraction", "float", 0.5), ("--standby", "choice", "warm"), ("--spark-master", "text", "local[2]"),
    ("--spark-master-webui", "text", None), ("--spark-conf", "text", {}), ("--keep-warm-interval-s", "float", 20.0),
    ("--standby-executors", "integer", 1), ("--max-files-per-trigger", "integer", 5),
    ("--max-bytes-per-trigger", "integer", None), ("--trigger-interval-s", "float", 0.1),
    ("--max-line-bytes", "integer", 1048576), ("--dedup-window", "text", "2 minutes"),
    ("--archive-retention-s", "float", 604800.0), ("--shuffle-partitions", "integer", 2),
    ("--idle-backoff-s", "float", 0.1), ("--failure-backoff-s", "float", 1.0),
    ("--failure-backoff-max-s", "float", 60.0), ("--liveness-timeout-s", "float", 30.0),
    ("--stall-timeout-s", "float", 120.0), ("--first-batch-allowance-s", "float", 60.0),
    ("--max-batch-attempts", "integer", 3), ("--probe-timeout-s", "float", 10.0), ("--row-timeout-s", "float", 30.0),
    ("--zk-auth", "text", None), ("--counter-interval-s", "float", 0.2), ("--transform", "text", None),
    ("--row-function", "text", None), ("--retry-attempts", "integer", 5), ("--retry-backoff-s", "float", 1.0),
    ("--retry-backoff-max-s", "float", 300.0), ("--canary-handover-every-s", "float", None),
    ("--min-free-disk-mb", "integer", 512), ("--fault-file", "Path", None),
]
#: The shares of budgets that were fixed in the code, now settings of their own (their defaults are those values).
_NEW = {"--op-timeout-share": None, "--master-request-share": 0.25, "--master-request-max-s": 2.0,
        "--handover-spark-share": 0.8, "--handover-query-stop-share": 0.25, "--handover-query-stop-max-s": 1.5,
        "--handover-application-stop-share": 0.25, "--handover-application-stop-max-s": 2.0,
        # issue 50: a poison batch bounded by time as well as count, and split
        "--set-aside-after-s": 600.0, "--split-max-trials": 48,
        # issue 51: a topic of several queues, the cap on queues led, the balance's settle time
        "--queues": None, "--max-queues-led": None, "--balance-settle-s": 10.0,
        # issue 52: a Redis topic
        "--queue-url": None, "--max-entries-per-trigger": 10_000,
        # issue 53: a follower's state kept ready, and the fork server of a query's source runners
        "--standby-state": "off", "--fork-server": "on"}


def test_flags_variables_and_defaults_are_those_of_before() -> None:
    """Every flag of `tenure run` before is still there with its variable, type and default (the TOML key is the
    flag's name with underscores); the only new flags are the named shares of budgets, a poison batch's two
    bounds, the queues' three, a Redis topic's two, the follower's state kept ready and the fork server."""
    options = {p.opts[0]: p for p in run.params if isinstance(p, click.Option) and p.name != "config_file"}
    declared = {d.flag: d for d in SETTINGS}
    assert set(options) == set(declared)
    for flag, kind, default in _BEFORE:
        option, declaration = options[flag], declared[flag]
        assert option.envvar == "TENURE_" + flag[2:].replace("-", "_").upper(), flag
        assert ("choice" if isinstance(option.type, click.Choice) else option.type.name) == kind, flag
        assert option.name == declaration.name == flag[2:].replace("-", "_")
        shown = declaration.default_text if declaration.computed and declaration.default_text else declaration.default
        assert shown == default, flag
    assert {flag: declared[flag].default for flag in set(declared) - {f for f, _, _ in _BEFORE}} == _NEW


def test_a_spec_refuses_an_unknown_name_a_per_process_one_and_a_wrong_type() -> None:
    """A launcher's typo fails when the spec is built, in one line, not later in a replica's log."""
    with pytest.raises(ConfigError, match="row_timout_s is not a setting of `tenure run`"):
        ReplicaSpec(row_timout_s=2)
    with pytest.raises(ConfigError, match="replica_id is filled in by the launcher for each replica"):
        ReplicaSpec(replica_id="r1")
    with pytest.raises(ConfigError, match="row_timeout_s='soon' is not a number"):
        ReplicaSpec(row_timeout_s="soon")
    with pytest.raises(ConfigError, match="max_files_per_trigger=None has no flag"):
        ReplicaSpec(max_files_per_trigger=None)
    assert ReplicaSpec(career="counter") | ReplicaSpec(career="spark") == ReplicaSpec(career="spark")


def test_a_spec_round_trips_through_the_command_line_to_the_same_config(tmp_path: Path) -> None:
    """spec → `tenure run` argv → the CLI's own parser → ``load_config``: every setting the spec and the launcher
    gave arrives with its value, whatever its type."""
    spec = ReplicaSpec(group="orders", data_root=tmp_path / "data", queue_dir=tmp_path / "queue", career="spark",
                       session_timeout_s=7.5, handover_timeout_s=2, standby="cold", max_bytes_per_trigger=1 << 20,
                       spark_conf={"spark.executor.memory": "512m", "spark.cores.max": "2"},
                       canary_handover_every_s=0.1, dedup_window="5 minutes", row_timeout_s=0.25,
                       handover_spark_share=0.7, op_timeout_share=0.3, transform="tests.pipelines:scatters")
    per_process = {"zk": "127.0.0.1:2181,127.0.0.1:2182/tenure", "replica_id": "r7", "metrics_host": "127.0.0.1",
                   "metrics_port": 9411, "fault_file": tmp_path / "faults" / "r7"}
    command = spec.command(**per_process)
    assert command[1:4] == ["-m", "tenure", "run"]
    params = run.make_context("run", command[4:]).params
    config = load_config({k: v for k, v in params.items() if k != "config_file"})
    assert {name: values(config)[name] for name in [*spec, *per_process]} == {**spec, **per_process}
