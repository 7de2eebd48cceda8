"""``tenure produce``: seeded records over a set of keys, each to its key's queue, with injected duplicates, bad input
and records sent to a wrong queue, at a rate."""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import structlog

from tenure.career.identity import ensure_topic
from tenure.career.queue import DEFAULT_MAX_LINE_BYTES, queue_of
from tenure.career.redis_queue import RedisTopic, is_redis_url
from tenure.service.ops._produce._bad_lines import BAD_CLASSES, bad_line
from tenure.service.ops._produce._progress import ProgressDisplay
from tenure.service.ops._produce._redis import RedisProducer
from tenure.service.ops._produce._writer import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_RECORDS,
    DEFAULT_FLUSH_INTERVAL_S,
    Producer,
    WriteRetry,
)

__all__ = ["ProduceSummary", "produce"]

_DUP_WINDOW = 10_000  # duplicates repeat one of this many most recent good lines, like a client's retries


@dataclass(frozen=True)
class ProduceSummary:
    """What :func:`produce` wrote; :meth:`render` is the human summary."""

    landing: str
    """Where the files went: the ``landing/`` of a topic of one queue, the topic's folder for more."""
    seed: int
    records: int
    duplicates: int
    bad_lines: int
    empty_files: int
    files: int
    bytes: int
    seconds: float
    interrupted: bool
    write_failures: int
    first_file: str | None = None
    last_file: str | None = None
    bad_by_class: dict[str, int] = field(default_factory=dict)
    queues: int = 1
    """The topic's number of queues."""
    misrouted: int = 0
    """Records written to another queue than their key's (``misroute``): each is a ``wrong_queue`` bad line there."""

    @property
    def lines(self) -> int:
        """All lines written: records, duplicates and bad lines."""
        return self.records + self.duplicates + self.bad_lines

    @property
    def rate(self) -> float:
        """Lines per second over the whole run."""
        return self.lines / self.seconds if self.seconds > 0 else 0.0

    def render(self) -> str:
        """A few lines: counts, rate, and where the files went."""
        head = "produce: interrupted —" if self.interrupted else "produce:"
        # A Redis topic's "files" are pipelines of XADDs, its "empty files" entries without a record field.
        empty, unit = (("entries without a record", "pipelines") if is_redis_url(self.landing)
                       else ("empty files", "files"))
        out = [
            f"{head} {self.records} records, {self.duplicates} duplicates, {self.bad_lines} bad lines, "
            f"{self.empty_files} {empty} in {self.files} {unit} ({self.bytes / 1e6:.1f} MB) "
            f"in {self.seconds:.2f} s, {self.rate:,.0f} lines/s (seed {self.seed})",
            f"  into {self.landing}" + (f" ({self.queues} queues, each key's records in its queue)"
                                         if self.queues > 1 else "")
            + (f": {self.first_file} … {self.last_file}" if self.first_file else ""),
        ]
        if self.misrouted:
            out.append(f"  {self.misrouted} records written to a wrong queue on purpose (quarantined as wrong_queue)")
        if self.bad_by_class:
            classes = ", ".join(f"{k}={v}" for k, v in sorted(self.bad_by_class.items()))
            out.append(f"  bad input by class: {classes}")
        if self.write_failures:
            out.append(f"  {self.write_failures} failed write attempts were retried (see write_failed)")
        return "\n".join(out)

    def to_json(self) -> str:
        """The summary as one JSON object."""
        body = {name: getattr(self, name) for name in self.__dataclass_fields__}
        body.update(lines=self.lines, rate=round(self.rate, 1))
        return json.dumps(body, sort_keys=True)


