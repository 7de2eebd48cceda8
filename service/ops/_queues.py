"""A group's number of queues as operators' commands read it, and the queue an operator names with ``--queue``."""

from __future__ import annotations

from tenure.election import ZooKeeperClient, read_group_identity
from tenure.errors import ConfigError

__all__ = ["choose_queue", "group_queue_count"]


def group_queue_count(client: ZooKeeperClient, group: str, *, timeout_s: float = 10.0) -> int:
    """The number of queues ``group`` records (``/tenure/<group>/identity``); one for a group no replica of this
    release has started (from before queues, or not started yet).

    Raises:
        ZooKeeperUnavailable, ZooKeeperDenied, ElectionError: ZooKeeper failed.
    """
    identity = read_group_identity(client, group, timeout_s=timeout_s)
    return 1 if identity is None else identity.queue_count


def choose_queue(group: str, queue: int | None, queues: int) -> int:
    """The queue an operator's ``--queue`` names in ``group``, a group of ``queues``: optional (queue 0) in a group
    of one queue, required in a group of several.

    Raises:
        ConfigError: no ``--queue`` in a group of several, or one outside 0 to ``queues - 1``: one line naming the
            range.
    """
    if queues == 1:
        if queue not in (None, 0):
            raise ConfigError(f"--queue {queue}: group {group!r} has one queue, queue 0: leave out --queue or pass "
                              "--queue 0")
        return 0
    if queue is None:
        raise ConfigError(f"group {group!r} has {queues} queues: name one with --queue (0 to {queues - 1}; "
                          "`tenure status` shows who leads each)")
    if not 0 <= queue < queues:
        raise ConfigError(f"--queue {queue} is not a queue of group {group!r}, which has {queues} queues: pass "
                          f"--queue 0 to {queues - 1}")
    return queue
