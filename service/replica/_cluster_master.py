"""A Spark standalone master's applications through its web UI: what a new leader needs to free the cores a
paused leader's application holds (``tenure.career.spark._cluster`` decides which)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tenure.errors import ConfigError
from tenure.settings import setting

__all__ = ["MasterSettings", "StandaloneMaster", "master_webuis"]

_WEBUI_PORT = 8080  # the standalone master's default (spark.master.ui.port)
_CSRF_TOKEN = re.compile(r'name="csrfToken" value="([^"]+)"')
_KILL_FIX = "set spark.ui.killEnabled=true on the master"
_NO_KILL_HANDLER = (404, 405)  # what a master with killing disabled answers: it serves no kill link


@dataclass(frozen=True, kw_only=True)
class MasterSettings:
    """How a new leader reaches a Spark standalone master's web UI (``tenure run``'s flags of the same names).

    Example::

        MasterSettings().request_timeout_s(probe_timeout_s=10.0)  # 2.0: a quarter of the probe, at most 2 s
    """

    spark_master_webui: str | None = setting(
        None, default_text="port 8080 on each master host", help="A spark:// master's web UI, "
        "http://host:port[,…]. A new leader kills there the applications of earlier terms (a paused leader's), so "
        "their cores come free.")
    master_request_share: float = setting(
        0.25, unit="share of probe_timeout_s", help="Each request to the master's web UI (its applications, a "
        "kill, the check that followed) is bounded by this share of the probe timeout, at most "
        "master_request_max_s: a reclaim makes a few of them within one probe's deadline.",
        hazard="Near 1 one unanswered request uses up the whole probe, and the reclaim is put off.")
    master_request_max_s: float = setting(2.0, unit="s", help="The most one request to the master's web UI may take.")

    def __post_init__(self) -> None:
        if not 0 < self.master_request_share <= 1:
            raise ConfigError(f"master_request_share={self.master_request_share:g} is not a share: choose a value "
                              "above 0 and at most 1")
        if self.master_request_max_s <= 0:
            raise ConfigError(f"master_request_max_s={self.master_request_max_s:g} is not above 0 seconds; raise it")

    def request_timeout_s(self, probe_timeout_s: float) -> float:
        """The bound of each request to the master, given the probe timeout that bounds the whole reclaim."""
        return min(self.master_request_max_s, self.master_request_share * probe_timeout_s)


def master_webuis(spark_master: str, webui: str | None) -> list[str]:
    """The web UI of each master ``spark_master`` names: ``webui`` (comma-separated) if given, else port 8080 on
    each host of a ``spark://host:port[,host:port…]`` URL (masters in standby mode included). Empty for any other
    master (``local``, ``k8s://``, ``yarn``): their applications are not reclaimed."""
    if webui:
        return [url.strip().rstrip("/") for url in webui.split(",") if url.strip()]
    if not spark_master.startswith("spark://"):
        return []
    hosts = [hostport.rsplit(":", 1)[0] for hostport in spark_master.removeprefix("spark://").split(",")]
    return [f"http://{host}:{_WEBUI_PORT}" for host in hosts if host]


class StandaloneMaster:
    """The ALIVE master among ``webuis``: its applications, and killing one (``spark.ui.killEnabled``, true by
    default, must be on). Each request is bounded by ``timeout_s``."""

    def __init__(self, webuis: Sequence[str], *, timeout_s: float) -> None:
        if not webuis:
            raise ValueError("a standalone master needs at least one web UI address")
        self._webuis = list(webuis)
        self._timeout_s = timeout_s
        self._http = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._alive_url: str | None = None  # the ALIVE master's web UI, as the last request found it

    def applications(self) -> list[tuple[str, str]]:
        """``(id, name)`` of each application the ALIVE master holds (running or waiting for cores)."""
        _url, state = self._alive()
        return [(str(app["id"]), str(app["name"])) for app in state.get("activeapps", [])]

    def kill(self, app_id: str) -> None:
        """Kill ``app_id`` as the kill link on the master's page does (with the page's CSRF token), on the master
        the last request found ALIVE, then check that it is gone.

        Raises:
            OSError: no master answered, or the master refused the kill or still holds the application (killing
                disabled on the master).
        """
        url = self._alive_url or self._alive()[0]
        refused = f"the Spark master at {url} did not kill application {app_id}"
        form = {"id": app_id, "terminate": "true"}
        with self._http.open(f"{url}/", timeout=self._timeout_s) as resp:
            token = _CSRF_TOKEN.search(resp.read().decode(errors="replace"))
        if token:  # a master that checks CSRF tokens (Spark 4.3 does) refuses a kill without the page's token
            form["csrfToken"] = token.group(1)
        body = urllib.parse.urlencode(form).encode()
        try:
            with self._http.open(urllib.request.Request(f"{url}/app/kill/", data=body, method="POST"),
                                 timeout=self._timeout_s):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code not in _NO_KILL_HANDLER:
                raise
            raise OSError(f"{refused} (HTTP {exc.code} {exc.reason}): {_KILL_FIX}") from exc
        _url, state = self._alive()
        if any(app.get("id") == app_id for app in state.get("activeapps", [])):
            raise OSError(f"{refused}: {_KILL_FIX}")

    def _alive(self) -> tuple[str, dict[str, Any]]:
        """The first web UI whose master is ALIVE, with its state (``/json/``)."""
        problems = []
        for url in self._webuis:
            try:
                with self._http.open(f"{url}/json/", timeout=self._timeout_s) as resp:
                    state: dict[str, Any] = json.loads(resp.read())
            except (OSError, ValueError) as exc:
                problems.append(f"{url}: {getattr(exc, 'reason', None) or exc}")
                continue
            if state.get("status") == "ALIVE":
                self._alive_url = url
                return url, state
            problems.append(f"{url}: status {state.get('status')}")
        raise OSError(f"no ALIVE Spark master answers at {', '.join(self._webuis)} ({'; '.join(problems)}): "
                      "check --spark-master-webui")
