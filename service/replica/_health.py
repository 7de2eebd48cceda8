"""One HTTP port per replica: ``/metrics``, ``/livez``, ``/readyz``, ``/leader``."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from tenure.career.lifecycle import RunnerHealth

__all__ = ["HTTP_REQUEST_FAILED", "HealthServer"]

# The log events other code reads (the drill, tests, bench): named once, here where they are logged.
HTTP_REQUEST_FAILED: Final = "http_request_failed"

_log = structlog.get_logger("tenure.http")


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
            return
        checks: dict[str, Callable[[RunnerHealth], bool]] = {
            "/livez": lambda h: h.live,
            "/readyz": lambda h: h.ready,
            "/leader": lambda h: h.leader,
        }
        if path not in checks:
            self._send(404, b'{"error": "not found: try /metrics, /livez, /readyz or /leader"}\n',
                       "application/json")
            return
        health = self.server.health()
        ok = checks[path](health)
        body: dict[str, Any] = {"ok": ok, **asdict(health)}
        self._send(200 if ok else 503, (json.dumps(body) + "\n").encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging: scrapes every few seconds would drown the decisions."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry) -> None:
        self.registry = registry
        self.health: Callable[[], RunnerHealth] = lambda: RunnerHealth(live=True, ready=False, leader=False,
                                                                       role="starting")
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up is not an error: a scraper times out while this process is paused (SIGSTOP, a
        long GC) and the reply finds the socket closed. Anything else is one log event, not a traceback on
        stderr, which would tear the JSON log line being written at that moment."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            return
        _log.error(HTTP_REQUEST_FAILED, client=str(client_address[0]), error=repr(error))


class HealthServer:
    """Serves metrics and health on ``host:port`` from a daemon thread.

    Example::

        server = HealthServer("0.0.0.0", 9400, registry)   # binds now: a taken port fails here
        server.start(runner.health)
        ...
        server.stop()
    """

    def __init__(self, host: str, port: int, registry: CollectorRegistry) -> None:
        self._server = _Server((host, port), registry)
        self._thread = threading.Thread(target=self._server.serve_forever, name="tenure-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self, health: Callable[[], RunnerHealth]) -> None:
        self._server.health = health
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
