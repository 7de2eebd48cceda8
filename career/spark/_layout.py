"""The data root's layout for one queue of a topic: where each output, checkpoint, staging folder and snapshot lives,
and the names a batch's files get (ARCHITECTURE.md, "Data root layout"); the queue's own part is
:class:`tenure.career.queue.QueueLayout`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tenure.career.output import (
    CHECKPOINT,
    DEAD_LETTER,
    DEDUP,
    ORDER,
    QUARANTINE,
    RETRY,
    SET_ASIDE,
    TABLE,
    QueueOutput,
)
from tenure.career.queue import QueueLayout, check_queue
from tenure.career.wake import WAKE

__all__ = ["EPOCH_PREFIX", "QUEUE_PREFIX", "Layout", "epoch_of", "published_name"]

EPOCH_PREFIX = "epoch="
"""How a term's folder is named: ``epoch=<e>`` (its checkpoint, its staging)."""

QUEUE_PREFIX = "queue="
"""How a queue's own folder in the data root is named, in a topic of several queues: ``queue=<k>``."""


def epoch_of(name: str) -> int | None:
    """``epoch=17`` → 17; anything else → None."""
    if not name.startswith(EPOCH_PREFIX):
        return None
    try:
        return int(name[len(EPOCH_PREFIX):])
    except ValueError:
        return None


