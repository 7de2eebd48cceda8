"""A free loopback TCP port on this machine: for a replica's metrics, a test's server, an address nobody answers."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A loopback TCP port nobody holds right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
