"""The deployment: docker-compose.yml, the image, Prometheus config and alerts, the Grafana dashboard."""

from __future__ import annotations

import fnmatch
import http.server
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tenure.service.local import free_port, wait_for
from tests._prometheus import (
    PrometheusError,
    alerts,
    prometheus_binary,
    query,
    running_prometheus,
    scrape_config,
)

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA_DIR / "dashboards" / "tenure.json"

# What every replica exports on /metrics (the service's contract); dashboards and alerts may name only these.
EXPORTED_METRICS = frozenset(
    {
        "tenure_is_leader",
        "tenure_leader_epoch",
        "tenure_leadership_changes_total",
        "tenure_inauguration_seconds",
        "tenure_handover_seconds",
        "tenure_batches_total",
        "tenure_records_total",
        "tenure_batch_duration_seconds",
        "tenure_commit_duration_seconds",
        "tenure_source_backlog_files",
        "tenure_last_commit_timestamp_seconds",
        "tenure_zk_connected",
        "tenure_info",
        "tenure_commits_fenced_total",
        "tenure_career_failures_total",
        "tenure_retry_waiting_records",
        "tenure_leader_changes_total",
        "tenure_lease_headroom_seconds",
        "tenure_handover_gap_seconds",
        "tenure_canary_gap_seconds",
        "tenure_control_loop_age_seconds",
        "tenure_progress_age_seconds",
        "tenure_stalls_total",
        "tenure_queues_led",
        "tenure_group_balanced",
        "tenure_queue_moves_total",
        "tenure_queue_lost",
        "tenure_row_timeouts_total",
    }
)
REPLICAS = ("tenure-1", "tenure-2", "tenure-3")
ZOOKEEPERS = ("zk1", "zk2", "zk3")
SPARK_MASTER = "spark-master"
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
SPARK_SERVICES = (SPARK_MASTER, *SPARK_WORKERS)

needs_compose = pytest.mark.skipif(
    shutil.which("docker-compose") is None,
    reason="docker-compose not installed (Debian package docker-compose); the compose file is not validated",
)
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not installed (Debian package prometheus); config and rules are not checked",
)
needs_prometheus = pytest.mark.skipif(
    prometheus_binary() is None,
    reason="prometheus server not installed (Debian package prometheus); no live scrape test",
)