@dataclass(frozen=True)
class Layout:
    """Where everything of queue ``index`` of a topic of ``queues`` lives under a data root (ARCHITECTURE.md, "Data
    root layout"): each path is built here and nowhere else.

    ``table/``, ``quarantine/`` and ``dead-letter/`` hold every queue's flat part files, named
    ``batch-<B, 12 digits>-part-….parquet`` in a topic of one queue and ``queue-<k>-batch-<B>-part-….parquet`` in a
    topic of more (:class:`tenure.career.output.QueueOutput`), so ``spark.read.parquet`` and ``pyarrow.dataset`` read
    them without options; staging sits under ``_staging/epoch=<e>/batch=<B>/`` (``_staging/queue=<k>/…`` in those
    three), which both readers skip (a leading ``_``). The checkpoint, ``order/``, ``retry/``, ``set-aside/``,
    ``dedup/`` and ``_applications/`` are the queue's own: ``checkpoint/queue=<k>/`` and so on in a topic of several
    queues, the folders themselves in a topic of one, which keeps the layout of before topics had several queues.

    The queue — ``landing/``, ``archive/`` and the groups' consumption marks ``consumed/<group>/``, laid out as
    :class:`tenure.career.queue.QueueLayout` says — lives under ``queue_root``, which several consumer groups may
    share; it defaults to the data root.

    Example:
        >>> layout = Layout(Path("/srv/t"), index=1, queues=2)
        >>> layout.landing.as_posix(), layout.term_checkpoint(7).as_posix()
        ('/srv/t/queues/1/landing', '/srv/t/checkpoint/queue=1/epoch=7')
        >>> layout.relative(layout.staging(layout.table, 7, 3))
        'table/_staging/queue=1/epoch=7/batch=3'
        >>> layout.published_name(layout.table, 3, "part-0.parquet")
        'queue-1-batch-000000000003-part-0.parquet'
    """

    root: Path
    queue_root: Path | None = None
    index: int = 0
    """The queue's number k in its topic (0 ≤ k < ``queues``)."""
    queues: int = 1
    """The topic's number of queues."""

    def __post_init__(self) -> None:
        check_queue(self.index, self.queues)

    @property
    def queue(self) -> QueueLayout:
        """The queue: under ``queue_root``, or under the data root when no shared queue is configured."""
        return QueueLayout(self.root if self.queue_root is None else self.queue_root, self.index, self.queues)

    @property
    def output(self) -> QueueOutput:
        """The queue as the Delta outputs every queue shares know it: its application id, part names, ``_queue``."""
        return QueueOutput(self.index, self.queues)

    def _own(self, folder: str) -> Path:
        """A folder of the data root that each queue of a topic of several has one of (``<folder>/queue=<k>``)."""
        return self.root / folder if self.queues == 1 else self.root / folder / f"{QUEUE_PREFIX}{self.index}"

    @property
    def landing(self) -> Path:
        return self.queue.landing

    @property
    def archive(self) -> Path:
        return self.queue.archive

    @property
    def table(self) -> Path:
        return self.root / TABLE

    @property
    def quarantine(self) -> Path:
        return self.root / QUARANTINE

    @property
    def applications(self) -> Path:
        """On a cluster, each of the queue's terms' application id (``_cluster``): what its new leader may kill."""
        return self._own("_applications")

    @property
    def standby(self) -> Path:
        """On a cluster, the scratch data roots of followers' warm-ups (executors must see them too)."""
        return self.root / "_standby"

    @property
    def checkpoint(self) -> Path:
        """The queue's Spark checkpoints: one ``epoch=<e>`` folder per term (see :func:`adopt_checkpoint`)."""
        return self._own(CHECKPOINT)

    @property
    def order(self) -> Path:
        """Per-key high-water marks: the highest ``seq`` published for each key (``tenure.career.spark._order``)."""
        return self._own(ORDER)

    @property
    def dedup(self) -> Path:
        """The dedup store's files: one per committed batch, the keys it saw first (``tenure.career.spark._dedup``)."""
        return self._own(DEDUP)

    def term_checkpoint(self, epoch: int) -> Path:
        """``<checkpoint>/epoch=<e>``: the Spark checkpoint that term ``epoch`` reads and writes, and no other."""
        return self.checkpoint / f"{EPOCH_PREFIX}{epoch}"

    @property
    def retry(self) -> Path:
        return self._own(RETRY)

    @property
    def dead_letter(self) -> Path:
        return self.root / DEAD_LETTER

    @property
    def set_aside(self) -> Path:
        """Poison batches set aside: each one's queue files and a manifest (``tenure.career.spark._set_aside``)."""
        return self._own(SET_ASIDE)

    @property
    def wake(self) -> Path:
        """The queue's wake counter (:mod:`tenure.career.wake`): what wakes a Redis topic's leader without an entry."""
        return self._own(WAKE)

    def outputs(self) -> dict[str, Path]:
        """The folders a commit record's ``staged`` entries publish into, by entry name."""
        return {"table": self.table, "quarantine": self.quarantine, "retry": self.retry,
                "dead_letter": self.dead_letter, "order": self.order, "set_aside": self.set_aside, "dedup": self.dedup}

    def delta_outputs(self) -> dict[str, Path]:
        """The outputs that are Delta tables (``tenure.career.output``), by their commit record ``staged`` name."""
        return {"table": self.table, "quarantine": self.quarantine, "dead_letter": self.dead_letter}

    def shared(self, output: Path) -> bool:
        """Whether ``output`` holds every queue's files (a Delta output of a topic of several queues)."""
        return self.queues > 1 and output in self.delta_outputs().values()

    def staging_root(self, output: Path) -> Path:
        """Where the queue's terms stage into ``output``: ``<output>/_staging``, with ``/queue=<k>`` in an output
        every queue shares (the epochs of one queue's terms say nothing of another's)."""
        base = output / "_staging"
        return base / f"{QUEUE_PREFIX}{self.index}" if self.shared(output) else base

    def staging(self, output: Path, epoch: int, batch_id: int) -> Path:
        """``<output>/_staging[/queue=<k>]/epoch=<e>/batch=<B>``."""
        return self.staging_root(output) / f"{EPOCH_PREFIX}{epoch}" / f"batch={batch_id}"

    def published_name(self, output: Path, batch_id: int, part: str) -> str:
        """The name a staged part file ``part`` of batch ``batch_id`` gets in ``output``: the queue's own in an
        output every queue shares (:meth:`tenure.career.output.QueueOutput.part_name`), else
        :func:`published_name`'s."""
        return self.output.part_name(batch_id, part) if self.shared(output) else published_name(batch_id, part)

    def relative(self, path: Path) -> str:
        """A path as stored in the commit record: relative to the data root (the root may be mounted elsewhere)."""
        return path.relative_to(self.root).as_posix()

    def resolve(self, stored: str) -> Path:
        return self.root / stored


def published_name(batch_id: int, part: str) -> str:
    """The name a staged part file gets in a folder of one queue's (``batch-<B, 12 digits>-<part>``), and in every
    output of a topic of one queue."""
    return f"batch-{batch_id:012d}-{part}"
