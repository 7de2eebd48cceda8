"""A new leader on a cluster frees the cores of earlier terms' applications (a paused leader's): which ones it
kills, where it finds the master, that a master that fails or hangs costs the term only a warning, and when a
leader grows its standby application to its share.
The real master is in tests/test_spark_cluster.py and tests/test_cluster_failover.py."""

from __future__ import annotations

import http.client
import http.server
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import structlog
from structlog.testing import capture_logs

from tenure.career import HealthSettings
from tenure.career.spark._cluster import (
    STALE_APPLICATION_KILLED,
    STALE_APPLICATIONS_LEFT,
    reclaim_cores,
    record_application,
)
from tenure.career.spark._hooks import Hooks
from tenure.career.spark._layout import Layout
from tenure.career.spark._standby import SparkStandby
from tenure.service.local import Topology
from tenure.service.replica import ReplicaSpec
from tenure.service.replica._cluster_master import StandaloneMaster, master_webuis
from tests.test_spark_career import make_config


class _Master:
    """A master's application list (pure logic: the real one is in test_spark_cluster)."""

    def __init__(self, apps: list[tuple[str, str]], *, fail: Exception | None = None,
                 hang: threading.Event | None = None) -> None:
        self.apps = apps
        self.killed: list[str] = []
        self.listed = 0
        self._fail = fail
        self._hang = hang

    def applications(self) -> list[tuple[str, str]]:
        self.listed += 1
        if self._hang is not None:
            self._hang.wait(30)
        return list(self.apps)

    def kill(self, app_id: str) -> None:
        if self._fail is not None:
            raise self._fail
        self.killed.append(app_id)


def test_only_applications_that_earlier_terms_recorded_are_killed(tmp_path: Path) -> None:
    """A record names a term's application; the master holds others too (a newer term's, followers' standby
    applications, another group's, anyone's). Only what an earlier term recorded and the master still holds dies;
    records of applications the master no longer holds are deleted, later terms' records kept."""
    records = tmp_path / "_applications"
    for epoch, app_id in [(3, "app-1"), (1, "app-7"), (5, "app-gone"), (7, "app-2"), (9, "app-3")]:
        record_application(records, epoch, app_id, f"r{epoch}")
    master = _Master([("app-1", "tenure [g epoch 3]"), ("app-2", "tenure [g standby r7]"), ("app-3", "x"),
                      ("app-4", "tenure [h epoch 1]"), ("app-5", "tenure [g standby r1]"), ("app-7", "y")])
    with capture_logs() as logs:
        killed = reclaim_cores(master, records, epoch=7, log=structlog.get_logger())
    assert killed == master.killed == ["app-7", "app-1"]
    assert [(e["event"], e["app_id"], e["app_epoch"]) for e in logs] == [
        (STALE_APPLICATION_KILLED, "app-7", 1), (STALE_APPLICATION_KILLED, "app-1", 3)]
    assert sorted(p.name for p in records.iterdir()) == ["epoch-7.json", "epoch-9.json"]


def test_no_record_no_question_to_the_master(tmp_path: Path) -> None:
    """A first term on a cluster, or one after terms that all ended, costs no request to the master."""
    master = _Master([("app-1", "tenure [g epoch 3]")])
    records = tmp_path / "_applications"
    record_application(records, 7, "app-1", "r7")  # this term's own record
    assert reclaim_cores(master, records, epoch=7, log=structlog.get_logger()) == []
    assert master.listed == 0 and master.killed == []


def test_a_kill_the_master_refuses_stops_the_reclaim_and_keeps_the_record(tmp_path: Path) -> None:
    """A master that refuses the kill (killing disabled on it) fails the reclaim with its error, and the earlier term's
    record stays for the next leader to try again."""
    records = tmp_path / "_applications"
    record_application(records, 3, "app-1", "r1")
    master = _Master([("app-1", "tenure [g epoch 3]")], fail=OSError("killing is disabled"))
    with pytest.raises(OSError, match="killing is disabled"):
        reclaim_cores(master, records, epoch=7, log=structlog.get_logger())
    assert (records / "epoch-3.json").exists(), "the next leader must try again"


