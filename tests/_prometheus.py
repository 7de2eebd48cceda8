"""A real Prometheus server (Debian's `prometheus` binary) on loopback, for tests that scrape tenure."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from tenure.service.local import wait_for

__all__ = [
    "PrometheusError",
    "alerts",
    "prometheus_binary",
    "query",
    "running_prometheus",
    "scrape_config",
    "start_prometheus",
    "stop_prometheus",
    "wait_ready",
]

T = TypeVar("T")

# Loopback only, and never through a proxy from the environment (urllib honours http_proxy by default).
ALERT_RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "alerts.yml"
"""tenure's alert rules, as shipped."""

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PrometheusError(RuntimeError):
    """The Prometheus server did not start, or its HTTP API answered with an error."""


def prometheus_binary() -> str | None:
    """Returns the path of the `prometheus` server binary, or None when it is not installed."""
    return shutil.which("prometheus")


#: How long a Prometheus start may take to answer /-/ready. It is a deadline for the machine, not a claim about
#: the product: on this host, with its page cache just reclaimed, a start was seen to write no log line at all
#: within 30 s (the binary and its libraries read back from disk while two test workers ran).
READY_TIMEOUT_S = 120.0

def scrape_config(targets: list[str], labels: dict[str, str] | None = None) -> str:
    """A Prometheus configuration that scrapes ``targets`` (``host:port``) every second, with ``labels`` on their
    series, and evaluates tenure's alert rules (``ALERT_RULES``) every second."""
    target_list = ", ".join(f'"{target}"' for target in targets)
    label_block = "".join(f"\n          {name}: {value}" for name, value in (labels or {}).items())
    if label_block:
        label_block = "\n        labels:" + label_block
    return f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - {ALERT_RULES}
scrape_configs:
  - job_name: tenure
    static_configs:
      - targets: [{target_list}]{label_block}
"""


def start_prometheus(config_text: str, workdir: Path, port: int) -> subprocess.Popen[bytes]:
    """Starts Prometheus on 127.0.0.1:`port` with `config_text` as its configuration.

    The configuration, the TSDB and the server's log (`prometheus.log`) live under `workdir`. The caller owns
    the process: stop it with `stop_prometheus`, or use `running_prometheus`, which does both.

    Example:
        proc = start_prometheus(config, tmp_path / "prom", port)
        try:
            wait_ready(port, proc=proc)
            print(query(port, "up"))
        finally:
            stop_prometheus(proc)

    Raises:
        PrometheusError: the `prometheus` binary is not on PATH.
    """
    binary = prometheus_binary()
    if binary is None:
        raise PrometheusError("the prometheus binary is not on PATH; install Debian's `prometheus` package")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(config_text, encoding="utf-8")
    cmd = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=info",
    ]
    with (workdir / "prometheus.log").open("wb") as log:
        # The child keeps its own copy of the log's descriptor.
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)


def stop_prometheus(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """Stops Prometheus with SIGTERM (SIGKILL after `timeout_s`) and reaps it. Safe to call twice."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def _log_tail(workdir: Path | None, lines: int = 20) -> str:
    if workdir is None:
        return ""
    with contextlib.suppress(OSError):
        text = (workdir / "prometheus.log").read_text(encoding="utf-8", errors="replace")
        return "\n" + "\n".join(text.splitlines()[-lines:])
    return ""


def wait_ready(
    port: int,
    timeout_s: float = READY_TIMEOUT_S,
    proc: subprocess.Popen[bytes] | None = None,
    workdir: Path | None = None,
) -> None:
    """Waits until Prometheus on 127.0.0.1:`port` answers 200 on /-/ready.

    Raises:
        PrometheusError: the process exited (when `proc` is given) or `timeout_s` passed; the message carries
            the tail of its log when `workdir` is given.
    """
    url = f"http://127.0.0.1:{port}/-/ready"

    def ready() -> bool:
        if proc is not None and proc.poll() is not None:
            raise PrometheusError(f"prometheus exited with {proc.returncode} before ready{_log_tail(workdir)}")
        with contextlib.suppress(OSError), _OPENER.open(url, timeout=2) as response:
            return bool(response.status == 200)
        return False

    try:
        wait_for(ready, timeout_s, f"prometheus on port {port}", interval_s=0.1)
    except TimeoutError:
        raise PrometheusError(f"prometheus on port {port} not ready after {timeout_s} s{_log_tail(workdir)}") from None


@contextlib.contextmanager
def running_prometheus(
    config_text: str, workdir: Path, port: int, ready_timeout_s: float = READY_TIMEOUT_S
) -> Iterator[subprocess.Popen[bytes]]:
    """Runs Prometheus for the duration of a `with` block: started, ready, and always stopped and reaped.

    Example:
        with running_prometheus(config, tmp_path / "prom", port):
            assert query(port, "up")
    """
    proc = start_prometheus(config_text, workdir, port)
    try:
        wait_ready(port, ready_timeout_s, proc=proc, workdir=workdir)
        yield proc
    finally:
        stop_prometheus(proc)


def _api(port: int, path: str, params: dict[str, str] | None = None) -> Any:
    url = f"http://127.0.0.1:{port}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    try:
        with _OPENER.open(url, timeout=5) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:
        # The API answers 400/422 with a JSON body that says what is wrong with the query.
        detail = exc.read().decode("utf-8", errors="replace")
        raise PrometheusError(f"GET {url}: HTTP {exc.code}: {detail}") from exc
    if body.get("status") != "success":
        raise PrometheusError(f"GET {url}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def query(port: int, expr: str) -> list[dict[str, Any]]:
    """Evaluates `expr` now (/api/v1/query) and returns the result list (`metric` and `value` per element).

    Raises:
        PrometheusError: the query does not parse or fails.
    """
    data = _api(port, "/api/v1/query", {"query": expr})
    result: list[dict[str, Any]] = data["result"]
    return result


def alerts(port: int) -> list[dict[str, Any]]:
    """Returns the active (pending or firing) alerts from /api/v1/alerts."""
    data = _api(port, "/api/v1/alerts")
    active: list[dict[str, Any]] = data["alerts"]
    return active
