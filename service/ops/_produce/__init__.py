"""``tenure produce`` and the producer library: batched, atomic, durable JSON Lines files in a queue's ``landing/``.

``_atomic`` writes one file (hidden name, fsync, rename, folder fsync), ``_writer`` is the library
(:class:`Producer`, its :class:`WriteRetry`), ``_bad_lines`` the injected bad input, ``_progress`` the progress
view and ``_driver`` the command's :func:`produce`. What a queue file must be is :mod:`tenure.career.queue`'s.
"""

from tenure.service.ops._produce._atomic import write_lines
from tenure.service.ops._produce._bad_lines import BAD_CLASSES, bad_line
from tenure.service.ops._produce._driver import ProduceSummary, produce
from tenure.service.ops._produce._writer import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_RECORDS,
    DEFAULT_FLUSH_INTERVAL_S,
    AckCallback,
    Producer,
    ProducerError,
    WriteRetry,
)

__all__ = [
    "BAD_CLASSES",
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_RECORDS",
    "DEFAULT_FLUSH_INTERVAL_S",
    "AckCallback",
    "ProduceSummary",
    "Producer",
    "ProducerError",
    "WriteRetry",
    "bad_line",
    "produce",
    "write_lines",
]
