"""The producer library: :class:`Producer` buffers records and writes them as batch files in the ``landing/`` of
each record's queue.

Each batch file is written by :mod:`~tenure.service.ops._produce._atomic`'s steps and retried per :class:`WriteRetry`
(the retry of a file write, not to be confused with the consumer's per-record retry,
``tenure.career.spark._retry.RetryPolicy``).
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import tenacity

from tenure.career.identity import ensure_topic, read_topic
from tenure.career.queue import QUEUE_SUFFIX, QueueLayout, check_queue, queue_of, queue_of_line
from tenure.errors import TenureError
from tenure.service.ops._produce._atomic import fsync_dir, join_lines, write_hidden_then_rename

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_RECORDS",
    "DEFAULT_FLUSH_INTERVAL_S",
    "AckCallback",
    "Producer",
    "ProducerError",
    "WriteRetry",
]

DEFAULT_BATCH_RECORDS = 1000
DEFAULT_BATCH_BYTES = 4 << 20
DEFAULT_FLUSH_INTERVAL_S = 0.5

AckCallback = Callable[[Path, int], None]
"""Called with (durable file, lines in it) once a file is fsynced, renamed and its directory fsynced."""


class ProducerError(TenureError):
    """A batch file could not be made durable after every retry; its records stay buffered, none dropped."""


@dataclass(frozen=True)
class WriteRetry:
    """How a failed batch-file write is retried: exponential back-off, bounded attempts (through ``tenacity``).

    Example::

        Producer("/srv/tenure", retry=WriteRetry(max_attempts=20, max_backoff_s=10.0))  # rides out about 2 min

    Attributes:
        max_attempts: attempts per flush before :class:`ProducerError` (default 8, about 11 s with the
            default back-off). Higher rides out longer outages but blocks ``send()`` for longer meanwhile.
        initial_backoff_s: the first wait (default 0.1 s); each next wait doubles.
        max_backoff_s: the cap on one wait (default 5 s).
    """

    max_attempts: int = 8
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts={self.max_attempts} must be at least 1")
        if self.initial_backoff_s < 0 or self.max_backoff_s < self.initial_backoff_s:
            raise ValueError(
                f"initial_backoff_s={self.initial_backoff_s} and max_backoff_s={self.max_backoff_s} need "
                "0 <= initial_backoff_s <= max_backoff_s"
            )


@dataclass
class _Batch:
    name: str
    data: bytes
    lines: int
    queue: int = 0
    renamed: bool = False  # once renamed, a retry only has the directory fsync left to do


@dataclass
class _Buffer:
    """One queue's lines not yet cut into a file."""

    lines: list[bytes]
    size: int = 0
    first_at: float = 0.0  # when its oldest line came