def produce(
    data_root: str | os.PathLike[str] | RedisTopic,
    *,
    records: int,
    keys: int,
    rate: float | None = None,
    duplicates: float = 0.0,
    bad: float = 0.0,
    misroute: float = 0.0,
    queues: int | None = None,
    seed: int | None = None,
    progress: bool | None = None,
    stop: threading.Event | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    batch_records: int = DEFAULT_BATCH_RECORDS,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
    retry: WriteRetry | None = None,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ProduceSummary:
    """Write ``records`` distinct records over ``keys`` keys, plus injected duplicates and bad input.

    Record ``i`` is ``{"id": "<run>-<i>", "key": "k<j>", "seq": <next for key>, "ts": <epoch ms>,
    "payload": {"n": i, "v": <random>}}``; keys are drawn at random, seq counts up per key from 1, ts is the
    wall clock (never decreasing within a run). Each record goes to its key's queue
    (:func:`tenure.career.queue.queue_of`), or, with probability ``misroute``, to another queue (a ``wrong_queue``
    bad line there). After each record, with probability ``duplicates`` one of the last 10 000 good lines is
    repeated byte for byte into the queue it went to, and with probability ``bad`` the next class of
    :data:`BAD_CLASSES` is injected, into the queues in turn (bad lines name ids ``<run>-bad-<n>``). Everything
    except ts and the file boundaries follows from ``seed`` alone.

    Ctrl-C (``KeyboardInterrupt``) or ``stop.set()`` ends the run early: what was sent is flushed and the
    summary says ``interrupted``.

    Args:
        data_root: the queue folder: files go to its queues' ``landing/`` (``<data_root>/landing/`` for a topic of
            one queue); its ``_topic.json`` is written first if it has none (``tenure.career.identity``). Or a Redis
            topic: records go to its streams, with pipelined ``XADD``s (:class:`RedisProducer`, which takes
            ``batch_records``, ``flush_interval_s`` and ``retry``); there an empty file is an entry without a
            ``record`` field, and the topic's identity is ``<prefix>:topic``.
        records: distinct good records to write (>= 0); duplicates and bad lines come on top.
        keys: number of distinct keys (>= 1).
        rate: at most this many lines per second (records, duplicates and bad lines), on ``clock``; None is
            as fast as possible.
        duplicates: probability in [0, 1] of a repeated line after each record.
        bad: probability in [0, 1] of a bad-input item after each record.
        misroute: probability in [0, 1] that a record goes to a queue other than its key's (a topic of several
            queues only: the tests of ``wrong_queue``).
        queues: the topic's number of queues (``--queues``), checked against its ``_topic.json`` and written there
            if it has none; None: the file's (1 for a new topic).
        seed: makes ids, keys, seqs, payloads, duplicates and bad lines reproducible; None draws one (the
            summary shows it).
        progress: True/None shows a rich bar on a TTY and plain lines every 5 s otherwise; False is silent.
        stop: set it (e.g. from a SIGTERM handler) to end the run early.
        max_line_bytes: the consumer's line limit; injected ``oversized`` lines are one byte over it.
        batch_records: see :class:`Producer`.
        batch_bytes: see :class:`Producer`.
        flush_interval_s: see :class:`Producer`.
        retry: see :class:`Producer`.
        stream: where progress goes (default stderr).
        clock: monotonic seconds, for the rate limit and the summary.
        sleep: used by the rate limiter and the write back-off.

    Returns:
        The summary.

    Raises:
        ValueError: an argument is out of range (the message names it).
        ConfigError: the queue's ``_topic.json`` is unreadable or names another number of queues than ``queues``.
        ProducerError: a batch could not be written after every retry.
    """
    if records < 0:
        raise ValueError(f"records={records} must be >= 0")
    if keys < 1:
        raise ValueError(f"keys={keys} must be >= 1")
    if rate is not None and rate <= 0:
        raise ValueError(f"rate={rate} must be positive (or None for no limit)")
    for name, value in (("duplicates", duplicates), ("bad", bad), ("misroute", misroute)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}={value} must be a probability between 0 and 1")
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    run = f"r{seed:x}"
    width = len(str(keys - 1))
    key_names = [f"k{j:0{width}d}" for j in range(keys)]
    next_seq = [0] * keys
    window: deque[tuple[bytes, int]] = deque(maxlen=_DUP_WINDOW)  # a line and the queue it went to
    bad_counts: Counter[str] = Counter()
    n_dup = n_bad = n_empty = n_misrouted = 0
    first_file: list[str] = []
    last_file: list[str] = []

    def on_ack(where: Path | str, _lines: int) -> None:
        name = where.name if isinstance(where, Path) else where  # a file's name, or a stream's entry
        if not first_file:
            first_file.append(name)
        last_file[:] = [name]

    log = structlog.get_logger("tenure.producer")
    out = stream if stream is not None else sys.stderr
    started = clock()
    sent = 0
    interrupted = False
    # The topic's identity (its number of queues): the first producer (or replica) to find none writes it.
    producer: Producer | RedisProducer
    if isinstance(data_root, RedisTopic):
        producer = RedisProducer(data_root, queues=queues, batch_records=batch_records,
                                 flush_interval_s=flush_interval_s, retry=retry, on_ack=on_ack, clock=clock,
                                 sleep=sleep)
        n = producer.queues
    else:
        n = ensure_topic(Path(data_root), queues).queues
        producer = Producer(
            data_root, queues=n, batch_records=batch_records, batch_bytes=batch_bytes,
            flush_interval_s=flush_interval_s, retry=retry, on_ack=on_ack, clock=clock, sleep=sleep,
        )
    if misroute and n == 1:
        producer.close()
        raise ValueError(f"misroute={misroute} needs a topic of several queues: {data_root} has one (pass --queues "
                         "N for a new topic)")
    key_queues = [queue_of(name, n) for name in key_names]
    bar = ProgressDisplay(records, progress, out, clock)
    landing = str(producer.landing) if n == 1 else str(data_root)
    log.info("produce_started", landing=landing, records=records, keys=keys, rate=rate,
             duplicates=duplicates, bad=bad, seed=seed, **({"queues": n, "misroute": misroute} if n > 1 else {}))

    def pace() -> None:
        nonlocal sent
        sent += 1
        if rate is not None:
            delay = started + sent / rate - clock()
            if delay > 0.001:  # shorter sleeps overshoot; the absolute schedule catches up next time
                sleep(delay)

    last_ts = 0
    try:
        for i in range(records):
            if stop is not None and stop.is_set():
                interrupted = True
                break
            j = rng.randrange(keys)
            next_seq[j] += 1
            last_ts = max(last_ts, int(time.time() * 1000))
            # Hand-formatted: ids and keys are plain ASCII, and json.dumps would halve the producer's rate.
            line = (
                f'{{"id":"{run}-{i:09d}","key":"{key_names[j]}","seq":{next_seq[j]},"ts":{last_ts},'
                f'"payload":{{"n":{i},"v":{rng.getrandbits(30)}}}}}'
            ).encode()
            queue = key_queues[j]
            if misroute and rng.random() < misroute:
                queue = (queue + 1 + rng.randrange(n - 1)) % n
                n_misrouted += 1
            producer.send_raw(line, queue=queue)
            window.append((line, queue))
            pace()
            if duplicates and rng.random() < duplicates:
                repeated, into = window[rng.randrange(len(window))]
                producer.send_raw(repeated, queue=into)
                n_dup += 1
                pace()
            if bad and rng.random() < bad:
                item = n_bad + n_empty
                kind = BAD_CLASSES[item % len(BAD_CLASSES)]
                bad_counts[kind] += 1
                if kind == "empty_file":
                    producer.write_file([], queue=item % n)
                    n_empty += 1
                else:
                    producer.send_raw(bad_line(kind, item, run, max_line_bytes)[0], queue=item % n)
                    n_bad += 1
                    pace()
            if i % 1000 == 999:
                bar.update(i + 1)
        else:
            bar.update(records)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.stop()
        producer.close()
    seconds = clock() - started
    summary = ProduceSummary(
        landing=landing,
        seed=seed,
        records=sum(next_seq),
        duplicates=n_dup,
        bad_lines=n_bad,
        empty_files=n_empty,
        files=producer.files_written,
        bytes=producer.bytes_written,
        seconds=round(seconds, 3),
        interrupted=interrupted,
        write_failures=producer.write_failures,
        first_file=first_file[0] if first_file else None,
        last_file=last_file[0] if last_file else None,
        bad_by_class=dict(bad_counts),
        queues=n,
        misrouted=n_misrouted,
    )
    log.info("produce_finished", records=summary.records, duplicates=n_dup, bad_lines=n_bad,
             files=summary.files, seconds=summary.seconds, interrupted=interrupted)
    return summary
