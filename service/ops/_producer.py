"""The queue producer behind ``tenure produce``: batched, atomic, durable JSON Lines files in ``landing/``."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import structlog
import tenacity

from election._errors import TenureError
from service.ops._verify import DEFAULT_MAX_LINE_BYTES

__all__ = [
    "BAD_CLASSES",
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_RECORDS",
    "DEFAULT_FLUSH_INTERVAL_S",
    "AckCallback",
    "ProduceSummary",
    "Producer",
    "ProducerError",
    "RetryPolicy",
    "bad_line",
    "produce",
    "write_lines",
]

DEFAULT_BATCH_RECORDS = 1000
DEFAULT_BATCH_BYTES = 4 << 20
DEFAULT_FLUSH_INTERVAL_S = 0.5

BAD_CLASSES: tuple[str, ...] = (
    "bad_json",
    "not_object",
    "missing_field",
    "bad_type_seq",
    "bad_type_ts",
    "oversized",
    "not_utf8",
    "empty_line",
    "empty_file",
)
"""The bad-input classes :func:`produce` injects, in turn (``empty_file`` is a zero-byte file, no line)."""

_DUP_WINDOW = 10_000  # duplicates repeat one of this many most recent good lines, like a client's retries
_BAD_TS = 1_700_000_000_000  # bad lines carry a fixed ts so that they are byte-identical for a seed

AckCallback = Callable[[Path, int], None]
"""Called with (durable file, lines in it) once a file is fsynced, renamed and its directory fsynced."""


class ProducerError(TenureError):
    """A batch file could not be made durable after every retry; its records stay buffered, none dropped."""


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed batch write is retried: exponential back-off, bounded attempts.

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


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_hidden_then_rename(directory: Path, name: str, data: bytes) -> Path:
    """Write ``data`` to ``directory/.name.tmp``, fsync, rename to ``directory/name``; no partial file stays.

    The hidden name keeps Spark's file source (and :func:`service.ops._verify.iter_queue_files`) from ever
    listing a file that is still being written; rename within one directory is atomic on POSIX.
    """
    tmp = directory / f".{name}.tmp"
    final = directory / name
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
    except BaseException:
        # A half-written hidden file is harmless to readers but would pile up after every disk-full retry.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return final


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith((".", "_")):
        raise ValueError(f"file name {name!r} must be non-empty, without '/', and not start with '.' or '_'")


def _join_lines(lines: Sequence[bytes], trailing_newline: bool = True) -> bytes:
    for line in lines:
        if b"\n" in line:
            raise ValueError(f"a line must not contain b'\\n': {line[:80]!r}")
    if not lines:
        return b""
    return b"\n".join(lines) + (b"\n" if trailing_newline else b"")


def write_lines(
    landing_dir: str | os.PathLike[str], lines: Sequence[bytes], name: str, *, trailing_newline: bool = True
) -> Path:
    """Plant one queue file atomically and durably, exactly as the producer writes its batches.

    For tests of other components that need specific lines (bad ones included) in ``landing/``. No retry.

    Args:
        landing_dir: the folder to write into (created if absent).
        lines: the lines, each without ``\\n``; an empty sequence writes a zero-byte file.
        name: the final file name, e.g. ``p0000000000001-0000001-00000001.jsonl``; it must not start with
            ``.`` or ``_`` (those are hidden from readers).
        trailing_newline: end the last line with ``\\n`` (the producer always does).

    Returns:
        The path of the durable file.

    Example:
        >>> write_lines(tmp / "landing", [b'{"id":"a","key":"k","seq":1,"ts":1,"payload":{}}', b"nope"],
        ...             "t-00000001.jsonl")  # doctest: +SKIP
    """
    _check_name(name)
    directory = Path(landing_dir)
    directory.mkdir(parents=True, exist_ok=True)
    final = _write_hidden_then_rename(directory, name, _join_lines(lines, trailing_newline))
    _fsync_dir(directory)
    return final


@dataclass
class _Batch:
    name: str
    data: bytes
    lines: int
    renamed: bool = False  # once renamed, a retry only has the directory fsync left to do


class Producer:
    """Buffers records and writes them to ``<data_root>/landing/`` as batch files, atomically and durably.

    A batch file is cut when ``batch_records`` lines or ``batch_bytes`` bytes are buffered, or when the oldest
    buffered line is ``flush_interval_s`` old (checked on ``send()`` and by a background thread), or on
    ``flush()``/``close()``. Each file is written under a hidden name, fsynced, renamed, and the directory
    fsynced; only then are its lines acknowledged (``acked``, ``on_ack``). A failed write (disk full,
    directory gone, permission denied, any ``OSError``) is retried with exponential back-off, logged as
    ``write_failed``, and after ``retry.max_attempts`` raises :class:`ProducerError` — with every record still
    buffered, in order, for the next ``flush()``. Acknowledged data is never dropped; unacknowledged data
    lives in memory and dies with the process.

    File names sort in production order: ``p<start-ms>-<pid>-<counter>.jsonl``. The producer never recreates
    a ``landing/`` that vanished after start-up: that may be an unmounted volume, and writing into the mount
    point would hide the data; it retries until the folder is back, then fails clearly.

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
        batch_records: int = DEFAULT_BATCH_RECORDS,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        retry: RetryPolicy | None = None,
        on_ack: AckCallback | None = None,
        autoflush: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Create ``<data_root>/landing/`` if needed and start the interval flusher.

        Args:
            data_root: the data root; files go to its ``landing/``.
            batch_records: cut a file at this many lines (default 1000). Small files cost the consumer a
                listing entry and a task each; large ones delay visibility.
            batch_bytes: cut a file at this many bytes (default 4 MiB); a file may exceed it by one line.
            flush_interval_s: the longest a line waits in the buffer (default 0.5 s).
            retry: the write retry policy (default :class:`RetryPolicy()`).
            on_ack: called with (file, lines) once each file is durable; runs under the producer's lock, so
                keep it short (it may call the producer again: the lock is re-entrant).
            autoflush: run the background thread that enforces ``flush_interval_s`` between sends.
            clock: monotonic seconds, for buffer age.
            wall_clock: epoch seconds, for the file-name prefix.
            sleep: the back-off sleep (tests pass a fast one).
        """
        if batch_records < 1:
            raise ValueError(f"batch_records={batch_records} must be at least 1")
        if batch_bytes < 1:
            raise ValueError(f"batch_bytes={batch_bytes} must be at least 1")
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s={flush_interval_s} must be positive")
        self._landing = Path(data_root) / "landing"
        try:
            self._landing.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProducerError(f"cannot create the landing folder {self._landing}: {exc}") from exc
        self._batch_records = batch_records
        self._batch_bytes = batch_bytes
        self._interval_s = flush_interval_s
        self._retry = retry or RetryPolicy()
        self._on_ack = on_ack
        self._clock = clock
        self._sleep = sleep
        self._prefix = f"p{int(wall_clock() * 1000):013d}-{os.getpid():07d}"
        self._counter = 0
        self._lock = threading.RLock()
        self._buffer: list[bytes] = []
        self._buffer_bytes = 0
        self._first_at = 0.0
        self._pending: deque[_Batch] = deque()
        self._acked = 0
        self._files = 0
        self._bytes = 0
        self._failures = 0
        self._closed = False
        self._log = structlog.get_logger("tenure.producer").bind(landing=str(self._landing))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if autoflush:
            self._thread = threading.Thread(target=self._autoflush, name="tenure-producer-flush", daemon=True)
            self._thread.start()

    # -- public surface -------------------------------------------------------------------------------------

    @property
    def landing(self) -> Path:
        """The folder files are renamed into."""
        return self._landing

    @property
    def acked(self) -> int:
        """Lines acknowledged: in files that are durable (fsynced, renamed, directory fsynced)."""
        with self._lock:
            return self._acked

    @property
    def pending(self) -> int:
        """Lines sent but not yet acknowledged (buffered, or in a batch whose write is failing)."""
        with self._lock:
            return len(self._buffer) + sum(b.lines for b in self._pending)

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
        """Buffer one record as a JSON line (compact, UTF-8); the record is not validated here.

        Raises:
            ValueError: the record is not JSON-serialisable (NaN and lone surrogates included).
            ProducerError: a threshold was reached and the write failed after every retry.
        """
        try:
            line = json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            raise ValueError(f"record is not serialisable as a JSON line: {exc}") from exc
        self.send_raw(line)

    def send_raw(self, line: bytes) -> None:
        """Buffer one line as given (bad lines included); the producer adds the ``\\n``.

        Raises:
            ValueError: the line contains ``\\n``.
            ProducerError: a threshold was reached and the write failed after every retry.
        """
        if b"\n" in line:
            raise ValueError(f"a line must not contain b'\\n': {line[:80]!r}")
        with self._lock:
            self._check_open()
            if not self._buffer:
                self._first_at = self._clock()
            self._buffer.append(line + b"\n")
            self._buffer_bytes += len(line) + 1
            if (
                len(self._buffer) >= self._batch_records
                or self._buffer_bytes >= self._batch_bytes
                or self._clock() - self._first_at >= self._interval_s
            ):
                self._flush_locked()

    def write_file(self, lines: Sequence[bytes]) -> Path:
        """Write exactly ``lines`` as the next file (zero-byte if empty), with retries, and return it.

        Buffered lines are written first, so that file names keep production order; an empty file has no
        order to keep, so it leaves the buffer alone (and batches stay full).
        """
        data = _join_lines(lines)
        with self._lock:
            self._check_open()
            if lines:
                self._cut_locked()
            batch = _Batch(self._next_name(), data, len(lines))
            self._pending.append(batch)
            self._drain_locked()
            return self._landing / batch.name

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
            raise ProducerError(f"producer for {self._landing} is closed")

    def _next_name(self) -> str:
        self._counter += 1
        return f"{self._prefix}-{self._counter:08d}.jsonl"

    def _cut_locked(self) -> None:
        if self._buffer:
            self._pending.append(_Batch(self._next_name(), b"".join(self._buffer), len(self._buffer)))
            self._buffer = []
            self._buffer_bytes = 0

    def _flush_locked(self) -> None:
        self._cut_locked()
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
            self._log.debug("file_written", file=batch.name, lines=batch.lines, bytes=len(batch.data))
            if self._on_ack is not None:
                self._on_ack(self._landing / batch.name, batch.lines)

    def _write_once(self, batch: _Batch) -> None:
        final = self._landing / batch.name
        if not batch.renamed:
            _write_hidden_then_rename(self._landing, batch.name, batch.data)
            batch.renamed = True
        _fsync_dir(self._landing)
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
            pending = len(self._buffer) + sum(b.lines for b in self._pending)
            self._log.error("write_gave_up", file=batch.name, attempts=policy.max_attempts, pending=pending)
            raise ProducerError(
                f"could not write {self._landing / batch.name} after {policy.max_attempts} attempts: {exc}; "
                f"{pending} unacknowledged lines stay buffered (nothing acknowledged is lost) — free space, "
                f"restore the folder or its permissions, then flush again"
            ) from exc

    def _autoflush(self) -> None:
        """Enforce ``flush_interval_s`` when no ``send()`` comes along to do it."""
        while not self._stop.wait(self._interval_s / 2):
            with self._lock:
                due = bool(self._buffer) and self._clock() - self._first_at >= self._interval_s
                if not (due or self._pending) or self._closed:
                    continue
                try:
                    self._flush_locked()
                except ProducerError as exc:
                    # Already logged per attempt; the next send()/flush() retries and raises to the caller.
                    self._log.debug("autoflush_failed", error=str(exc))


# -- the generator behind `tenure produce` -----------------------------------------------------------------


def bad_line(kind: str, n: int, run: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> tuple[bytes, str]:
    """The ``n``-th injected bad line of class ``kind`` (any of :data:`BAD_CLASSES` but ``empty_file``).

    Returns:
        ``(line, reason)``: the bytes, and the reason :func:`service.ops._verify.classify_line` must give them.
    """
    bad_id = f"{run}-bad-{n:09d}"
    base: dict[str, Any] = {"id": bad_id, "key": "k-bad", "seq": n, "ts": _BAD_TS, "payload": {"bad": kind}}

    def dump(obj: object) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    if kind == "bad_json":
        return dump(base)[:-7], "bad_json"  # cut mid-object
    if kind == "not_object":
        return dump([bad_id, n, None]), "not_object"
    if kind == "missing_field":
        name = ("id", "key", "seq", "ts", "payload")[n % 5]
        return dump({k: v for k, v in base.items() if k != name}), f"missing_field:{name}"
    if kind == "bad_type_seq":
        return dump({**base, "seq": str(n) if n % 2 == 0 else True}), "bad_type:seq"
    if kind == "bad_type_ts":
        return dump({**base, "ts": f"{_BAD_TS}.5" if n % 2 == 0 else _BAD_TS + 0.5}), "bad_type:ts"
    if kind == "oversized":
        line = dump({**base, "payload": ""})
        pad = max_line_bytes + 1 - len(line)
        return dump({**base, "payload": "x" * max(pad, 0)}), "oversized"
    if kind == "not_utf8":
        return dump(base).replace(b'"k-bad"', b'"k-\xff\xfe"'), "not_utf8"
    if kind == "empty_line":
        return b"", "empty_line"
    raise ValueError(f"unknown bad-line class {kind!r}; expected one of {', '.join(BAD_CLASSES[:-1])}")


@dataclass(frozen=True)
class ProduceSummary:
    """What :func:`produce` wrote; :meth:`render` is the human summary."""

    landing: str
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
        out = [
            f"{head} {self.records} records, {self.duplicates} duplicates, {self.bad_lines} bad lines, "
            f"{self.empty_files} empty files in {self.files} files ({self.bytes / 1e6:.1f} MB) "
            f"in {self.seconds:.2f} s, {self.rate:,.0f} lines/s (seed {self.seed})",
            f"  into {self.landing}" + (f": {self.first_file} … {self.last_file}" if self.first_file else ""),
        ]
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


class _Progress:
    """A rich progress bar on a TTY, plain lines every few seconds otherwise, or nothing."""

    def __init__(self, total: int, mode: bool | None, stream: TextIO, clock: Callable[[], float]) -> None:
        self._total = total
        self._stream = stream
        self._clock = clock
        self._bar: Any = None
        self._task: Any = None
        self._last = clock()
        self._started = self._last
        self._plain = False
        tty = stream.isatty()
        if mode is None:
            mode = True
        if mode and tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self._bar = Progress(
                "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                TimeRemainingColumn(), console=Console(file=stream), transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("producing", total=total)
        elif mode:
            self._plain = True

    def update(self, done: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done)
        elif self._plain:
            now = self._clock()
            if now - self._last >= 5.0:
                self._last = now
                rate = done / (now - self._started) if now > self._started else 0.0
                print(f"produce: {done}/{self._total} records, {rate:,.0f} records/s",
                      file=self._stream, flush=True)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def produce(
    data_root: str | os.PathLike[str],
    *,
    records: int,
    keys: int,
    rate: float | None = None,
    duplicates: float = 0.0,
    bad: float = 0.0,
    seed: int | None = None,
    progress: bool | None = None,
    stop: threading.Event | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    batch_records: int = DEFAULT_BATCH_RECORDS,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
    retry: RetryPolicy | None = None,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ProduceSummary:
    """Write ``records`` distinct records over ``keys`` keys, plus injected duplicates and bad input.

    Record ``i`` is ``{"id": "<run>-<i>", "key": "k<j>", "seq": <next for key>, "ts": <epoch ms>,
    "payload": {"n": i, "v": <random>}}``; keys are drawn at random, seq counts up per key from 1, ts is the
    wall clock (never decreasing within a run). After each record, with probability ``duplicates`` one of the
    last 10 000 good lines is repeated byte for byte, and with probability ``bad`` the next class of
    :data:`BAD_CLASSES` is injected (bad lines name ids ``<run>-bad-<n>``). Everything except ts and the file
    boundaries follows from ``seed`` alone.

    Ctrl-C (``KeyboardInterrupt``) or ``stop.set()`` ends the run early: what was sent is flushed and the
    summary says ``interrupted``.

    Args:
        data_root: files go to ``<data_root>/landing/``.
        records: distinct good records to write (>= 0); duplicates and bad lines come on top.
        keys: number of distinct keys (>= 1).
        rate: at most this many lines per second (records, duplicates and bad lines), on ``clock``; None is
            as fast as possible.
        duplicates: probability in [0, 1] of a repeated line after each record.
        bad: probability in [0, 1] of a bad-input item after each record.
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
        ProducerError: a batch could not be written after every retry.
    """
    if records < 0:
        raise ValueError(f"records={records} must be >= 0")
    if keys < 1:
        raise ValueError(f"keys={keys} must be >= 1")
    if rate is not None and rate <= 0:
        raise ValueError(f"rate={rate} must be positive (or None for no limit)")
    for name, value in (("duplicates", duplicates), ("bad", bad)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}={value} must be a probability between 0 and 1")
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    run = f"r{seed:x}"
    width = len(str(keys - 1))
    key_names = [f"k{j:0{width}d}" for j in range(keys)]
    next_seq = [0] * keys
    window: deque[bytes] = deque(maxlen=_DUP_WINDOW)
    bad_counts: Counter[str] = Counter()
    n_dup = n_bad = n_empty = 0
    first_file: list[Path] = []
    last_file: list[Path] = []

    def on_ack(path: Path, _lines: int) -> None:
        if not first_file:
            first_file.append(path)
        last_file[:] = [path]

    log = structlog.get_logger("tenure.producer")
    out = stream if stream is not None else sys.stderr
    started = clock()
    sent = 0
    interrupted = False
    producer = Producer(
        data_root, batch_records=batch_records, batch_bytes=batch_bytes, flush_interval_s=flush_interval_s,
        retry=retry, on_ack=on_ack, clock=clock, sleep=sleep,
    )
    bar = _Progress(records, progress, out, clock)
    log.info("produce_started", landing=str(producer.landing), records=records, keys=keys, rate=rate,
             duplicates=duplicates, bad=bad, seed=seed)

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
            producer.send_raw(line)
            window.append(line)
            pace()
            if duplicates and rng.random() < duplicates:
                producer.send_raw(window[rng.randrange(len(window))])
                n_dup += 1
                pace()
            if bad and rng.random() < bad:
                kind = BAD_CLASSES[(n_bad + n_empty) % len(BAD_CLASSES)]
                bad_counts[kind] += 1
                if kind == "empty_file":
                    producer.write_file([])
                    n_empty += 1
                else:
                    producer.send_raw(bad_line(kind, n_bad + n_empty, run, max_line_bytes)[0])
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
        landing=str(producer.landing),
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
        first_file=first_file[0].name if first_file else None,
        last_file=last_file[0].name if last_file else None,
        bad_by_class=dict(bad_counts),
    )
    log.info("produce_finished", records=summary.records, duplicates=n_dup, bad_lines=n_bad,
             files=summary.files, seconds=summary.seconds, interrupted=interrupted)
    return summary
