"""``tenure replay``: ask the group's leader to feed set-aside records back into the output, past their keys' order.

The request is a file beside the set-aside batch (``tenure.career.set_aside`` says what the leader does with it);
a wake-up makes the leader run a batch soon even when no record arrives: a tick in the queue's ``landing/``, or,
for a Redis topic's queue (no ``landing/``), its wake counter in the data root (:mod:`tenure.career.wake`). In a
topic of several queues, each queue has its own set-aside batches (``set-aside/queue=<k>/``), its leader replays
them; a Redis topic's number of queues is the topic's own, read from Redis (``--queue-url``), as the replicas
read it: a data root has no ``_topic.json`` for a Redis topic.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tenure.career.identity import read_topic
from tenure.career.output import SET_ASIDE
from tenure.career.queue import TICK_SUFFIX
from tenure.career.redis_queue import RedisTopic
from tenure.career.set_aside import REPLAY_REQUEST, published, read_set_aside, write_json
from tenure.career.spark._layout import QUEUE_PREFIX, Layout
from tenure.career.wake import wake
from tenure.errors import ConfigError, TenureError

__all__ = ["ReplayError", "Requested", "request_replay"]


class ReplayError(TenureError):
    """A replay that cannot be asked for; the message says why and what to do."""


@dataclass(frozen=True)
class Requested:
    """What ``request_replay`` asked for: the set-aside batches and their records."""

    batches: list[int]
    records: int

    def render(self) -> str:
        names = ", ".join(str(b) for b in self.batches)
        return (f"replay requested: {self.records} record{'s' if self.records != 1 else ''} of set-aside batch"
                f"{'es' if len(self.batches) != 1 else ''} {names}: the leader's next batch writes them (watch "
                "batch_committed's replayed= in its log, then `tenure verify`)")


def request_replay(data_root: str | os.PathLike[str], batches: list[int], *,
                   queue_dir: str | os.PathLike[str] | None = None, queue: int | None = None,
                   queue_url: str | None = None) -> Requested:
    """Ask for set-aside ``batches`` of ``data_root``'s queue ``queue`` to be replayed; a tick in the queue's
    ``landing/`` wakes its leader, or, without one, the queue's wake counter.

    Args:
        data_root: the group's data root.
        batches: the set-aside batches' numbers.
        queue_dir: the shared queue folder the group reads, if not the data root.
        queue: the queue whose batches these are (needed in a topic of several).
        queue_url: the Redis topic the group reads, whose number of queues is read from Redis.

    Raises:
        ReplayError: a batch is not set aside there, already replayed, or already asked for (naming it and what
            to do); the topic has several queues and ``queue`` is None; the data root holds several queues'
            set-aside batches without a ``_topic.json`` and no ``queue_url`` names their topic.
        ConfigError: ``queue`` is not one of the topic's; ``queue_dir`` and ``queue_url`` both given.
        RedisUnavailable: Redis did not answer.
    """
    root = Path(data_root)
    queues = _queue_count(root, None if queue_dir is None else Path(queue_dir), queue_url)
    if queue is None and queues > 1:
        raise ReplayError(f"the topic has {queues} queues, each with its own set-aside batches: pass --queue K "
                          f"(0 to {queues - 1})")
    layout = Layout(root, None if queue_dir is None else Path(queue_dir), queue or 0, queues)
    folder = layout.set_aside
    known = read_set_aside(folder)
    records = 0
    for batch in batches:
        found = known.get(batch)
        if found is None:
            listed = ", ".join(str(b) for b in sorted(known)) or "none"
            raise ReplayError(f"batch {batch} is not set aside in {folder} (set aside: {listed}): check --batch and "
                              "--data-root")
        if found.replayed_in is not None:
            raise ReplayError(f"batch {batch} was replayed by batch {found.replayed_in}: its records are the output's "
                              "now; nothing to do")
        if found.requested:
            raise ReplayError(f"batch {batch}'s replay is asked for already and waits for the leader's next batch: "
                              "check that a leader runs (`tenure status`)")
        records += int(found.manifest.get("records") or 0)
    for batch in batches:
        write_json(folder / published(batch, REPLAY_REQUEST), {"batch_id": batch, "requested_at": time.time()})
    landing = layout.landing
    if landing.is_dir():
        name = f"tenure-replay-{time.time_ns()}{TICK_SUFFIX}"
        (landing / f".{name}").write_bytes(b"tick\n")
        (landing / f".{name}").replace(landing / name)
    else:  # a Redis topic's queue: its stream is every group's, so the data root's wake counter wakes its leader
        wake(layout.wake)
    return Requested(sorted(batches), records)


def _queue_count(root: Path, queue_dir: Path | None, queue_url: str | None) -> int:
    """The number of queues of the topic the group reads: its Redis topic's (``<prefix>:topic``), or its queue
    folder's ``_topic.json`` (1 without one, unless the data root shows set-aside batches of several queues)."""
    if queue_url is not None:
        if queue_dir is not None:
            raise ConfigError(f"--queue-dir {queue_dir} and --queue-url name two topics: give the one the group reads")
        from tenure.career.redis_streams import connect  # redis-py: only here
        from tenure.career.redis_streams import read_topic as read_redis_topic

        topic = RedisTopic.parse(queue_url)
        client = connect(topic)
        try:
            found = read_redis_topic(client, topic)
        finally:
            client.close()
        return 1 if found is None else found.queues
    folder = read_topic(queue_dir if queue_dir is not None else root)
    if folder is not None:
        return folder.queues
    if any((root / SET_ASIDE).glob(f"{QUEUE_PREFIX}*")):
        raise ReplayError(f"{root / SET_ASIDE} holds several queues' set-aside batches but the data root has no "
                          "_topic.json: the group reads a Redis topic; pass --queue-url (or TENURE_QUEUE_URL) to "
                          "read its number of queues")
    return 1
