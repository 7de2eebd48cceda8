"""A ZooKeeper client for the service: connected with its credential and timeouts, closed, asked whether connected.

Code outside ``election/`` holds the client only to hand it to the election's calls (``Election``, the status,
history, requests and registry reads and writes): it never calls the client itself, so kazoo stays in here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypeAlias

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from tenure.election._acl import DigestCredential
from tenure.election._boundary import zookeeper_errors
from tenure.errors import ZooKeeperUnavailable

__all__ = ["ZooKeeperClient", "connect", "connected", "disconnect", "is_connected"]

ZooKeeperClient: TypeAlias = KazooClient
"""The client the election's calls take (kazoo's); outside ``election/`` an opaque handle."""

#: A replica (and a drill's monitor) rides out an ensemble's restart: it reconnects for ever, soon.
_PERSISTENT_RETRY = {"max_tries": -1, "delay": 0.1, "max_delay": 1.0}
#: A one-off command gives up after a few tries rather than hang on a dead ensemble.
_ONE_OFF_RETRY = {"max_tries": 3}


def connect(hosts: str, *, session_timeout_s: float = 10.0, connect_timeout_s: float | None = None,
            credential: DigestCredential | None = None, read_only: bool = False,
            persistent: bool = False) -> ZooKeeperClient:
    """A started client of ``hosts``, authenticated with ``credential`` from its first connection.

    Args:
        hosts: the connect string (``host:port,host:port[/chroot]``).
        session_timeout_s: the session timeout asked of the ensemble (it may clamp it to its bounds).
        connect_timeout_s: how long to wait for the first connection. Default: ``session_timeout_s``.
        credential: the digest credential, if the group's znodes carry its ACL (``--zk-auth``).
        read_only: accept a read-only server (a command that only reads, during a partition).
        persistent: reconnect for ever with a short back-off (a replica); otherwise give up after three tries (a
            one-off command).

    Raises:
        ZooKeeperUnavailable: no server answered within ``connect_timeout_s`` (the message names the hosts).
    """
    client = KazooClient(hosts=hosts, timeout=session_timeout_s, read_only=read_only,
                         connection_retry=_PERSISTENT_RETRY if persistent else _ONE_OFF_RETRY,
                         auth_data=credential.auth_data() if credential else None)
    timeout_s = session_timeout_s if connect_timeout_s is None else connect_timeout_s
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError as exc:
        disconnect(client)
        raise ZooKeeperUnavailable(f"cannot reach ZooKeeper at {hosts} within {timeout_s:g} s: check --zk (a "
                                   "comma-separated host:port list) and that a quorum is up") from exc
    return client


def disconnect(client: ZooKeeperClient) -> None:
    """End the client's session (its ephemeral nodes go at once) and free its threads.

    Raises:
        ZooKeeperUnavailable: the client could not be stopped cleanly (its session then ends by its timeout).
    """
    with zookeeper_errors("closing the ZooKeeper client"):
        client.stop()
        client.close()


def is_connected(client: ZooKeeperClient) -> bool:
    """Whether the client is connected now (kazoo's view; the election keeps its own)."""
    return bool(client.connected)


@contextlib.contextmanager
def connected(hosts: str, *, timeout_s: float = 10.0, credential: DigestCredential | None = None,
              read_only: bool = False) -> Iterator[ZooKeeperClient]:
    """A started client for a one-off command (``connect``), disconnected at exit.

    Raises:
        ZooKeeperUnavailable: ZooKeeper cannot be reached within ``timeout_s`` (the message names the hosts).
    """
    client = connect(hosts, session_timeout_s=timeout_s, credential=credential, read_only=read_only)
    try:
        yield client
    finally:
        disconnect(client)
