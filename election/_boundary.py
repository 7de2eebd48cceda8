"""ZooKeeper's errors turned into the product's at the election's boundary: a public call of ``election`` raises
``TenureError``s only, never kazoo's, so no caller outside ``election/`` needs kazoo to handle a failure."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kazoo.exceptions import (
    AuthFailedError,
    ConnectionDropped,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    OperationTimeoutError,
    RequestTimeoutError,
    SessionExpiredError,
    ZookeeperStoppedError,
)
from kazoo.handlers.threading import KazooTimeoutError

from tenure.errors import ElectionError, ZooKeeperDenied, ZooKeeperUnavailable

__all__ = ["UNAVAILABLE", "zookeeper_errors"]

#: What says ZooKeeper did not answer: the connection or the session is gone (``ConnectionClosedError`` is a
#: ``SessionExpiredError``), the client is stopped, or a call timed out (the threading handler's timeout is no
#: ``KazooException``).
UNAVAILABLE: tuple[type[BaseException], ...] = (
    ConnectionLoss, SessionExpiredError, ConnectionDropped, ZookeeperStoppedError, OperationTimeoutError,
    RequestTimeoutError, KazooTimeoutError)
_DENIED = (NoAuthError, AuthFailedError)


def _named(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def zookeeper_errors(what: str) -> Iterator[None]:
    """Run ZooKeeper calls doing ``what`` (a phrase naming the group and the step), raising the product's errors.

    Raises:
        ZooKeeperUnavailable: the connection or session was lost, the client stopped, or a call timed out.
        ZooKeeperDenied: the znodes' ACL refused this client's credential.
        ElectionError: any other refusal of ZooKeeper's (a node missing or present against the step's plan …).

    The product's own errors (``Fenced``, ``CommitOutcomeUnknown``, ``NotLeader`` …) pass through unchanged.
    """
    try:
        yield
    except UNAVAILABLE as exc:
        raise ZooKeeperUnavailable(f"{what}: ZooKeeper did not answer ({_named(exc)}): check that a quorum of the "
                                   "ensemble serves and that this host reaches it (--zk)") from exc
    except _DENIED as exc:
        raise ZooKeeperDenied(f"{what}: ZooKeeper denied it ({type(exc).__name__}): connect with the credential the "
                              "group's znodes were created with (--zk-auth user:password, or TENURE_ZK_AUTH)") from exc
    except KazooException as exc:
        raise ElectionError(f"{what}: ZooKeeper refused it ({_named(exc)})") from exc
