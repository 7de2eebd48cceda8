"""A new leader on a cluster frees the cores of earlier terms' applications (a paused leader's): which ones it
kills, where it finds the master, and that a master that fails or hangs costs the term only a warning.
The real master is in tests/test_spark_cluster.py and tests/test_cluster_failover.py."""

from __future__ import annotations

import http.client
import threading
import time
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from tenure.career.spark import SparkCareer
from tenure.career.spark._cluster import (
    STALE_APPLICATION_KILLED,
    STALE_APPLICATIONS_LEFT,
    application_epoch,
    reclaim_cores,
    term_application_name,
)
from tenure.service.replica._cluster_master import master_webuis
from tests.test_spark_career import Recorder, make_config


class _Master:
    """A master's application list (pure logic: the real one is in test_spark_cluster)."""

    def __init__(self, apps: list[tuple[str, str]], *, fail: Exception | None = None,
                 hang: threading.Event | None = None) -> None:
        self.apps = apps
        self.killed: list[str] = []
        self._fail = fail
        self._hang = hang

    def applications(self) -> list[tuple[str, str]]:
        if self._hang is not None:
            self._hang.wait(30)
        return list(self.apps)

    def kill(self, app_id: str) -> None:
        if self._fail is not None:
            raise self._fail
        self.killed.append(app_id)


@pytest.mark.parametrize(("app_name", "group", "epoch"), [("tenure", "default", 4294967306), ("my app", "a.b[c]", 0)])
def test_a_term_application_name_carries_its_epoch(app_name: str, group: str, epoch: int) -> None:
    name = term_application_name(app_name, group, epoch)
    assert application_epoch(name, app_name, group) == epoch
    assert application_epoch(name, app_name, group + "x") is None
    assert application_epoch(name, app_name + "x", group) is None
    assert application_epoch(app_name, app_name, group) is None


def test_only_this_groups_earlier_terms_are_killed() -> None:
    master = _Master([("app-1", "tenure [g epoch 3]"), ("app-2", "tenure [g epoch 7]"), ("app-3", "tenure [g epoch 9]"),
                      ("app-4", "tenure [h epoch 1]"), ("app-5", "tenure"), ("app-6", "other [g epoch 1]"),
                      ("app-7", "tenure [g epoch 1]")])
    with capture_logs() as logs:
        killed = reclaim_cores(master, app_name="tenure", group="g", epoch=7, log=structlog.get_logger())
    assert killed == master.killed == ["app-1", "app-7"]
    assert [(e["event"], e["app_id"], e["app_epoch"]) for e in logs] == [
        (STALE_APPLICATION_KILLED, "app-1", 3), (STALE_APPLICATION_KILLED, "app-7", 1)]


def test_a_kill_the_master_refuses_stops_the_reclaim() -> None:
    master = _Master([("app-1", "tenure [g epoch 3]")], fail=OSError("killing is disabled"))
    with pytest.raises(OSError, match="killing is disabled"):
        reclaim_cores(master, app_name="tenure", group="g", epoch=7, log=structlog.get_logger())


@pytest.mark.parametrize(("spark_master", "webui", "expected"), [
    ("spark://m:7077", None, ["http://m:8080"]),
    ("spark://m1:7077,m2:7077", None, ["http://m1:8080", "http://m2:8080"]),
    ("spark://m:7077", "https://ui.example:8443/, http://m:9090", ["https://ui.example:8443", "http://m:9090"]),
    ("local[2]", None, []),
    ("k8s://https://api:6443", None, []),
    ("yarn", None, []),
])
def test_the_masters_web_ui_addresses(spark_master: str, webui: str | None, expected: list[str]) -> None:
    assert master_webuis(spark_master, webui) == expected


def _cluster_career(tmp_path: Path, master: _Master) -> SparkCareer:
    config = make_config(tmp_path, spark_master="spark://127.0.0.1:7077", probe_timeout_s=0.5)
    return SparkCareer(config, Recorder(), replica_id="r1", group="g", cluster_master=master)


def test_a_master_that_fails_or_hangs_costs_the_term_a_warning(tmp_path: Path) -> None:
    """The reclaim runs before the term's application starts; a master that refuses, answers garbage or does not
    answer within the probe timeout is logged with the fix and the inauguration goes on (its application then
    waits for the cores, as it would without the reclaim)."""
    log = structlog.get_logger()
    refusing = _cluster_career(tmp_path / "a", _Master([("app-1", "tenure [g epoch 3]")], fail=OSError("403")))
    garbled = _cluster_career(tmp_path / "c", _Master([("app-1", "tenure [g epoch 3]")],
                                                      fail=http.client.IncompleteRead(b"{")))
    hang = threading.Event()
    hanging = _cluster_career(tmp_path / "b", _Master([], hang=hang))
    try:
        with capture_logs() as logs:
            refusing._reclaim_cores(7, log)
            garbled._reclaim_cores(7, log)
            started = time.monotonic()
            hanging._reclaim_cores(7, log)
            waited_s = time.monotonic() - started
    finally:
        hang.set()
    assert [e["event"] for e in logs] == [STALE_APPLICATIONS_LEFT] * 3
    assert logs[0]["error"] == "OSError: 403" and "spark.ui.killEnabled" in logs[0]["fix"]
    assert logs[1]["error"].startswith("IncompleteRead: ")
    assert "reclaiming the cluster's cores" in logs[2]["error"]
    assert waited_s < 5, f"the reclaim waited {waited_s:.1f} s on a master that does not answer"


def test_a_local_master_reclaims_nothing(tmp_path: Path) -> None:
    master = _Master([("app-1", "tenure [g epoch 3]")])
    career = SparkCareer(make_config(tmp_path), Recorder(), replica_id="r1", group="g", cluster_master=master)
    career._reclaim_cores(7, structlog.get_logger())
    assert master.killed == []