def _metric_names(expr: str) -> set[str]:
    """The tenure metric families an expression names (histogram series map to their family)."""
    names = set(re.findall(r"\btenure_\w+", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", name) for name in names}


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _dashboard_exprs() -> list[str]:
    """Every PromQL expression in the dashboard: panel targets, annotations, template variables."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [node["expr"] for node in _walk(dashboard) if isinstance(node.get("expr"), str)]
    for variable in dashboard.get("templating", {}).get("list", []):
        if isinstance(variable.get("query"), str):
            exprs.append(variable["query"])
    return exprs


def _grafana_to_promql(expr: str) -> str:
    """Replaces Grafana's built-in range variables so Prometheus can parse the expression."""
    for variable, value in {"$__rate_interval": "20s", "$__interval": "5s", "$__range": "30m"}.items():
        expr = expr.replace(variable, value)
    return expr


def _alert_rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text(encoding="utf-8"))["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


# ---------------------------------------------------------------------------------------------- compose


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """docker-compose.yml as `docker-compose config` resolves it (anchors merged, paths absolute)."""
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose not installed (Debian package docker-compose)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    done = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE_FILE), "config"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"docker-compose config rejected the file:\n{done.stderr}"
    resolved: dict[str, Any] = yaml.safe_load(done.stdout)
    return resolved


def _published(service: dict[str, Any]) -> set[tuple[str, int, int]]:
    """(host ip, host port, container port) of each published port, from `docker-compose config` output."""
    found = set()
    for port in service.get("ports", []):
        if isinstance(port, dict):  # long syntax
            found.add((port.get("host_ip", ""), int(port["published"]), int(port["target"])))
            continue
        spec = str(port).split("/")[0]
        parts = spec.split(":")
        host_ip = parts[0] if len(parts) == 3 else ""
        found.add((host_ip, int(parts[-2]), int(parts[-1])))
    return found


def _volume_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source of each volume of a service."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            mounts[volume["target"]] = volume["source"]
        else:
            source, target = str(volume).split(":")[:2]
            mounts[target] = source
    return mounts


@needs_compose
def test_compose_file_is_accepted(compose: dict[str, Any]) -> None:
    """`docker-compose config` accepts docker-compose.yml and it defines the documented services (the redis
    profile's Redis and its producer among them), the replicas reading TENURE_QUEUE_URL when it is set."""
    assert set(compose["services"]) == {*ZOOKEEPERS, *SPARK_SERVICES, *REPLICAS, "producer", "prometheus", "grafana",
                                        "redis", "producer-redis"}
    assert compose["services"]["redis"]["profiles"] == ["redis"]
    assert compose["services"]["redis"]["command"][1:5] == ["--appendonly", "yes", "--appendfsync", "always"]
    assert all("TENURE_QUEUE_URL" in compose["services"][name]["environment"] for name in REPLICAS)


@needs_compose
def test_compose_zookeeper_ensemble(compose: dict[str, Any]) -> None:
    """Three ZooKeeper servers from the official image: distinct ids, one ensemble, metrics, quorum health."""
    services = compose["services"]
    ids = []
    for name in ZOOKEEPERS:
        zk = services[name]
        env = zk["environment"]
        assert zk["image"].startswith("zookeeper:3.9"), name
        ids.append(env["ZOO_MY_ID"])
        servers = env["ZOO_SERVERS"].split()
        assert servers == [f"server.{i}=zk{i}:2888:3888;2181" for i in (1, 2, 3)], name
        assert "srvr" in env["ZOO_4LW_COMMANDS_WHITELIST"].split(","), f"{name}: the healthcheck needs srvr"
        extra = env["ZOO_CFG_EXTRA"].split()
        assert "metricsProvider.httpPort=7000" in extra, name
        assert "metricsProvider.className=org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider" in extra, (
            name
        )
        health = " ".join(zk["healthcheck"]["test"])
        assert "srvr" in health and "Mode: (leader|follower" in health, f"{name}: healthcheck not quorum-aware"
    assert sorted(ids) == ["1", "2", "3"]


@needs_compose
def test_compose_replicas_share_the_data_volume(compose: dict[str, Any]) -> None:
    """Three replicas with distinct ids share one named volume on /data with the producer, and restart."""
    services = compose["services"]
    replicas = {name: s for name, s in services.items() if "TENURE_REPLICA_ID" in s.get("environment", {})}
    assert sorted(replicas) == list(REPLICAS)
    assert sorted(s["environment"]["TENURE_REPLICA_ID"] for s in replicas.values()) == list(REPLICAS)
    sources = {_volume_mounts(s).get("/data") for s in [*replicas.values(), services["producer"]]}
    assert len(sources) == 1, f"replicas and producer must share one /data volume, got {sources}"
    (source,) = sources
    assert source in compose["volumes"], f"/data must be a named volume, got {source!r}"
    for name, replica in replicas.items():
        env = replica["environment"]
        assert env["TENURE_DATA_ROOT"] == "/data", name
        assert env["TENURE_ZK"] == "zk1:2181,zk2:2181,zk3:2181", name
        assert replica["restart"] in {"on-failure", "unless-stopped", "always"}, name
        assert replica["build"]["dockerfile"] == "deploy/Dockerfile", name
        assert Path(replica["build"]["context"]) == ROOT, name
        depends = replica["depends_on"]
        assert {zk: depends[zk]["condition"] for zk in ZOOKEEPERS} == dict.fromkeys(ZOOKEEPERS, "service_healthy"), name
    assert services["producer"]["command"][0] == "produce"


@needs_compose
def test_compose_published_ports(compose: dict[str, Any]) -> None:
    """Ports are published on loopback as documented: ZooKeeper, Spark master UI, replica metrics, Prometheus,
    Grafana."""
    services = compose["services"]
    expected = {
        "zk1": {("127.0.0.1", 2181, 2181)},
        "zk2": {("127.0.0.1", 2182, 2181)},
        "zk3": {("127.0.0.1", 2183, 2181)},
        "spark-master": {("127.0.0.1", 8080, 8080)},
        "spark-worker-1": set(),
        "spark-worker-2": set(),
        "tenure-1": {("127.0.0.1", 9401, 9400)},
        "tenure-2": {("127.0.0.1", 9402, 9400)},
        "tenure-3": {("127.0.0.1", 9403, 9400)},
        "producer": set(),
        "redis": {("127.0.0.1", 6379, 6379)},
        "producer-redis": set(),
        "prometheus": {("127.0.0.1", 9090, 9090)},
        "grafana": {("127.0.0.1", 3000, 3000)},
    }
    assert {name: _published(service) for name, service in services.items()} == expected


@needs_compose
def test_compose_monitoring_mounts(compose: dict[str, Any]) -> None:
    """Prometheus gets deploy/prometheus (config and rules), Grafana its provisioning and dashboards."""
    services = compose["services"]
    prometheus = _volume_mounts(services["prometheus"])
    assert Path(prometheus["/etc/prometheus"]) == PROMETHEUS_DIR
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    grafana = _volume_mounts(services["grafana"])
    assert Path(grafana["/etc/grafana/provisioning"]) == GRAFANA_DIR / "provisioning"
    assert Path(grafana["/var/lib/grafana/dashboards"]) == GRAFANA_DIR / "dashboards"
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (GRAFANA_DIR / "dashboards" / Path(home).name).is_file()


# ---------------------------------------------------------------------------------------------- spark cluster


def _option(args: list[str], name: str) -> str | None:
    """The value after ``name`` in an argument list (``--port 7077``), or None."""
    return args[args.index(name) + 1] if name in args else None


def _java_options(opts: str) -> dict[str, str]:
    """``-Dkey=value`` system properties of a Java options string (SPARK_MASTER_OPTS and the like)."""
    return dict(opt[2:].split("=", 1) for opt in shlex.split(opts) if opt.startswith("-D") and "=" in opt)


def _spark_master_url(compose: dict[str, Any]) -> str:
    """spark://host:port of the compose master, from its command; the host must resolve on the network."""
    master = compose["services"][SPARK_MASTER]
    args = [str(arg) for arg in master["command"]]
    assert args[0] == "org.apache.spark.deploy.master.Master", args
    host, port = _option(args, "--host"), _option(args, "--port") or "7077"
    assert host in {SPARK_MASTER, master.get("hostname")}, f"--host {host}: not a name the network resolves"
    return f"spark://{host}:{port}"


def _worker_args(worker: dict[str, Any]) -> list[str]:
    args = [str(arg) for arg in worker["command"]]
    assert args[0] == "org.apache.spark.deploy.worker.Worker", args
    return args


def _bytes(size: str) -> int:
    """A JVM memory string (512m, 1g, 1024k) in bytes; a bare number is MiB, as Spark reads it."""
    match = re.fullmatch(r"(\d+)([kmgt]?)b?", size.strip().lower())
    assert match, f"not a memory size: {size!r}"
    return int(match.group(1)) << {"k": 10, "": 20, "m": 20, "g": 30, "t": 40}[match.group(2)]


def _python_version_of_image() -> str:
    """X.Y of the image's Python, from its FROM python:X.Y-… line."""
    (base,) = [args for keyword, args in _dockerfile_instructions() if keyword == "FROM"]
    match = re.fullmatch(r"python:(\d+\.\d+)[.-].*", base)
    assert match, f"FROM {base}: not an official Python image"
    return match.group(1)


@needs_compose
def test_compose_replicas_use_the_compose_spark_master(compose: dict[str, Any]) -> None:
    """Every replica's TENURE_SPARK_MASTER is the compose master's spark://host:port, and waits for it."""
    url = _spark_master_url(compose)
    for name in REPLICAS:
        replica = compose["services"][name]
        assert replica["environment"]["TENURE_SPARK_MASTER"] == url, name
        assert replica["depends_on"][SPARK_MASTER]["condition"] == "service_healthy", name


@needs_compose
def test_compose_spark_workers_join_the_master(compose: dict[str, Any]) -> None:
    """Each worker registers with the compose master's host:port, after the master is healthy."""
    url = _spark_master_url(compose)
    for name in SPARK_WORKERS:
        worker = compose["services"][name]
        masters = [arg for arg in _worker_args(worker) if arg.startswith("spark://")]
        assert masters == [url], f"{name} joins {masters}, the master is {url}"
        assert worker["depends_on"][SPARK_MASTER]["condition"] == "service_healthy", name


@needs_compose
def test_compose_spark_ports_are_loopback_only(compose: dict[str, Any]) -> None:
    """No Spark port (master RPC or UI, worker UI) is published beyond 127.0.0.1: the cluster runs code it is sent
    and has no authentication."""
    for name in SPARK_SERVICES:
        for host_ip, host_port, _ in _published(compose["services"][name]):
            assert host_ip == "127.0.0.1", f"{name} publishes {host_port} on {host_ip or 'every interface'}"


@needs_compose
def test_compose_spark_workers_see_the_replicas_data_root(compose: dict[str, Any]) -> None:
    """Executors read the queue and write staging, checkpoint and state under the data root: every worker mounts
    the replicas' data volume at the replicas' TENURE_DATA_ROOT."""
    services = compose["services"]
    roots = {services[name]["environment"]["TENURE_DATA_ROOT"] for name in REPLICAS}
    assert len(roots) == 1, roots
    (root,) = roots
    sources = {_volume_mounts(services[name]).get(root) for name in REPLICAS}
    assert len(sources) == 1 and None not in sources, f"replicas mount {sources} on {root}"
    (source,) = sources
    for name in SPARK_WORKERS:
        assert _volume_mounts(services[name]).get(root) == source, f"{name} lacks {source} on {root}"


@needs_compose
def test_compose_spark_runs_the_replicas_image(compose: dict[str, Any]) -> None:
    """The Spark services run the replicas' image (PySpark refuses Python workers of another minor version than
    the driver's, and the cluster's Spark must be the driver's pyspark), with spark-class from that image's
    pyspark wheel, and the replicas send executors the image's Python."""
    services = compose["services"]
    replica = services[REPLICAS[0]]
    python = _python_version_of_image()
    spark_home = f"/usr/local/lib/python{python}/site-packages/pyspark"
    for name in SPARK_SERVICES:
        service = services[name]
        assert service["image"] == replica["image"], f"{name} runs {service['image']}, the replicas {replica['image']}"
        assert service["build"] == replica["build"], name
        assert service["entrypoint"] == [f"{spark_home}/bin/spark-class"], name
        assert service["environment"]["SPARK_HOME"] == spark_home, name
        health = " ".join(service["healthcheck"]["test"])
        assert "/livez" not in health and service["healthcheck"].get("disable") is not True, (
            f"{name}: the image's /livez healthcheck is a replica's; give the service its own"
        )
    for name in REPLICAS:
        executable = services[name]["environment"]["PYSPARK_PYTHON"]
        assert executable == "/usr/local/bin/tenure-spark-python", name


@needs_compose
def test_compose_spark_master_rest_server_is_disabled(compose: dict[str, Any]) -> None:
    """The master's REST submission server (unauthenticated) is off."""
    opts = _java_options(compose["services"][SPARK_MASTER]["environment"]["SPARK_MASTER_OPTS"])
    assert opts.get("spark.master.rest.enabled") == "false", opts


@needs_compose
def test_compose_spark_master_recovers_from_a_volume(compose: dict[str, Any]) -> None:
    """FILESYSTEM recovery into a named volume, on a directory the image creates for its non-root user (a fresh
    volume on a mount point missing from the image would be root's, and the master could not write it)."""
    master = compose["services"][SPARK_MASTER]
    opts = _java_options(master["environment"]["SPARK_MASTER_OPTS"])
    assert opts.get("spark.deploy.recoveryMode") == "FILESYSTEM", opts
    directory = opts.get("spark.deploy.recoveryDirectory")
    assert directory, "spark.deploy.recoveryDirectory is not set"
    source = _volume_mounts(master).get(directory)
    assert source in compose["volumes"], f"{directory} must be a named volume, got {source!r}"
    runs = " ".join(args for keyword, args in _dockerfile_instructions() if keyword == "RUN")
    assert re.search(rf"mkdir -p [^;]*{re.escape(directory)}\b", runs), f"the image does not create {directory}"
    assert re.search(rf"chown tenure:tenure [^;]*{re.escape(directory)}\b", runs), f"{directory} is not tenure's"


@needs_compose
def test_compose_executors_fit_a_worker(compose: dict[str, Any]) -> None:
    """The executor size the replicas ask for (TENURE_SPARK_CONF) fits one worker's --memory and --cores, or the
    leader's application would wait for resources forever."""
    env = compose["services"][REPLICAS[0]]["environment"]
    conf = dict(item.split("=", 1) for item in env.get("TENURE_SPARK_CONF", "").split(",") if item.strip())
    executor_memory = _bytes(conf.get("spark.executor.memory", "1g"))  # Spark's default
    for name in SPARK_WORKERS:
        args = _worker_args(compose["services"][name])
        memory, cores = _option(args, "--memory"), _option(args, "--cores")
        assert memory and cores, f"{name}: give the worker --memory and --cores"
        assert executor_memory <= _bytes(memory), f"spark.executor.memory does not fit {name}'s {memory}"
        assert int(conf.get("spark.executor.cores", cores)) <= int(cores), name



@needs_compose
def test_compose_cluster_has_room_for_the_leader_and_every_standby(compose: dict[str, Any]) -> None:
    """The workers' cores hold the leader's share (spark.cores.max) and each follower's standby executors of one
    core: otherwise a follower waits for a core that never comes free, and leads cold."""
    env = compose["services"][REPLICAS[0]]["environment"]
    conf = dict(item.split("=", 1) for item in env.get("TENURE_SPARK_CONF", "").split(",") if item.strip())
    standby = int(env.get("TENURE_STANDBY_EXECUTORS", 1)) * int(conf.get("spark.executor.cores", 1))
    cores = sum(int(_option(_worker_args(compose["services"][name]), "--cores") or 0) for name in SPARK_WORKERS)
    share = conf.get("spark.cores.max")
    assert share, "set spark.cores.max, the leader's share, or it takes the followers' cores too"
    assert int(share) + (len(REPLICAS) - 1) * standby <= cores, (share, standby, cores)


def _run_healthcheck(test: list[str], url_from: str, url_to: str) -> int:
    """Runs a compose CMD healthcheck with this interpreter, its URL pointed at ``url_to``."""
    assert test[0] == "CMD" and test[1] in {"python", "python3"}, test
    command = [sys.executable, *[arg.replace(url_from, url_to) for arg in test[2:]]]
    assert command != [sys.executable, *test[2:]], f"{url_from} is not in the healthcheck"
    env = {k: v for k, v in os.environ.items() if k.lower() not in {"http_proxy", "https_proxy", "all_proxy"}}
    return subprocess.run(command, env=env, capture_output=True, timeout=30, check=False).returncode


@needs_compose
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("service", "url", "healthy", "unhealthy"),
    [
        (SPARK_MASTER, "http://localhost:8080/json/", {"status": "ALIVE"}, {"status": "RECOVERING"}),
        (
            SPARK_WORKERS[0],
            "http://localhost:8081/json/",
            {"masterurl": "spark://spark-master:7077"},
            {"masterurl": ""},
        ),
    ],
)
def test_compose_spark_healthchecks(
    compose: dict[str, Any], service: str, url: str, healthy: dict[str, str], unhealthy: dict[str, str]
) -> None:
    """The Spark healthchecks, run as Docker runs them against a stand-in web UI serving Spark 4's /json/ shape:
    exit 0 for an ALIVE master or a registered worker, non-zero otherwise and when nothing answers."""
    answer: dict[str, str] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(answer, indent=2, separators=(",", " : ")).encode()
            self.send_response(200 if self.path == "/json/" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    test = compose["services"][service]["healthcheck"]["test"]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stand_in = f"http://127.0.0.1:{server.server_address[1]}/json/"
    try:
        answer.update(healthy)
        assert _run_healthcheck(test, url, stand_in) == 0
        answer.clear()
        answer.update(unhealthy)
        assert _run_healthcheck(test, url, stand_in) != 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert _run_healthcheck(test, url, f"http://127.0.0.1:{free_port()}/json/") != 0


def test_scrape_targets_match_the_compose_services() -> None:
    """prometheus.yml scrapes each compose replica on :9400 labelled with its id, and ZooKeeper on :7000."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    tenure = {
        target: group["labels"]["replica"] for group in jobs["tenure"]["static_configs"] for target in group["targets"]
    }
    assert tenure == {f"{name}:9400": name for name in REPLICAS}
    zookeeper = [target for group in jobs["zookeeper"]["static_configs"] for target in group["targets"]]
    assert zookeeper == [f"{name}:7000" for name in ZOOKEEPERS]
    assert config["rule_files"] == ["alerts.yml"]


def test_zookeeper_healthcheck_matches_a_real_quorum_member(zk_hosts: str) -> None:
    """The compose healthcheck's `srvr` pattern matches what ZooKeeper 3.9 servers in a quorum answer."""
    compose_text = COMPOSE_FILE.read_text(encoding="utf-8")
    pattern = re.search(r"grep -qE '([^']+)'", compose_text)
    assert pattern, "the ZooKeeper healthcheck greps srvr output with grep -qE '...'"
    for hostport in zk_hosts.split(","):
        host, port = hostport.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(b"srvr")
            answer = b"".join(iter(lambda: conn.recv(4096), b"")).decode()
        assert re.search(pattern.group(1), answer), f"{hostport} answered {answer!r}"


def test_contract_matches_the_service_registry() -> None:
    """The list alerts and dashboard are checked against is what service/replica/_metrics.py exports."""
    metrics_module = pytest.importorskip("tenure.service.replica._metrics")
    registry = CollectorRegistry()
    metrics_module.Metrics(registry, replica_id="r1", group="g", default_collectors=False)
    exported = {
        re.sub(r"_(bucket|sum|count)$", "", sample.name)
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }
    assert {name for name in exported if name.startswith("tenure_")} == EXPORTED_METRICS


# ---------------------------------------------------------------------------------------------- image


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    lines = [line for line in DOCKERFILE.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    instructions = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, args = line.strip().partition(" ")
            instructions.append((keyword.upper(), args.strip()))
    return instructions


def test_dockerfile_contract() -> None:
    """The image: slim Python 3.11 with Java 17, non-root, `tenure run` entry point, a /livez healthcheck."""
    instructions = _dockerfile_instructions()
    by_keyword: dict[str, list[str]] = {}
    for keyword, args in instructions:
        by_keyword.setdefault(keyword, []).append(args)
    assert by_keyword["FROM"] == ["python:3.11-slim-bookworm"]
    assert any("openjdk-17-jre-headless" in run for run in by_keyword["RUN"])
    assert any("pip install ." in run for run in by_keyword["RUN"])
    assert by_keyword["USER"][-1] not in {"root", "0"}
    assert json.loads(by_keyword["ENTRYPOINT"][-1]) == ["tenure"]
    assert json.loads(by_keyword["CMD"][-1]) == ["run"]
    (healthcheck,) = by_keyword["HEALTHCHECK"]
    assert "/livez" in healthcheck and "TENURE_METRICS_PORT" in healthcheck


def _dockerignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.lstrip("!").rstrip("/")
        candidates = [pattern, pattern.removeprefix("**/")]
        parts = Path(path).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(prefix, c) for prefix in prefixes for c in candidates):
            ignored = not negate
    return ignored


def test_dockerfile_copies_exist_and_are_not_dockerignored() -> None:
    """Every COPY source exists in the repository (the build context) and .dockerignore keeps it in,
    while the venv, git metadata and local state stay out of the context."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources: list[str] = []
    for keyword, args in _dockerfile_instructions():
        if keyword == "COPY":
            sources.extend(arg for arg in shlex.split(args)[:-1] if not arg.startswith("--"))
    assert sources, "the Dockerfile copies nothing"
    for source in sources:
        assert (ROOT / source).exists(), (
            f"COPY {source}: missing from the build context (pip install . needs it; README.md is pyproject's readme)"
        )
        assert not _dockerignored(source.rstrip("/"), patterns), f"COPY {source}: excluded by .dockerignore"
    for local in (".venv", ".git", ".tenure", "service/__pycache__"):
        assert _dockerignored(local, patterns), f"{local} should be excluded by .dockerignore"


def test_image_healthcheck_command_probes_livez() -> None:
    """The HEALTHCHECK command, run as the image runs it, exits 0 when /livez answers 200 on
    $TENURE_METRICS_PORT and non-zero when nothing listens there."""
    (healthcheck,) = [args for keyword, args in _dockerfile_instructions() if keyword == "HEALTHCHECK"]
    command = healthcheck.split(" CMD ", 1)[1]
    registry = CollectorRegistry()  # prometheus_client answers every path, /livez included, with 200
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env = {k: v for k, v in env.items() if k.lower() not in {"http_proxy", "https_proxy", "all_proxy"}}
    try:
        alive = subprocess.run(
            ["sh", "-c", command], env={**env, "TENURE_METRICS_PORT": str(port)}, timeout=30, check=False
        )
        assert alive.returncode == 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    dead = subprocess.run(
        ["sh", "-c", command],
        env={**env, "TENURE_METRICS_PORT": str(free_port())},
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert dead.returncode != 0


# ---------------------------------------------------------------------------------------------- promtool


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


@needs_promtool
def test_promtool_check_config() -> None:
    """`promtool check config` accepts the scrape config (and the rule file it loads)."""
    done = _promtool("check", "config", "deploy/prometheus/prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_promtool_check_rules() -> None:
    """`promtool check rules` accepts the alert rules."""
    done = _promtool("check", "rules", "deploy/prometheus/alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_promtool_rule_unit_tests() -> None:
    """`promtool test rules` passes: every alert fires when it should and stays quiet when it should."""
    done = _promtool("test", "rules", "deploy/prometheus/alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    """alerts_test.yml has, for each alert in alerts.yml, a case where it fires and one where it does not."""
    rules = _alert_rules()
    cases = yaml.safe_load((PROMETHEUS_DIR / "alerts_test.yml").read_text(encoding="utf-8"))["tests"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert set(rules) == {
        "TenureNoLeader",
        "TenureSplitBrain",
        "TenureCommitsFenced",
        "TenureCommitsStalled",
        "TenureZooKeeperDisconnected",
        "TenureSlowHandover",
        "TenureDeadLetters",
        "TenureCanaryHandoverSlow",
        "TenureLeaderStalled",
        "TenureControlLoopStuck",
        "TenureReplicaStalled",
        "TenureBatchSetAside",
        "TenureImbalanced",
        "TenureQueueLost",
    }
    assert fires == set(rules), f"no firing case for {set(rules) - fires}"
    assert quiet == set(rules), f"no quiet case for {set(rules) - quiet}"


def test_alerts_tell_the_operator_what_to_do_and_name_exported_metrics() -> None:
    """Every alert has a severity, a summary and a description, and its query names only exported metrics."""
    for name, rule in _alert_rules().items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["annotations"]["summary"].strip(), name
        assert len(rule["annotations"]["description"]) > 100, name
        names = _metric_names(rule["expr"])
        assert names, f"{name} names no tenure metric"
        assert names <= EXPORTED_METRICS, f"{name} names {names - EXPORTED_METRICS}, which tenure does not export"


def test_no_leader_alert_waits_session_timeout_plus_30s() -> None:
    """TenureNoLeader waits the compose session timeout (10 s) plus 30 s before firing."""
    rule = _alert_rules()["TenureNoLeader"]
    assert rule["for"] == "40s"
    assert "absent(tenure_is_leader)" in rule["expr"]


# ---------------------------------------------------------------------------------------------- grafana


def test_dashboard_parses_and_names_only_exported_metrics() -> None:
    """The dashboard JSON parses, has the promised panels, and every query names only exported metrics."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    titles = {panel["title"] for panel in dashboard["panels"]}
    for title in (
        "Leader per replica",
        "Leader epoch",
        "Commit rate (batches by outcome)",
        "Records by outcome",
        "Source backlog",
        "Handover and inauguration durations",
        "ZooKeeper connection per replica",
    ):
        assert title in titles
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "prometheus", panel["title"]
    exprs = _dashboard_exprs()
    assert exprs
    for expr in exprs:
        names = _metric_names(expr)
        assert names, f"{expr!r} names no tenure metric"
        assert names <= EXPORTED_METRICS, f"{expr!r} names {names - EXPORTED_METRICS}"


def test_dashboard_shows_leader_commits_and_backlog_per_queue() -> None:
    """A group of several queues has a panel each for its leader, commits and backlog per queue, each query grouped
    by the ``queue`` label (and a group of one queue, unlabelled, shows as one line)."""
    panels = {panel["title"]: panel for panel in json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]}
    for title, metric in (("Leader per queue", "tenure_is_leader"), ("Commits per queue", "tenure_batches_total"),
                          ("Backlog per queue", "tenure_source_backlog_files")):
        (target,) = panels[title]["targets"]
        assert metric in target["expr"] and re.search(r"by \((queue|queue, replica)\)", target["expr"]), title
        assert "{{queue}}" in target["legendFormat"], title
    grid = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in panels.values()]
    assert len(grid) == len(set(grid)), "two panels at one place"


