"""``tenure replay``: ask the group's leader to feed set-aside records back into the output, past their keys' order.

The request is a file beside the set-aside batch (``tenure.career.set_aside`` says what the leader does with it);
a wake-up tick in the queue's ``landing/`` makes the leader run a batch soon even when no record arrives (a Redis
topic's leader replays at its next batch, when an entry arrives). In a topic
of several queues, each queue has its own set-aside batches (``set-aside/queue=<k>/``), its leader replays them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tenure.career.identity import read_topic
from tenure.career.queue import TICK_SUFFIX
from tenure.career.set_aside import REPLAY_REQUEST, published, read_set_aside, write_json
from tenure.career.spark._layout import Layout
from tenure.errors import TenureError

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
                   queue_dir: str | os.PathLike[str] | None = None, queue: int | None = None) -> Requested:
    """Ask for set-aside ``batches`` of ``data_root``'s queue ``queue`` to be replayed; a tick in the queue's
    ``landing/`` wakes its leader.

    Raises:
        ReplayError: a batch is not set aside there, already replayed, or already asked for (naming it and what
            to do); the topic has several queues and ``queue`` is None.
        ConfigError: ``queue`` is not one of the topic's.
    """
    root = Path(data_root)
    topic = read_topic(Path(queue_dir) if queue_dir is not None else root)
    queues = 1 if topic is None else topic.queues
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
    if landing.is_dir():  # a group reading a Redis topic has none: its next batch (at the next entry) replays
        name = f"tenure-replay-{time.time_ns()}{TICK_SUFFIX}"
        (landing / f".{name}").write_bytes(b"tick\n")
        (landing / f".{name}").replace(landing / name)
    return Requested(sorted(batches), records)