@pytest.mark.parametrize(("spark_master", "webui", "expected"), [
    ("spark://m:7077", None, ["http://m:8080"]),
    ("spark://m1:7077,m2:7077", None, ["http://m1:8080", "http://m2:8080"]),
    ("spark://m:7077", "https://ui.example:8443/, http://m:9090", ["https://ui.example:8443", "http://m:9090"]),
    ("local[2]", None, []),
    ("k8s://https://api:6443", None, []),
    ("yarn", None, []),
])
def test_the_masters_web_ui_addresses(spark_master: str, webui: str | None, expected: list[str]) -> None:
    """The master's web UI is found from the Spark master URL (port 8080 on each host of a standalone master, HA masters
    included) unless given; a given list is cleaned of trailing slashes; a local, Kubernetes or YARN master has none."""
    assert master_webuis(spark_master, webui) == expected


def _standby(root: Path, master: _Master, *, clock: Callable[[], float] = time.monotonic,
             spark_master: str = "spark://127.0.0.1:7077", **settings: object) -> SparkStandby:
    """A replica's standby on a cluster whose master is ``master``, where term 3 recorded application ``app-1`` and
    term 7 is open (its session not started)."""
    config = make_config(root, spark_master=spark_master, **settings)
    standby = SparkStandby(config, Hooks(policy=config.retry_policy), replica_id="r1", group="g", layout=Layout(root),
                           clock=clock, cluster_master=master)
    record_application(Layout(root).applications, 3, "app-1", "r0")
    standby._records[7] = Layout(root).applications  # as session_for_term(7, …) leaves it
    return standby


def _cluster_standby(tmp_path: Path, master: _Master) -> SparkStandby:
    return _standby(tmp_path, master, health=HealthSettings(probe_timeout_s=0.5))


def test_a_master_that_fails_or_hangs_costs_the_term_a_warning(tmp_path: Path) -> None:
    """A master that refuses, answers garbage or does not answer within the probe timeout is logged with the fix
    and the term goes on (its application then waits for the cores, as it would without the reclaim)."""
    log = structlog.get_logger()
    refusing = _cluster_standby(tmp_path / "a", _Master([("app-1", "tenure [g epoch 3]")], fail=OSError("403")))
    garbled = _cluster_standby(tmp_path / "c", _Master([("app-1", "tenure [g epoch 3]")],
                                                       fail=http.client.IncompleteRead(b"{")))
    hang = threading.Event()
    hanging = _cluster_standby(tmp_path / "b", _Master([], hang=hang))
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
    """On a local master no application is a cluster's: an earlier term's record is never acted on and the master's kill
    is never called."""
    master = _Master([("app-1", "tenure [g epoch 3]")])
    standby = _standby(tmp_path, master, spark_master="local[2]")
    standby._reclaim_cores(7, structlog.get_logger())
    assert master.killed == []


class _Share:
    """A standby application's executors as the standby drives them (the real ones: tests/test_cluster_failover.py)."""

    def __init__(self) -> None:
        self.grown = False
        self.calls: list[str] = []

    def grow(self) -> None:
        self.grown = True
        self.calls.append("grow")

    def renew(self) -> None:
        self.calls.append("renew")


def test_a_leader_grows_after_its_first_batch_then_renews_its_share(tmp_path: Path) -> None:
    """Not at inauguration: executors that register during the first batch would run some of its tasks cold. Then
    the share is told to the master again every 30 s (a restarted master recovers the application with none)."""
    now = [100.0]
    standby = _standby(tmp_path, _Master([]), clock=lambda: now[0], standby="warm")
    share = _Share()
    standby._executors = share  # type: ignore[assignment]  # the standby application's executors
    term = SimpleNamespace(epoch=7, completed=0, log=structlog.get_logger())
    standby.tend(term)  # type: ignore[arg-type]  # the fields growing the share reads
    assert share.calls == [], "grown before the first batch"
    term.completed = 1
    standby.tend(term)  # type: ignore[arg-type]
    assert share.calls == ["grow"]
    now[0] += 29
    standby.tend(term)  # type: ignore[arg-type]
    assert share.calls == ["grow"]
    now[0] += 2
    standby.tend(term)  # type: ignore[arg-type]
    assert share.calls == ["grow", "renew"]