class Producer:
    """Buffers records and writes them to their queue's ``landing/`` as batch files, atomically and durably.

    The queue folder's topic (``_topic.json``) says how many queues it has (one without it): a record goes to its
    key's queue (:func:`tenure.career.queue.queue_of`), ``<data_root>/landing/`` for a topic of one,
    ``<data_root>/queues/<k>/landing/`` for queue k of more; each queue's lines are cut into files of their own.

    A batch file is cut when a queue's ``batch_records`` lines or ``batch_bytes`` bytes are buffered, or when its
    oldest buffered line is ``flush_interval_s`` old (checked on ``send()`` and by a background thread), or on
    ``flush()``/``close()`` (one file per queue that has lines). Each file is written under a hidden name, fsynced,
    renamed, and the directory
    fsynced; only then are its lines acknowledged (``acked``, ``on_ack``). A failed write (disk full,
    directory gone, permission denied, any ``OSError``) is retried with exponential back-off, logged as
    ``write_failed``, and after ``retry.max_attempts`` raises :class:`ProducerError` — with every record still
    buffered, in order, for the next ``flush()``. Acknowledged data is never dropped; unacknowledged data
    lives in memory and dies with the process.

    File names sort in production order: ``p<start-ms>-<pid>-<counter>.jsonl``, the counter shared by the queues
    (no two files of a run share a name). The producer never recreates a ``landing/`` that vanished after start-up:
    that may be an unmounted volume, and writing into the mount point would hide the data; it retries until the
    folder is back, then fails clearly.

    Thread-safe; ``send()`` blocks while a write (and its retries) is in progress, which is the back-pressure.

    Example:
        >>> with Producer("/srv/tenure", batch_records=500) as producer:  # doctest: +SKIP
        ...     producer.send({"id": "o-1", "key": "acct-7", "seq": 1, "ts": 1700000000000, "payload": {}})
        >>> producer.acked  # doctest: +SKIP
        1
    """

    def __init__(
        self,
        data_root: str | os.PathLike[str],
        *,
        queues: int | None = None,
        batch_records: int = DEFAULT_BATCH_RECORDS,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        retry: WriteRetry | None = None,
        on_ack: AckCallback | None = None,
        autoflush: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Create each queue's ``landing/`` if needed and start the interval flusher.

        Args:
            data_root: the queue folder (the data root, or a shared one): files go to its queues' ``landing/``.
            queues: the topic's number of queues (``--queues``), checked against its ``_topic.json``, or written
                there if it has none; None: the file's (without one, a topic of one queue, and none is written).
            batch_records: cut a file at this many lines (default 1000). Small files cost the consumer a
                listing entry and a task each; large ones delay visibility.
            batch_bytes: cut a file at this many bytes (default 4 MiB); a file may exceed it by one line.
            flush_interval_s: the longest a line waits in the buffer (default 0.5 s).
            retry: the write retry policy (default :class:`WriteRetry()`).
            on_ack: called with (file, lines) once each file is durable; runs under the producer's lock, so
                keep it short (it may call the producer again: the lock is re-entrant).
            autoflush: run the background thread that enforces ``flush_interval_s`` between sends.
            clock: monotonic seconds, for buffer age.
            wall_clock: epoch seconds, for the file-name prefix.
            sleep: the back-off sleep (tests pass a fast one).

        Raises:
            ConfigError: ``queues`` is not the topic's number, or its ``_topic.json`` is unreadable.
            ProducerError: a ``landing/`` cannot be created.
        """
        if batch_records < 1:
            raise ValueError(f"batch_records={batch_records} must be at least 1")
        if batch_bytes < 1:
            raise ValueError(f"batch_bytes={batch_bytes} must be at least 1")
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s={flush_interval_s} must be positive")
        topic = read_topic(Path(data_root)) if queues is None else ensure_topic(Path(data_root), queues)
        self._queues = 1 if topic is None else topic.queues
        self._landings = [queue.landing for queue in QueueLayout.each(Path(data_root), self._queues)]
        for landing in self._landings:
            try:
                landing.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ProducerError(f"cannot create the landing folder {landing}: {exc}") from exc
        self._batch_records = batch_records
        self._batch_bytes = batch_bytes
        self._interval_s = flush_interval_s
        self._retry = retry or WriteRetry()
        self._on_ack = on_ack
        self._clock = clock
        self._sleep = sleep
        self._prefix = f"p{int(wall_clock() * 1000):013d}-{os.getpid():07d}"
        self._counter = 0
        self._lock = threading.RLock()
        self._buffers = [_Buffer([]) for _ in self._landings]
        self._pending: deque[_Batch] = deque()
        self._acked = 0
        self._files = 0
        self._bytes = 0
        self._failures = 0
        self._closed = False
        where = {"landing": str(self._landings[0])} if self._queues == 1 else {"topic": str(data_root)}
        self._log = structlog.get_logger("tenure.producer").bind(**where)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if autoflush:
            self._thread = threading.Thread(target=self._autoflush, name="tenure-producer-flush", daemon=True)
            self._thread.start()

    # -- public surface -------------------------------------------------------------------------------------

    @property
    def queues(self) -> int:
        """The topic's number of queues."""
        return self._queues

    @property
    def landing(self) -> Path:
        """The folder files are renamed into: queue 0's (a topic of one queue's only)."""
        return self._landings[0]

    @property
    def landings(self) -> list[Path]:
        """Each queue's folder files are renamed into, by number."""
        return list(self._landings)

    @property
    def acked(self) -> int:
        """Lines acknowledged: in files that are durable (fsynced, renamed, directory fsynced)."""
        with self._lock:
            return self._acked

    @property
    def pending(self) -> int:
        """Lines sent but not yet acknowledged (buffered, or in a batch whose write is failing)."""
        with self._lock:
            return self._buffered() + sum(b.lines for b in self._pending)

    @property
    def files_written(self) -> int:
        """Durable files written so far (empty files included)."""
        with self._lock:
            return self._files

    @property
    def bytes_written(self) -> int:
        """Bytes in durable files so far."""
        with self._lock:
            return self._bytes

    @property
    def write_failures(self) -> int:
        """Failed write attempts so far (each one logged as ``write_failed``)."""
        with self._lock:
            return self._failures

    def send(self, record: Mapping[str, Any]) -> None:
        """Buffer one record as a JSON line (compact, UTF-8) for its key's queue; the record is not validated here.

        Raises:
            ValueError: the record is not JSON-serialisable (NaN and lone surrogates included), or, in a topic of
                several queues, has no string ``key`` to route it by.
            ProducerError: a threshold was reached and the write failed after every retry.
        """
        try:
            line = json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            raise ValueError(f"record is not serialisable as a JSON line: {exc}") from exc
        key = record.get("key")
        if self._queues > 1 and not isinstance(key, str):
            raise ValueError(f"record has no string key ({key!r}) to route it to one of {self._queues} queues")
        self.send_raw(line, queue=queue_of(key, self._queues) if isinstance(key, str) else 0)

    def send_raw(self, line: bytes, *, queue: int | None = None) -> None:
        """Buffer one line as given (bad lines included) for ``queue``; the producer adds the ``\\n``.

        Args:
            line: the line, without its ``\\n``.
            queue: the queue it goes to; None: its key's, when it is a JSON object with a string ``key``, else
                queue 0 (a topic of one queue: always 0).

        Raises:
            ValueError: the line contains ``\\n``.
            ConfigError: ``queue`` is not one of the topic's.
            ProducerError: a threshold was reached and the write failed after every retry.
        """
        if b"\n" in line:
            raise ValueError(f"a line must not contain b'\\n': {line[:80]!r}")
        index = queue_of_line(line, self._queues) if queue is None else check_queue(queue, self._queues)
        with self._lock:
            self._check_open()
            buffer = self._buffers[index]
            if not buffer.lines:
                buffer.first_at = self._clock()
            buffer.lines.append(line + b"\n")
            buffer.size += len(line) + 1
            if (
                len(buffer.lines) >= self._batch_records
                or buffer.size >= self._batch_bytes
                or self._clock() - buffer.first_at >= self._interval_s
            ):
                self._cut_locked(index)
                self._drain_locked()

    def write_file(self, lines: Sequence[bytes], *, queue: int = 0) -> Path:
        """Write exactly ``lines`` as the next file of ``queue`` (zero-byte if empty), with retries, and return it.

        The queue's buffered lines are written first, so that file names keep production order; an empty file has
        no order to keep, so it leaves the buffer alone (and batches stay full).
        """
        data = join_lines(lines)
        index = check_queue(queue, self._queues)
        with self._lock:
            self._check_open()
            if lines:
                self._cut_locked(index)
            batch = _Batch(self._next_name(), data, len(lines), index)
            self._pending.append(batch)
            self._drain_locked()
            return self._landings[index] / batch.name

    def flush(self) -> None:
        """Write everything buffered now; returns once it is durable and acknowledged.

        Raises:
            ProducerError: a write failed after every retry (the data stays buffered; call again later).
        """
        with self._lock:
            self._flush_locked()

    def close(self) -> None:
        """Stop the interval flusher and flush; idempotent.

        Raises:
            ProducerError: the final flush failed; the unacknowledged lines are reported in the message.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._closed:
                return
            self._flush_locked()
            self._closed = True

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ProducerError(f"producer for {self._landings[0]} is closed")

    def _buffered(self) -> int:
        return sum(len(buffer.lines) for buffer in self._buffers)

    def _next_name(self) -> str:
        self._counter += 1
        return f"{self._prefix}-{self._counter:08d}{QUEUE_SUFFIX}"

    def _cut_locked(self, queue: int) -> None:
        buffer = self._buffers[queue]
        if buffer.lines:
            self._pending.append(_Batch(self._next_name(), b"".join(buffer.lines), len(buffer.lines), queue))
            self._buffers[queue] = _Buffer([])

    def _flush_locked(self) -> None:
        for queue in range(self._queues):
            self._cut_locked(queue)
        self._drain_locked()

    def _drain_locked(self) -> None:
        """Write pending batches oldest first, so files become visible in production order."""
        while self._pending:
            batch = self._pending[0]
            self._write_with_retry(batch)
            self._pending.popleft()
            self._acked += batch.lines
            self._files += 1
            self._bytes += len(batch.data)
            self._log.debug("file_written", file=batch.name, lines=batch.lines, bytes=len(batch.data),
                            **({"queue": batch.queue} if self._queues > 1 else {}))
            if self._on_ack is not None:
                self._on_ack(self._landings[batch.queue] / batch.name, batch.lines)

    def _write_once(self, batch: _Batch) -> None:
        landing = self._landings[batch.queue]
        final = landing / batch.name
        if not batch.renamed:
            write_hidden_then_rename(landing, batch.name, batch.data)
            batch.renamed = True
        fsync_dir(landing)
        if not final.exists():
            # The folder vanished (and maybe came back) between rename and directory fsync: the file went with
            # it, so the whole write must be redone. Worst case the consumer saw the first copy too: a
            # repeated file carries repeated ids, which the pipeline drops — a loss would be worse.
            batch.renamed = False
            raise FileNotFoundError(errno.ENOENT, "file vanished before its folder was fsynced", str(final))

    def _write_with_retry(self, batch: _Batch) -> None:
        policy = self._retry
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(policy.max_attempts),
            wait=tenacity.wait_exponential(multiplier=policy.initial_backoff_s, max=policy.max_backoff_s),
            retry=tenacity.retry_if_exception_type(OSError),
            sleep=self._sleep,
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    try:
                        self._write_once(batch)
                    except OSError as exc:
                        self._failures += 1
                        self._log.warning(
                            "write_failed", file=batch.name, lines=batch.lines,
                            attempt=attempt.retry_state.attempt_number, max_attempts=policy.max_attempts,
                            errno=errno.errorcode.get(exc.errno or 0, exc.errno),
                            error=exc.strerror or str(exc),
                        )
                        raise
        except OSError as exc:
            pending = self._buffered() + sum(b.lines for b in self._pending)
            self._log.error("write_gave_up", file=batch.name, attempts=policy.max_attempts, pending=pending)
            raise ProducerError(
                f"could not write {self._landings[batch.queue] / batch.name} after {policy.max_attempts} attempts: "
                f"{exc}; {pending} unacknowledged lines stay buffered (nothing acknowledged is lost) — free space, "
                f"restore the folder or its permissions, then flush again"
            ) from exc

    def _autoflush(self) -> None:
        """Enforce ``flush_interval_s`` when no ``send()`` comes along to do it."""
        while not self._stop.wait(self._interval_s / 2):
            with self._lock:
                now = self._clock()
                due = [k for k, buffer in enumerate(self._buffers)
                       if buffer.lines and now - buffer.first_at >= self._interval_s]
                if not (due or self._pending) or self._closed:
                    continue
                try:
                    for queue in due:
                        self._cut_locked(queue)
                    self._drain_locked()
                except ProducerError as exc:
                    # Already logged per attempt; the next send()/flush() retries and raises to the caller.
                    self._log.debug("autoflush_failed", error=str(exc))
