"""The ZooKeeper primitives of a fenced write: encode, create-if-missing, read, check+CAS in one transaction, read back.

Plain functions over a kazoo client, with no election state: ``Fence`` and ``Election`` build on them
(ARCHITECTURE.md "Where each guarantee is enforced").
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.security import ACL

from tenure.errors import ElectionError, Fenced

__all__ = [
    "OutcomeUnknownError",
    "encode_record",
    "ensure_record_node",
    "fenced_set",
    "lenient_object",
    "parse_record",
    "read_back",
    "read_record",
]

_READ_BACK_PAUSE_S = 0.05


class OutcomeUnknownError(Exception):
    """The transaction was sent but its reply was lost: it may or may not have applied (read it back)."""


def parse_record(raw: bytes | None) -> dict[str, Any] | None:
    """A JSON object record from znode data; ``None`` for empty data (created, never written)."""
    if not raw:
        return None
    value = json.loads(raw.decode())
    if not isinstance(value, dict):
        raise ValueError(f"record is not a JSON object: {raw[:80]!r}")
    return value


def lenient_object(raw: bytes | None) -> dict[str, Any]:
    """The JSON object in znode data read leniently: empty, unreadable or not an object is ``{}`` (an operator's
    request or a registry entry whose fields then take their defaults)."""
    try:
        data = json.loads(raw.decode()) if raw else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def encode_record(record: dict[str, Any], epoch: int) -> bytes:
    """The record as stored: the caller's fields plus ``epoch`` (ours wins), compact sorted JSON."""
    return json.dumps({**record, "epoch": epoch}, sort_keys=True, separators=(",", ":")).encode()


def ensure_record_node(client: KazooClient, path: str, *, acl: list[ACL] | None, timeout_s: float) -> None:
    """Create ``path`` empty (with the group's ACL) when missing, so a first write can CAS version 0."""
    with contextlib.suppress(NodeExistsError):
        client.create_async(path, b"", acl=acl, makepath=True).get(timeout=timeout_s)


def read_record(client: KazooClient, path: str, *, acl: list[ACL] | None, timeout_s: float,
                context: str) -> tuple[dict[str, Any] | None, int]:
    """The record at ``path`` (``None`` if never written) and its znode version, creating the node if missing.

    Raises:
        ElectionError: the node vanished again right after it was created (someone is deleting the group).
    """
    for _ in range(2):
        try:
            raw, stat = client.get_async(path).get(timeout=timeout_s)
        except NoNodeError:
            ensure_record_node(client, path, acl=acl, timeout_s=timeout_s)
            continue
        return parse_record(raw), int(stat.version)
    raise ElectionError(f"{context}: {path} vanished twice while reading it: is someone deleting the group?")


def read_back(client: KazooClient, path: str, *, timeout_s: float) -> tuple[bytes, int]:
    """The raw data and version of ``path`` after a lost reply, retrying connection blips for ``timeout_s``.

    Raises the last error when the record cannot be read within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            raw, stat = client.get_async(path).get(timeout=timeout_s)
        except (SessionExpiredError, ConnectionLoss):
            if time.monotonic() >= deadline:
                raise
            time.sleep(_READ_BACK_PAUSE_S)
            continue
        return raw, int(stat.version)


def fenced_set(client: KazooClient, *, node: str, node_version: int, target: str, data: bytes,
               expected_version: int, timeout_s: float, context: str) -> int:
    """Send ``check(node, node_version) + set_data(target, data, version=expected_version)`` as ONE transaction.

    Returns the target's new version.

    Raises:
        Fenced: the node is gone (its session ended or it was deleted) or the target's version moved.
        OutcomeUnknownError: the reply was lost.
        ElectionError: a negative ``expected_version``, an ACL refusal or another failure of the transaction.
    """
    if expected_version < 0:
        raise ElectionError(f"{context}: expected_version={expected_version} would skip the compare-and-set; "
                            "pass the version returned by the last read")
    tx = client.transaction()
    tx.check(node, node_version)
    tx.set_data(target, data, version=expected_version)
    try:
        results = tx.commit_async().get(timeout=timeout_s)
    except (SessionExpiredError, ConnectionClosedError) as exc:
        raise Fenced(f"{context}: the session is gone ({type(exc).__name__}), so node {node} is gone with it; "
                     "if the request reached ZooKeeper before that it may have applied: re-read the record") from exc
    except (ConnectionLoss, client.handler.timeout_exception) as exc:
        raise OutcomeUnknownError(str(exc) or type(exc).__name__) from exc
    check, set_result = results
    if isinstance(check, NoNodeError):
        raise Fenced(f"{context}: own election node {node} is gone (session expired or node deleted); "
                     "this leader is fenced off: stop writing and hand over")
    if isinstance(check, BadVersionError):
        raise Fenced(f"{context}: own election node {node} changed (version is no longer {node_version}); fenced")
    if isinstance(set_result, BadVersionError):
        raise Fenced(f"{context}: {target} is no longer at version {expected_version} (another writer moved it); "
                     "fenced: re-read before deciding anything")
    if isinstance(set_result, NoNodeError):
        raise Fenced(f"{context}: {target} does not exist (the group was deleted?); fenced")
    for result in results:
        if isinstance(result, NoAuthError):
            raise ElectionError(f"{context}: ZooKeeper denied the write to {target} (NoAuth): the client needs "
                                "auth_data=DigestCredential(...).auth_data() matching the group's ACL")
        if isinstance(result, Exception):
            raise ElectionError(f"{context}: transaction failed: {type(result).__name__}: {result}")
    return int(set_result.version)
