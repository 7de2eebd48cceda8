"""The data root's layout: where each output, checkpoint, staging folder and snapshot lives, and the names a batch's
files get (ARCHITECTURE.md, "Data root layout"); the queue's own part is :class:`tenure.career.queue.QueueLayout`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tenure.career.output import CHECKPOINT, DEAD_LETTER, ORDER, QUARANTINE, RETRY, SET_ASIDE, TABLE
from tenure.career.queue import QueueLayout

__all__ = ["EPOCH_PREFIX", "Layout", "epoch_of", "published_name"]

EPOCH_PREFIX = "epoch="
"""How a term's folder is named: ``epoch=<e>`` (its checkpoint, its staging)."""


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
    """Where everything lives under a data root (ARCHITECTURE.md, "Data root layout").

    ``table/`` and ``quarantine/`` hold flat part files named ``batch-<B, 12 digits>-part-….parquet``, so
    ``spark.read.parquet`` and ``pyarrow.dataset`` read them without options; staging sits under
    ``_staging/epoch=<e>/batch=<B>/``, which both readers skip (a leading ``_``).

    The queue — ``landing/``, ``archive/`` and the groups' consumption marks ``consumed/<group>/``, laid out as
    :class:`tenure.career.queue.QueueLayout` says — lives under ``queue_root``, which several consumer groups may
    share; it defaults to the data root.
    """

    root: Path
    queue_root: Path | None = None

    @property
    def queue(self) -> QueueLayout:
        """The queue: under ``queue_root``, or under the data root when no shared queue is configured."""
        return QueueLayout(self.root if self.queue_root is None else self.queue_root)

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
        """On a cluster, each term's application id (``_cluster``): what a new leader may kill."""
        return self.root / "_applications"

    @property
    def standby(self) -> Path:
        """On a cluster, the scratch data roots of followers' warm-ups (executors must see them too)."""
        return self.root / "_standby"

    @property
    def checkpoint(self) -> Path:
        """Spark's checkpoints: one ``epoch=<e>`` folder per term (see :func:`adopt_checkpoint`)."""
        return self.root / CHECKPOINT

    @property
    def order(self) -> Path:
        """Per-key high-water marks: the highest ``seq`` published for each key (``tenure.career.spark._order``)."""
        return self.root / ORDER

    def term_checkpoint(self, epoch: int) -> Path:
        """``checkpoint/epoch=<e>``: the Spark checkpoint that term ``epoch`` reads and writes, and no other."""
        return self.checkpoint / f"{EPOCH_PREFIX}{epoch}"

    @property
    def retry(self) -> Path:
        return self.root / RETRY

    @property
    def dead_letter(self) -> Path:
        return self.root / DEAD_LETTER

    @property
    def set_aside(self) -> Path:
        """Poison batches set aside: each one's queue files and a manifest (``tenure.career.spark._set_aside``)."""
        return self.root / SET_ASIDE

    def outputs(self) -> dict[str, Path]:
        """The folders a commit record's ``staged`` entries publish into, by entry name."""
        return {"table": self.table, "quarantine": self.quarantine, "retry": self.retry,
                "dead_letter": self.dead_letter, "order": self.order, "set_aside": self.set_aside}

    def delta_outputs(self) -> dict[str, Path]:
        """The outputs that are Delta tables (``tenure.career.output``), by their commit record ``staged`` name."""
        return {"table": self.table, "quarantine": self.quarantine, "dead_letter": self.dead_letter}

    def staging(self, output: Path, epoch: int, batch_id: int) -> Path:
        """``<output>/_staging/epoch=<e>/batch=<B>``."""
        return output / "_staging" / f"{EPOCH_PREFIX}{epoch}" / f"batch={batch_id}"

    def relative(self, path: Path) -> str:
        """A path as stored in the commit record: relative to the data root (the root may be mounted elsewhere)."""
        return path.relative_to(self.root).as_posix()

    def resolve(self, stored: str) -> Path:
        return self.root / stored


def published_name(batch_id: int, part: str) -> str:
    """The name a staged part file gets in the output folder."""
    return f"batch-{batch_id:012d}-{part}"
