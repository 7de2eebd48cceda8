"""The replica's HTTP port under misbehaving clients: what reaches stderr and the log."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tenure.career.lifecycle import RunnerHealth
from tenure.service.local import wait_for
from tenure.service.replica import HTTP_REQUEST_FAILED, HealthServer


def _handlers_done() -> bool:
    return not any("process_request_thread" in t.name for t in threading.enumerate())


@pytest.fixture()
def server() -> Iterator[HealthServer]:
    served = HealthServer("127.0.0.1", 0, CollectorRegistry())
    yield served
    served.stop()


def test_a_client_that_hangs_up_leaves_no_traceback(server: HealthServer, capfd: pytest.CaptureFixture[str]) -> None:
    """A scraper that timed out while the replica was paused resets its connection; a traceback on stderr would
    tear the JSON log line being written at that moment (the zombie drill lost a state change to one)."""
    server.start(lambda: RunnerHealth(live=True, ready=True, leader=False, role="following"))
    for _ in range(20):
        client = socket.create_connection(("127.0.0.1", server.port))
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: tenure\r\n\r\n")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
        client.close()
    wait_for(_handlers_done, 10, "the request handlers to finish")
    assert "Traceback" not in capfd.readouterr().err


def test_a_failing_handler_is_one_log_event(server: HealthServer, capfd: pytest.CaptureFixture[str]) -> None:
    """A bug behind an endpoint is logged as ``http_request_failed`` naming the error, not printed raw."""

    def broken() -> RunnerHealth:
        raise RuntimeError("health snapshot failed")

    server.start(broken)
    with capture_logs() as logs:
        with socket.create_connection(("127.0.0.1", server.port)) as client:
            client.sendall(b"GET /livez HTTP/1.1\r\nHost: tenure\r\n\r\n")
            assert client.recv(1024) == b""  # the server closed the connection without a reply
        wait_for(_handlers_done, 10, "the request handler to finish")
    assert [(e["event"], e["error"]) for e in logs] == [
        (HTTP_REQUEST_FAILED, "RuntimeError('health snapshot failed')")]
    assert "Traceback" not in capfd.readouterr().err
