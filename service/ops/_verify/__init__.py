"""``tenure verify``: audits a data root's output against its queue — exactly once (I2), per-key order (I3).

The audit reads the files alone: the queue (by :mod:`tenure.career.queue`'s rules, independently of the consumer), the
Parquet output, and what the group has read (its marks and checkpoint: lag is not loss); given the group's
committed batch (``--zk``), it checks the output against it. ``_files`` finds and reads them, ``_scan`` tallies
each input, ``_content`` and ``_late`` check rows against their queue lines, ``_audit`` reconciles it all into a
``_report``; ``_redis`` reads a Redis topic's streams and accounts for the entries trimmed from them.
"""

from tenure.service.ops._verify._audit import VERIFIED, GroupCommits, read_committed_batches, verify
from tenure.service.ops._verify._content import CONTENT_FIELDS
from tenure.service.ops._verify._files import VerifyError, check_data_root, iter_queue_files
from tenure.service.ops._verify._late import LATE_REASON
from tenure.service.ops._verify._redis import StreamLine, account_topic, stream_lines
from tenure.service.ops._verify._report import VerifyReport

__all__ = [
    "CONTENT_FIELDS",
    "LATE_REASON",
    "VERIFIED",
    "GroupCommits",
    "StreamLine",
    "VerifyError",
    "VerifyReport",
    "account_topic",
    "check_data_root",
    "iter_queue_files",
    "read_committed_batches",
    "stream_lines",
    "verify",
]