def test_a_reclaim_the_master_failed_is_tried_again_while_the_term_leads(tmp_path: Path) -> None:
    """A master's web UI slow to answer once (CI saw a 2 s request time out under load) must not leave a paused
    leader's cores held for the whole term: the leader tries again every 30 s until the reclaim is done."""
    now = [100.0]
    master = _Master([("app-1", "tenure [g epoch 3]")], fail=OSError("timed out"))
    standby = _standby(tmp_path, master, clock=lambda: now[0], health=HealthSettings(probe_timeout_s=0.5))
    log = structlog.get_logger()
    term = SimpleNamespace(epoch=7, log=log)
    with capture_logs() as logs:
        standby._reclaim_cores(7, log)
        master._fail = None  # the master answers from now on
        standby.tend(term)  # type: ignore[arg-type]  # the two fields retrying the reclaim reads
        assert master.killed == [], "tried again before 30 s"
        now[0] += 31
        standby.tend(term)  # type: ignore[arg-type]
        now[0] += 31
        standby.tend(term)  # type: ignore[arg-type]
    assert master.killed == ["app-1"] and master.listed == 2, "done once, then never asked again"
    assert [e["event"] for e in logs] == [STALE_APPLICATIONS_LEFT, STALE_APPLICATION_KILLED]


def test_a_leader_on_standby_executors_reclaims_right_before_it_grows(tmp_path: Path) -> None:
    """Its standby executors run the first batch, so the master is not asked at inauguration (on the handover's
    path); once the first batch has committed, the earlier term's application is killed, then the share grows
    into its cores. A first batch that takes longer than 30 s gets the reclaim at 30 s."""
    now = [100.0]
    order: list[str] = []
    master = _Master([("app-1", "tenure [g epoch 3]")])
    master.kill = lambda app_id: order.append(f"kill {app_id}")  # type: ignore[method-assign]
    standby = _standby(tmp_path, master, clock=lambda: now[0], standby="warm")
    share = _Share()
    share.calls = order
    standby._executors = share  # type: ignore[assignment]  # the standby application's executors
    term = SimpleNamespace(epoch=7, completed=0, log=structlog.get_logger())

    standby._put_off_reclaim(7)
    standby.tend(term)  # type: ignore[arg-type]  # the fields the two steps read
    assert master.listed == 0 and order == [], "the master was asked before the first batch"
    term.completed = 1
    standby.tend(term)  # type: ignore[arg-type]
    assert order == ["kill app-1", "grow"]
    now[0] += 31
    standby._reclaim_if_due(term)  # type: ignore[arg-type]
    assert master.listed == 1, "a reclaim that was done is asked again"

    slow = _standby(tmp_path / "slow", master, clock=lambda: now[0], standby="warm")
    slow._put_off_reclaim(7)
    term.completed = 0
    now[0] += 29
    slow.tend(term)  # type: ignore[arg-type]
    assert master.listed == 1
    now[0] += 2
    slow.tend(term)  # type: ignore[arg-type]
    assert master.listed == 2, "a first batch slower than 30 s held the reclaim back"


class _StandInMaster:
    """A standalone master's web UI over real HTTP, for the client's logic (a real master: test_spark_cluster):
    ``/json/`` with ``status`` and its applications, ``/`` with a CSRF token, and ``POST /app/kill/``, which kills,
    is ignored, or is refused with ``kill_status`` (a master with ``spark.ui.killEnabled=false`` serves no kill
    handler: 404)."""

    def __init__(self, status: str, apps: list[str], *, kill_status: int | None = 302, kills: bool = True) -> None:
        self.status, self.apps = status, list(apps)
        self.posts: list[tuple[str, dict[str, list[str]]]] = []
        self.json_reads = 0
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                stand_in.json_reads += self.path == "/json/"
                body = (json.dumps({"status": stand_in.status,
                                    "activeapps": [{"id": a, "name": "tenure [g epoch 3]"} for a in stand_in.apps]})
                        if self.path == "/json/" else '<input name="csrfToken" value="t0ken">')
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body.encode())

            def do_POST(self) -> None:
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                stand_in.posts.append((self.path, form))
                if kills and kill_status == 302:
                    stand_in.apps = [a for a in stand_in.apps if a not in form.get("id", [])]
                self.send_response(kill_status or 302)
                self.send_header("Location", "/")
                self.end_headers()

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_the_alive_master_is_asked_and_a_master_that_does_not_kill_names_the_fix() -> None:
    """A master in standby listed first is passed over for the ALIVE one, which alone gets the kill (with its page's
    CSRF token), without a second question about which master is ALIVE. A master that refuses the kill (no kill
    handler: ``spark.ui.killEnabled=false``) or ignores it fails the kill with the setting to change."""
    standby = _StandInMaster("STANDBY", ["app-9"])
    alive = _StandInMaster("ALIVE", ["app-1", "app-2"])
    refusing = _StandInMaster("ALIVE", ["app-1"], kill_status=404)
    ignoring = _StandInMaster("ALIVE", ["app-1"], kills=False)
    try:
        master = StandaloneMaster([standby.url, alive.url], timeout_s=2.0)
        assert master.applications() == [("app-1", "tenure [g epoch 3]"), ("app-2", "tenure [g epoch 3]")]
        master.kill("app-1")
        assert alive.posts == [("/app/kill/", {"id": ["app-1"], "terminate": ["true"], "csrfToken": ["t0ken"]})]
        assert standby.posts == [] and alive.apps == ["app-2"]
        assert alive.json_reads == 2, "the kill asked again which master is ALIVE before it posted"
        for stand_in in (refusing, ignoring):
            with pytest.raises(OSError, match=rf"^the Spark master at {stand_in.url} did not kill application "
                                              r"app-1.*: set spark\.ui\.killEnabled=true on the master$"):
                StandaloneMaster([stand_in.url], timeout_s=2.0).kill("app-1")
        assert refusing.apps == ["app-1"] and len(refusing.posts) == 1
    finally:
        for stand_in in (standby, alive, refusing, ignoring):
            stand_in.close()


