"""A free loopback TCP port on this machine: for a replica's metrics, a test's server, an address nobody answers."""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]

#: Ports drawn from here up to the kernel's ephemeral range: above the ZooKeeper ensembles' client, quorum and
#: election ports (``free_base_port``: 10000–20000, plus 1000 and 2000).
_LOW = 23000
_DRAWS = 200


def free_port() -> int:
    """A loopback TCP port nobody holds right now, drawn below the kernel's ephemeral range.

    The caller binds it later (a replica process, seconds on). A port from the ephemeral range (``bind`` to 0) can
    be handed out meanwhile as an outgoing connection's source port, or to another ``bind`` to 0: CI saw a replica's
    metrics port taken so. Below that range only an explicit ``bind`` takes a port.
    """
    high = _ephemeral_start() - 1
    draw = random.SystemRandom()
    for _ in range(_DRAWS if high > _LOW else 0):
        port = draw.randint(_LOW, high)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # no room below the ephemeral range, or all of it held: let the kernel choose
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
