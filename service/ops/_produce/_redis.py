"""The producer of a Redis topic: :class:`RedisProducer` writes each record to the stream of its key's queue with
pipelined ``XADD``s (:mod:`tenure.career.redis_queue` says what an entry holds)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import redis
import structlog
import tenacity

from tenure.career.queue import check_queue, queue_of, queue_of_line
from tenure.career.redis_queue import RECORD_FIELD, RedisTopic
from tenure.career.redis_streams import RedisUnavailable, connect, ensure_topic
from tenure.service.ops._produce._writer import (
    DEFAULT_BATCH_RECORDS,
    DEFAULT_FLUSH_INTERVAL_S,
    ProducerError,
    WriteRetry,
)

__all__ = ["NOT_A_RECORD", "RedisProducer"]

NOT_A_RECORD = b"note"
"""The field of the entry :meth:`RedisProducer.write_file` writes for no line: an entry without ``record``."""

RedisAck = Callable[[str, int], None]
"""Called with (``<stream>/<entry id>`` of the last entry, entries) once a pipeline's ``XADD``s are acknowledged."""


class RedisProducer:
    """Buffers records and writes them to their key's stream of a Redis topic, one pipeline of ``XADD``s at a time.

    The topic's identity (``<prefix>:topic``) says how many queues it has, recorded by the first producer with
    ``queues`` (one when None); a record goes to the stream of its key's queue
    (:func:`tenure.career.queue.queue_of`), ``<prefix>:<k>``. Lines are buffered and sent as one pipeline when
    ``batch_records`` are buffered, when the oldest is ``flush_interval_s`` old at a ``send()``, and on
    ``flush()``/``close()``; a pipeline's entries are acknowledged (``acked``, ``on_ack``) once Redis has answered
    every ``XADD`` of it with its id, which with ``appendfsync always`` it does only after its append-only file is
    fsynced. Pipelined commands run in order, so each stream gets its records in production order.

    A pipeline that fails because Redis does not answer is sent again with back-off (``retry``), then raises
    :class:`ProducerError` with its lines still buffered. Redis may have added part of it before the connection
    broke: the repeats carry the same ids, which the consumer drops (as a file producer's repeated file).

    Example:
        >>> with RedisProducer(RedisTopic.parse("redis://127.0.0.1:6379?prefix=orders")) as producer:  # doctest: +SKIP
        ...     producer.send({"id": "o-1", "key": "acct-7", "seq": 1, "ts": 1700000000000, "payload": {}})
    """

    def __init__(
        self,
        topic: RedisTopic,
        *,
        queues: int | None = None,
        batch_records: int = DEFAULT_BATCH_RECORDS,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        retry: WriteRetry | None = None,
        on_ack: RedisAck | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Record the topic's identity if it has none, and connect.

        Raises:
            ValueError: ``batch_records`` or ``flush_interval_s`` out of range.
            ConfigError: ``queues`` is not the topic's recorded number.
            RedisUnavailable: Redis does not answer.
        """
        if batch_records < 1:
            raise ValueError(f"batch_records={batch_records} must be at least 1")
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s={flush_interval_s} must be positive")
        self._topic = topic
        self._client = connect(topic)
        self._queues = ensure_topic(self._client, topic, queues).queues
        self._streams = topic.streams(self._queues)
        self._batch_records = batch_records
        self._interval_s = flush_interval_s
        self._retry = retry or WriteRetry()
        self._on_ack = on_ack
        self._clock = clock
        self._sleep = sleep
        self._buffer: list[tuple[int, dict[bytes, bytes]]] = []  # (queue, fields), in production order
        self._first_at = 0.0
        self._acked = self._pipelines = self._bytes = self._failures = 0
        self._closed = False
        self._log = structlog.get_logger("tenure.producer").bind(topic=str(topic))

    def __enter__(self) -> RedisProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def queues(self) -> int:
        """The topic's number of queues."""
        return self._queues

    @property
    def landing(self) -> str:
        """Where the records go: the topic's URL, its password hidden (a file producer's ``landing/``)."""
        return str(self._topic)

    @property
    def acked(self) -> int:
        """Entries Redis has acknowledged."""
        return self._acked

    @property
    def pending(self) -> int:
        """Entries sent but not yet acknowledged (buffered, or in a pipeline that is failing)."""
        return len(self._buffer)

    @property
    def files_written(self) -> int:
        """Pipelines acknowledged (a file producer's files)."""
        return self._pipelines

    @property
    def bytes_written(self) -> int:
        """Bytes of the entries' fields acknowledged."""
        return self._bytes

    @property
    def write_failures(self) -> int:
        """Failed pipeline attempts (each retried, or raised after the last)."""
        return self._failures

    def send(self, record: Mapping[str, Any]) -> None:
        """Buffer one record as a JSON line (compact, UTF-8) for its key's stream; the record is not validated.

        Raises:
            ValueError: the record is not JSON-serialisable, or, in a topic of several queues, has no string
                ``key`` to route it by.
            ProducerError: a pipeline was due and failed after every retry.
        """
        key = record.get("key")
        if self._queues > 1 and not isinstance(key, str):
            raise ValueError(f"record has no string key ({key!r}) to route it to one of {self._queues} queues")
        try:
            line = json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            raise ValueError(f"record is not serialisable as a JSON line: {exc}") from exc
        self.send_raw(line, queue=queue_of(key, self._queues) if isinstance(key, str) else 0)

    def send_raw(self, line: bytes, *, queue: int | None = None) -> None:
        """Buffer one line as given (bad lines included) as an entry's ``record`` for ``queue``'s stream.

        Args:
            line: the line (a ``\\n`` in it is kept: an entry is not split).
            queue: its queue; None: its key's, when it is a JSON object with a string ``key``, else queue 0.

        Raises:
            ConfigError: ``queue`` is not one of the topic's.
            ProducerError: a pipeline was due and failed after every retry.
        """
        index = queue_of_line(line, self._queues) if queue is None else check_queue(queue, self._queues)
        self._add(index, {RECORD_FIELD: line})

    def write_file(self, lines: list[bytes], *, queue: int = 0) -> None:
        """A file producer's one file, on a stream: each line an entry, and no line (an empty file, input that holds
        no record) one entry without a ``record`` field, which the consumer quarantines as ``no_record_field``."""
        if not lines:
            self._add(check_queue(queue, self._queues),
                      {NOT_A_RECORD: b"no record: an empty file's analog (tenure produce --bad)"})
        for line in lines:
            self.send_raw(line, queue=queue)

    def flush(self) -> None:
        """Send everything buffered now; returns once Redis acknowledged it.

        Raises:
            ProducerError: after every retry; the lines stay buffered for the next flush.
        """
        self._check_open()
        self._send_pipeline()

    def close(self) -> None:
        """Flush, then close the connection (idempotent)."""
        if self._closed:
            return
        try:
            self._send_pipeline()
        finally:
            self._closed = True
            self._client.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ProducerError(f"producer for {self._topic} is closed")

    def _add(self, queue: int, fields: dict[bytes, bytes]) -> None:
        self._check_open()
        if not self._buffer:
            self._first_at = self._clock()
        self._buffer.append((queue, fields))
        if len(self._buffer) >= self._batch_records or self._clock() - self._first_at >= self._interval_s:
            self._send_pipeline()

    def _send_pipeline(self) -> None:
        """One pipeline of the buffered entries' ``XADD``s (no transaction: Redis runs them in order anyway)."""
        if not self._buffer:
            return
        policy = self._retry
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(policy.max_attempts),
            wait=tenacity.wait_exponential(multiplier=policy.initial_backoff_s, max=policy.max_backoff_s),
            retry=tenacity.retry_if_exception_type(RedisUnavailable), sleep=self._sleep, reraise=True)
        try:
            for attempt in retrying:
                with attempt:
                    ids = self._pipeline_once(attempt.retry_state.attempt_number)
        except RedisUnavailable as exc:
            self._log.error("write_gave_up", attempts=policy.max_attempts, pending=len(self._buffer))
            raise ProducerError(f"could not add {len(self._buffer)} entries to {self._topic} after "
                                f"{policy.max_attempts} attempts: {exc}; they stay buffered (nothing acknowledged is "
                                "lost): start Redis, then flush again") from exc
        sent, self._buffer = self._buffer, []
        self._acked += len(sent)
        self._pipelines += 1
        self._bytes += sum(len(k) + len(v) for _, fields in sent for k, v in fields.items())
        last = f"{self._streams[sent[-1][0]]}/{ids[-1].decode()}"
        self._log.debug("pipeline_written", entries=len(sent), last=last)
        if self._on_ack is not None:
            self._on_ack(last, len(sent))

    def _pipeline_once(self, attempt: int) -> list[bytes]:
        pipe = self._client.pipeline(transaction=False)
        for queue, fields in self._buffer:
            pipe.xadd(self._streams[queue], fields)  # type: ignore[arg-type]  # redis-py types fields as str keys
        try:
            return list(pipe.execute())
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self._failures += 1
            self._log.warning("write_failed", entries=len(self._buffer), attempt=attempt,
                              max_attempts=self._retry.max_attempts, error=str(exc))
            raise RedisUnavailable(f"Redis did not answer a pipeline of {len(self._buffer)} XADDs "
                                   f"({type(exc).__name__}: {exc})") from exc
        except redis.RedisError as exc:
            raise ProducerError(f"Redis refused an XADD to {self._topic}: {exc}: check that the prefix names no "
                                "key of another type") from exc