def test_compose_gives_replicas_and_producer_one_number_of_queues() -> None:
    """docker-compose.yml passes TENURE_QUEUES to every replica and to the producer, the same value, 1 unless the
    environment sets it (read from the file itself, anchors merged: docker does not run here)."""
    services = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"]
    wanted = "${TENURE_QUEUES:-1}"
    assert {name: services[name]["environment"]["TENURE_QUEUES"] for name in (*REPLICAS, "producer")} == \
        dict.fromkeys((*REPLICAS, "producer"), wanted)


def test_grafana_provisioning_points_at_prometheus_and_the_dashboards() -> None:
    """The provisioned datasource has the uid the dashboard uses; the provider loads the mounted folder."""
    datasources = yaml.safe_load(
        (GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml").read_text(encoding="utf-8")
    )["datasources"]
    assert [(d["uid"], d["type"], d["url"]) for d in datasources] == [
        ("prometheus", "prometheus", "http://prometheus:9090")
    ]
    providers = yaml.safe_load(
        (GRAFANA_DIR / "provisioning" / "dashboards" / "tenure.yml").read_text(encoding="utf-8")
    )["providers"]
    assert [p["options"]["path"] for p in providers] == ["/var/lib/grafana/dashboards"]


# ---------------------------------------------------------------------------------------------- live


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Gauge]]:
    """A real Prometheus scraping a stand-in replica (a prometheus_client server exporting tenure_is_leader)
    every second, with the real alerts.yml evaluated every second. Yields (Prometheus port, the gauge)."""
    if prometheus_binary() is None:
        pytest.skip("prometheus server not installed (Debian package prometheus)")
    registry = CollectorRegistry()
    leader = Gauge("tenure_is_leader", "1 while this replica leads.", registry=registry)
    leader.set(1)
    exporter_port = free_port()
    server, thread = start_http_server(exporter_port, addr="127.0.0.1", registry=registry)
    config = scrape_config([f"127.0.0.1:{exporter_port}"], {"replica": "stand-in"})
    port = free_port()
    try:
        with running_prometheus(config, tmp_path_factory.mktemp("prometheus"), port):
            yield port, leader
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _sum_of_leaders(port: int) -> float | None:
    result = query(port, "sum(tenure_is_leader)")
    return float(result[0]["value"][1]) if result else None