def test_a_reclaim_never_kills_the_application_it_runs_on(tmp_path: Path) -> None:
    """A replica that led the queue before, on the application it still runs for its other queues, finds that
    term's record: the record goes, the application lives."""
    records = tmp_path / "_applications"
    record_application(records, 3, "app-1", "r1")
    master = _Master([("app-1", "tenure [g epoch 2]")])
    assert reclaim_cores(master, records, epoch=7, log=structlog.get_logger(), own="app-1") == []
    assert master.killed == [] and list(records.iterdir()) == []


def test_queues_of_one_application_kill_it_only_when_its_replica_lost_them_all(tmp_path: Path) -> None:
    """r1's one application serves its terms of queues 0 and 1, each recorded under its queue's folder. Queue 1
    moves to r2 gracefully: r1's term ends while the application lives on for queue 0, so its record goes, and r2's
    new term of queue 1 kills nothing (a record of it would have stopped queue 0's query). Then r1 pauses as a whole:
    r2's new term of queue 0 finds queue 0's record and kills r1's application, and nothing of queue 1's."""
    master = _Master([("app-r1", "tenure [g epoch 5]"), ("app-r2", "tenure [g standby r2]")])
    queue = [Layout(tmp_path, index=k, queues=2).applications for k in (0, 1)]
    r1, r2 = (_standby(tmp_path / name, master) for name in ("r1", "r2"))
    for epoch, records in ((5, queue[0]), (6, queue[1])):
        r1._records[epoch] = records
        record_application(records, epoch, "app-r1", "r1")
        r1.term_began()
    log = structlog.get_logger()
    r1.term_ended(6, log)
    assert not (queue[1] / "epoch-6.json").exists() and (queue[0] / "epoch-5.json").exists()
    for epoch, records in ((9, queue[1]), (10, queue[0])):  # r2's terms: queue 1 moved, then queue 0 after the pause
        r2._records[epoch] = records
        r2._reclaim_cores(epoch, log)
        assert master.killed == ([] if epoch == 9 else ["app-r1"])


@pytest.mark.parametrize(("queues", "replicas", "workers", "share"), [
    (1, 3, 2, 2),  # one leader: the cluster's 4 cores less the two followers' standby executors
    (3, 2, 2, 2),  # two leaders, no replica leading nothing: half each
    (2, 3, 2, 1),  # two leaders and one standby executor: 3 cores left, 1 each
    (4, 3, 1, 1),  # three leaders on 2 cores: at least the one core each already holds
])
def test_the_embedded_clusters_cores_are_split_among_the_replicas_that_can_lead_at_once(
        tmp_path: Path, queues: int, replicas: int, workers: int, share: int) -> None:
    """A topic of N queues has up to min(N, replicas) leaders at once, each on one application: the leader's share
    (spark.cores.max) is what the standby executors of the replicas leading nothing leave, split among them."""
    topology = Topology(tmp_path, replicas=replicas, spec=ReplicaSpec(career="spark", queues=queues),
                        spark_workers=workers)
    assert topology.spec.value("spark_conf")["spark.cores.max"] == str(share)
