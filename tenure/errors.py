"""The exception hierarchy of every tenure room, the floor under ``election/``: each error names the problem and the
fix in one line, and every layer raises and catches these same types."""

from __future__ import annotations

__all__ = [
    "CommitOutcomeUnknown",
    "ConfigError",
    "ElectionError",
    "Fenced",
    "NotLeader",
    "TenureError",
    "Unresponsive",
    "ZooKeeperDenied",
    "ZooKeeperUnavailable",
]


class TenureError(Exception):
    """Root of every error tenure raises on purpose; messages say what happened and what to do."""


class ConfigError(TenureError, ValueError):
    """A setting that cannot work; the message names the setting, the value and the fix.

    Raised where each setting is defined and validated (the election's, the career's, the replica's own), so
    one rule holds everywhere. A ``ValueError`` too: a setting that cannot work is a bad value.
    """


class ElectionError(TenureError):
    """The election could not proceed (for example ZooKeeper refused an operation we cannot retry)."""


class ZooKeeperUnavailable(ElectionError):
    """ZooKeeper did not answer: the connection was lost, the session expired, the client was closed, or a call
    timed out. Raised for kazoo's own errors at the election's boundary, so no caller sees kazoo's types; the
    election itself rides out such failures (it suspends, rejoins), a caller retries or ends its step."""


class ZooKeeperDenied(ElectionError):
    """ZooKeeper refused a call for want of the right credential (NoAuth, AuthFailed): the group's znodes carry
    a digest ACL and the client did not authenticate with its credential (``--zk-auth user:password``)."""


class CommitOutcomeUnknown(ElectionError):
    """A fenced write (a commit, the handover record) was sent but its reply was lost, and reading the record
    back did not tell whether it applied. The term cannot know what it wrote: it ends (without blaming the
    career), and the next term's inauguration recovers from what is stored."""


class NotLeader(TenureError):
    """An operation that needs leadership was attempted while not leading (or while suspended)."""


class Fenced(TenureError):
    """A fenced commit was rejected: the caller's election node is gone, the commit record moved on,
    or a higher epoch has already committed. The caller must stop writing and hand over."""


class Unresponsive(TenureError):
    """A call did not answer within its deadline: a frozen JVM, a hung file system, a wedged native call.

    Raised by the helpers that run such calls off the caller's thread (``career.call_within``,
    ``career.Probe``); the call itself may still be running, abandoned, on its helper thread.
    """