def _no_leader_alert(port: int) -> dict[str, Any] | None:
    return next((a for a in alerts(port) if a["labels"]["alertname"] == "TenureNoLeader"), None)


@needs_prometheus
@pytest.mark.timeout(60)
def test_prometheus_sees_the_leader_and_no_leader_goes_pending(live: tuple[int, Gauge]) -> None:
    """A real Prometheus scrapes a leader (sum(tenure_is_leader) == 1, no TenureNoLeader); once the gauge
    drops to 0 the real TenureNoLeader rule goes pending (it fires only after 40 s)."""
    port, leader = live
    leader.set(1)
    # Before the first scrape the rule sees absent(tenure_is_leader) and goes pending; it must clear once the
    # leader is scraped and the rule evaluated again.
    wait_for(
        lambda: True if _sum_of_leaders(port) == 1.0 and _no_leader_alert(port) is None else None,
        20,
        "sum(tenure_is_leader) == 1 and no TenureNoLeader alert",
        interval_s=0.2,
    )
    leader.set(0)
    alert = wait_for(lambda: _no_leader_alert(port), 20, "TenureNoLeader pending", interval_s=0.2)
    assert alert["state"] == "pending"
    assert alert["labels"]["severity"] == "critical"
    leader.set(1)


@needs_prometheus
@pytest.mark.timeout(60)
def test_dashboard_and_alert_queries_are_valid_promql(live: tuple[int, Gauge]) -> None:
    """Every dashboard query (Grafana's range variables substituted) and every alert expression is accepted by
    the real Prometheus query API."""
    port, _ = live
    exprs = [_grafana_to_promql(expr) for expr in _dashboard_exprs()]
    exprs += [rule["expr"] for rule in _alert_rules().values()]
    refused = []
    for expr in exprs:
        try:
            query(port, expr)
        except PrometheusError as exc:  # the query does not parse, or Prometheus cannot evaluate it
            refused.append(f"{expr}: {exc}")
    assert exprs and not refused, refused
