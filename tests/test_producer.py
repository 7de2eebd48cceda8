"""Tests of the producer: atomic visibility, durability before ack, retried failures, seeded determinism."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import stat
import subprocess
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tenure.career.queue import QueueLayout, classify_line, queue_of
from tenure.errors import ConfigError
from tenure.service.local import wait_for
from tenure.service.ops._produce import (
    BAD_CLASSES,
    Producer,
    ProducerError,
    WriteRetry,
    bad_line,
    produce,
    write_lines,
)
from tenure.service.ops._verify import iter_queue_files, verify
from tests._replicas import tenure

FAST = WriteRetry(max_attempts=4, initial_backoff_s=0.01, max_backoff_s=0.05)


def _record(i: int, key: str = "k", pad: int = 0) -> dict[str, Any]:
    return {"id": f"id-{i}", "key": key, "seq": i, "ts": 1_700_000_000_000 + i, "payload": {"p": "x" * pad}}


def _visible(landing: Path) -> list[Path]:
    return sorted(p for p in landing.iterdir()
                  if p.name.endswith(".jsonl") and not p.name.startswith((".", "_")))


def _all_lines(root: Path) -> list[bytes]:
    return [line for path in iter_queue_files(root) for line in path.read_bytes().split(b"\n")[:-1]]


# -- write_lines ---------------------------------------------------------------------------------------------


def test_write_lines_plants_exact_bytes(tmp_path: Path) -> None:
    """write_lines writes the lines with a newline each, leaves no hidden file, and writes empty files."""
    landing = tmp_path / "landing"
    path = write_lines(landing, [b'{"a":1}', b"", b"\xff"], "t-1.jsonl")
    assert path.read_bytes() == b'{"a":1}\n\n\xff\n'
    assert write_lines(landing, [b"x"], "t-2.jsonl", trailing_newline=False).read_bytes() == b"x"
    assert write_lines(landing, [], "t-3.jsonl").stat().st_size == 0
    assert sorted(p.name for p in landing.iterdir()) == ["t-1.jsonl", "t-2.jsonl", "t-3.jsonl"]


@pytest.mark.parametrize("name", [".hidden.jsonl", "_x.jsonl", "a/b.jsonl", ""])
def test_write_lines_rejects_hidden_or_nested_names(tmp_path: Path, name: str) -> None:
    """A name readers would skip, or one with a folder in it, is refused."""
    with pytest.raises(ValueError, match="file name"):
        write_lines(tmp_path, [b"x"], name)


def test_write_lines_rejects_embedded_newline(tmp_path: Path) -> None:
    """A line containing a newline would silently become two lines, so it is refused."""
    with pytest.raises(ValueError, match="must not contain"):
        write_lines(tmp_path, [b"a\nb"], "t.jsonl")


# -- batching and acknowledgement ----------------------------------------------------------------------------


def test_files_are_cut_by_count_and_bytes(tmp_path: Path) -> None:
    """A file closes at batch_records lines or at batch_bytes bytes, and names sort in production order."""
    with Producer(tmp_path, batch_records=3, autoflush=False) as producer:
        for i in range(7):
            producer.send(_record(i))
        assert producer.acked == 6 and producer.pending == 1
    files = _visible(tmp_path / "landing")
    assert [len(p.read_bytes().splitlines()) for p in files] == [3, 3, 1]
    ids = [json.loads(line)["id"] for p in files for line in p.read_bytes().splitlines()]
    assert ids == [f"id-{i}" for i in range(7)]

    other = tmp_path / "other"
    with Producer(other, batch_bytes=1000, autoflush=False) as producer:
        for i in range(5):
            producer.send(_record(i, pad=400))
    sizes = [len(p.read_bytes().splitlines()) for p in _visible(other / "landing")]
    assert sizes == [3, 2]  # a file closes once it reaches batch_bytes: it may exceed it by one line


def test_interval_flush_without_further_sends(tmp_path: Path) -> None:
    """The background flusher writes a lone buffered record once flush_interval_s has passed."""
    acks: list[tuple[Path, int]] = []
    producer = Producer(tmp_path, flush_interval_s=0.05, on_ack=lambda p, n: acks.append((p, n)))
    try:
        producer.send(_record(1))
        wait_for(lambda: producer.acked == 1, 5.0, "the flusher to write the record", interval_s=0.01)
        assert acks[0][0].exists() and acks[0][1] == 1
    finally:
        producer.close()


def test_interval_flush_on_send_with_injected_clock(tmp_path: Path) -> None:
    """With the flusher off, a send() after the interval (on the injected clock) cuts the file."""
    now = [0.0]
    with Producer(tmp_path, flush_interval_s=1.0, autoflush=False, clock=lambda: now[0]) as producer:
        producer.send(_record(1))
        now[0] = 0.5
        producer.send(_record(2))
        assert producer.acked == 0
        now[0] = 1.0
        producer.send(_record(3))
        assert producer.acked == 3


def test_ack_fires_only_after_fsync_rename_and_directory_fsync(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Per file the order is: fsync(file), rename into landing/, fsync(landing/), then the ack."""
    events: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        real_fsync(fd)
        events.append("fsync_dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync_file")

    def rename(src: Any, dst: Any) -> None:
        assert Path(src).name.startswith(".")
        real_rename(src, dst)
        events.append("rename")

    def on_ack(path: Path, lines: int) -> None:
        assert path.exists() and len(path.read_bytes().splitlines()) == lines
        events.append("ack")

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    with Producer(tmp_path, batch_records=2, autoflush=False, on_ack=on_ack) as producer:
        for i in range(6):
            producer.send(_record(i))
    assert events == ["fsync_file", "rename", "fsync_dir", "ack"] * 3


def test_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    """A reader polling landing/ while files are written only ever sees complete, fully valid files."""
    landing = tmp_path / "landing"
    landing.mkdir()
    done = threading.Event()
    seen: dict[str, int] = {}
    problems: list[str] = []

    def read_new_files() -> bool:
        for path in _visible(landing):
            if path.name in seen:
                continue
            data = path.read_bytes()
            lines = data.split(b"\n")
            if not data.endswith(b"\n") or len(lines) - 1 != 50:
                problems.append(f"{path.name}: {len(data)} bytes")
            problems.extend(f"{path.name}: {r}" for _, r in (classify_line(x) for x in lines[:-1]) if r)
            seen[path.name] = len(lines) - 1
        return done.is_set() and len(seen) >= 40

    thread = threading.Thread(target=wait_for, args=(read_new_files, 30, "every file read", 0), daemon=True)
    thread.start()
    with Producer(tmp_path, batch_records=50, autoflush=False) as producer:
        for i in range(2000):
            producer.send(_record(i, pad=2000))  # 100 KB files: a non-atomic write would be caught mid-way
    done.set()
    thread.join(timeout=30)
    assert not problems
    assert len(seen) == 40 and sum(seen.values()) == 2000


# -- failures, retried and reported --------------------------------------------------------------------------


def _failing(real: Callable[..., Any], times: int, err: int) -> Callable[..., Any]:
    left = [times]

    def call(*args: Any) -> Any:
        if left[0] > 0:
            left[0] -= 1
            raise OSError(err, os.strerror(err))
        return real(*args)

    return call


def test_disk_full_is_retried_with_backoff_and_reported(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC from write() is retried with doubling waits, logged as write_failed; the file lands intact."""
    monkeypatch.setattr(os, "write", _failing(os.write, 3, errno.ENOSPC))
    waits: list[float] = []
    policy = WriteRetry(max_attempts=5, initial_backoff_s=0.1, max_backoff_s=0.3)
    with capture_logs() as logs, Producer(tmp_path, autoflush=False, retry=policy, sleep=waits.append) as p:
        for i in range(3):
            p.send(_record(i))
        p.flush()
        assert p.acked == 3 and p.write_failures == 3
    failures = [e for e in logs if e["event"] == "write_failed"]
    assert [e["errno"] for e in failures] == ["ENOSPC"] * 3
    assert [e["attempt"] for e in failures] == [1, 2, 3]
    assert all(e["log_level"] == "warning" for e in failures)
    assert waits == [0.1, 0.2, 0.3]
    assert [p.name for p in (tmp_path / "landing").iterdir()] == [_visible(tmp_path / "landing")[0].name]
    assert len(_all_lines(tmp_path)) == 3


def test_failed_fsync_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing fsync (EIO) is retried like any other write failure; nothing is acked before it succeeds."""
    monkeypatch.setattr(os, "fsync", _failing(os.fsync, 2, errno.EIO))
    acked_at_failure: list[int] = []
    with capture_logs() as logs, Producer(tmp_path, autoflush=False, retry=FAST, sleep=lambda s: None) as p:
        p.send(_record(1))
        p.flush()
        acked_at_failure.append(p.acked)
    assert [e["errno"] for e in logs if e["event"] == "write_failed"] == ["EIO", "EIO"]
    assert acked_at_failure == [1]


def test_exhausted_retries_raise_and_keep_everything(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """After max_attempts a ProducerError is raised; no line is dropped; a later flush writes all in order."""
    monkeypatch.setattr(os, "write", _failing(os.write, 10_000, errno.ENOSPC))
    producer = Producer(tmp_path, batch_records=2, autoflush=False, retry=FAST, sleep=lambda s: None)
    with pytest.raises(ProducerError, match=r"after 4 attempts.*No space left.*2 unacknowledged lines"):
        producer.send(_record(0))
        producer.send(_record(1))  # cuts a file: the write fails four times
    producer.send_raw(json.dumps(_record(2)).encode())  # buffered behind the failed batch
    assert producer.acked == 0 and producer.pending == 3
    assert not list((tmp_path / "landing").iterdir())  # no partial or hidden file left behind
    monkeypatch.undo()
    producer.close()
    assert producer.acked == 3
    assert [json.loads(x)["id"] for x in _all_lines(tmp_path)] == ["id-0", "id-1", "id-2"]


def test_vanished_directory_is_retried_until_restored(tmp_path: Path) -> None:
    """With landing/ really removed, writes fail (ENOENT) and are retried; once it is back the file lands."""
    landing = tmp_path / "landing"
    attempts: list[float] = []

    def sleep(seconds: float) -> None:  # the operator restores the folder during the second wait
        attempts.append(seconds)
        if len(attempts) == 2:
            landing.mkdir()

    with capture_logs() as logs, Producer(tmp_path, autoflush=False, retry=FAST, sleep=sleep) as producer:
        producer.send(_record(1))
        shutil.rmtree(landing)
        producer.flush()
        assert producer.acked == 1
    assert [e["errno"] for e in logs if e["event"] == "write_failed"] == ["ENOENT", "ENOENT"]
    assert len(_visible(landing)) == 1


def test_vanished_directory_is_not_recreated(tmp_path: Path) -> None:
    """The producer never recreates landing/ itself (it may be an unmounted volume): it fails clearly."""
    producer = Producer(tmp_path, autoflush=False, retry=FAST, sleep=lambda s: None)
    producer.send(_record(1))
    shutil.rmtree(tmp_path / "landing")
    with pytest.raises(ProducerError, match="landing"):
        producer.flush()
    assert not (tmp_path / "landing").exists()
    assert producer.pending == 1


def _immutable(path: Path, on: bool) -> bool:
    result = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True, check=False)
    return result.returncode == 0


def test_permission_denied_is_retried_until_fixed(tmp_path: Path) -> None:
    """A landing/ that refuses writes (chmod for a normal user; the immutable flag for root) is retried."""
    landing = tmp_path / "landing"
    landing.mkdir()
    if os.geteuid() != 0:
        landing.chmod(0o500)
        restore: Callable[[], object] = lambda: landing.chmod(0o755)  # noqa: E731 - a one-line undo
    else:
        # root ignores permission bits, so chmod cannot refuse it a write; the immutable attribute can.
        if shutil.which("chattr") is None or not _immutable(landing, True):
            pytest.skip("running as root, and chattr +i is unavailable on this filesystem to refuse writes")
        restore = lambda: _immutable(landing, False)  # noqa: E731
    attempts: list[float] = []

    def sleep(seconds: float) -> None:
        attempts.append(seconds)
        if len(attempts) == 2:
            restore()

    try:
        with capture_logs() as logs, Producer(tmp_path, autoflush=False, retry=FAST, sleep=sleep) as producer:
            producer.send(_record(1))
            producer.flush()
            assert producer.acked == 1
    finally:
        restore()
    assert {e["errno"] for e in logs if e["event"] == "write_failed"} <= {"EACCES", "EPERM"}
    assert len([e for e in logs if e["event"] == "write_failed"]) == 2


# -- misuse --------------------------------------------------------------------------------------------------


def test_send_rejects_unserialisable_records(tmp_path: Path) -> None:
    """Objects json cannot encode, NaN, and raw lines with newlines are refused at send()."""
    with Producer(tmp_path, autoflush=False) as producer:
        with pytest.raises(ValueError, match="serialisable"):
            producer.send({"id": object()})
        with pytest.raises(ValueError, match="serialisable"):
            producer.send({"v": float("nan")})
        with pytest.raises(ValueError, match="must not contain"):
            producer.send_raw(b"a\nb")
    with pytest.raises(ProducerError, match="closed"):
        producer.send(_record(1))


@pytest.mark.parametrize("kwargs", [{"batch_records": 0}, {"batch_bytes": 0}, {"flush_interval_s": 0}])
def test_config_is_validated(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    """Each threshold is validated, and the message names it."""
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Producer(tmp_path, **kwargs)


# -- produce() -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [k for k in BAD_CLASSES if k != "empty_file"])
def test_each_bad_class_classifies_as_announced(kind: str) -> None:
    """Every injected bad line gets, from classify_line, the reason the producer says it has."""
    for n in range(10):
        line, reason = bad_line(kind, n, "r1", max_line_bytes=512)
        assert classify_line(line, 512) == (None, reason)


def test_produce_writes_what_it_says(tmp_path: Path) -> None:
    """Records, repeats and bad input are as the summary says; seq rises per key; every class is present."""
    out = io.StringIO()
    summary = produce(tmp_path, records=3000, keys=7, duplicates=0.1, bad=0.05, seed=3, progress=False,
                      max_line_bytes=2048, batch_records=200, stream=out)
    assert out.getvalue() == ""
    assert summary.records == 3000 and not summary.interrupted
    assert set(summary.bad_by_class) == set(BAD_CLASSES)
    assert summary.empty_files == summary.bad_by_class["empty_file"] >= 1
    report = verify(tmp_path, max_line_bytes=2048)
    assert report.ids_in == 3000
    assert report.repeated_lines_in == summary.duplicates > 0
    assert report.bad_lines_in == summary.bad_lines
    assert summary.files == report.queue_files
    last: dict[str, int] = defaultdict(int)
    first_seen: dict[str, bytes] = {}
    for line in _all_lines(tmp_path):
        record, _ = classify_line(line, 2048)
        if record is None:
            continue
        if record["id"] in first_seen:
            assert first_seen[record["id"]] == line  # a duplicate repeats the same content
            continue
        first_seen[record["id"]] = line
        assert record["seq"] == last[record["key"]] + 1
        last[record["key"]] = record["seq"]
    assert "3000 records" in summary.render() and str(tmp_path / "landing") in summary.render()
    assert json.loads(summary.to_json())["lines"] == summary.lines


def test_produce_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    """The same seed gives the same lines (ts aside); another seed gives other ones."""

    def lines(root: Path, seed: int) -> list[Any]:
        produce(root, records=500, keys=5, duplicates=0.2, bad=0.1, seed=seed, progress=False,
                max_line_bytes=512)
        out: list[Any] = []
        for line in _all_lines(root):
            record, _ = classify_line(line, 512)
            out.append(line if record is None else {k: v for k, v in record.items() if k != "ts"})
        return out

    first = lines(tmp_path / "a", 42)
    assert first == lines(tmp_path / "b", 42)
    assert first != lines(tmp_path / "c", 43)


def test_produce_respects_the_rate(tmp_path: Path) -> None:
    """At rate R lines/s, N lines take about N/R seconds on the (injected) clock."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    summary = produce(tmp_path, records=200, keys=3, rate=100, seed=1, progress=False, clock=lambda: now[0],
                      sleep=sleep)
    assert summary.lines == 200
    assert 1.98 <= summary.seconds <= 2.0
    assert summary.rate == pytest.approx(100, rel=0.02)


def test_produce_stops_early_and_flushes(tmp_path: Path) -> None:
    """Setting the stop event ends the run; what was sent is durable and the summary says interrupted."""
    stop = threading.Event()
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= 0.5:
            stop.set()

    summary = produce(tmp_path, records=1000, keys=3, rate=100, seed=1, progress=False, stop=stop,
                      clock=lambda: now[0], sleep=sleep)
    assert summary.interrupted and 0 < summary.records < 1000
    assert len(_all_lines(tmp_path)) == summary.lines
    assert summary.render().startswith("produce: interrupted")


def test_plain_progress_off_a_tty(tmp_path: Path) -> None:
    """Off a TTY, progress is a plain line every 5 s of the run."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    out = io.StringIO()
    produce(tmp_path, records=2000, keys=3, rate=200, seed=1, progress=None, stream=out, clock=lambda: now[0],
            sleep=sleep)
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("produce: ") and "records/s" in line for line in lines)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"records": -1}, "records"), ({"keys": 0}, "keys"), ({"rate": 0}, "rate"),
    ({"duplicates": 1.5}, "duplicates"), ({"bad": -0.1}, "bad"),
])
def test_produce_validates_arguments(tmp_path: Path, kwargs: dict[str, Any], field: str) -> None:
    """Out-of-range arguments are refused before anything is written, naming the argument."""
    args: dict[str, Any] = {"records": 10, "keys": 2, **kwargs}
    with pytest.raises(ValueError, match=field):
        produce(tmp_path, **args)
    assert not (tmp_path / "landing").exists()


class _FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_tty(tmp_path: Path) -> None:
    """On a TTY the rich progress bar runs (and is removed at the end) without disturbing the run."""
    out = _FakeTty()
    summary = produce(tmp_path, records=3000, keys=3, seed=1, progress=None, stream=out)
    assert summary.records == 3000
    assert out.getvalue()  # rich drew (and then cleared) the bar


# -- a topic of several queues -------------------------------------------------------------------------------


def test_records_go_to_their_keys_queue_one_file_per_queue_per_flush(tmp_path: Path) -> None:
    """In a topic of three queues each record lands in its key's queue's landing/, a flush writes one file per queue
    that has lines (names unique across the queues), a raw line goes by its key or to queue 0 without one, and an
    explicit queue or an empty file goes where it is told."""
    with Producer(tmp_path, queues=3, autoflush=False) as producer:
        for i in range(30):
            producer.send(_record(i, key=f"key-{i % 7}"))
        producer.send_raw(b"not json")
        producer.flush()
        assert producer.queues == 3 and producer.landings == [tmp_path / "queues" / str(k) / "landing"
                                                                for k in range(3)]
        producer.write_file([], queue=2)
    assert json.loads((tmp_path / "_topic.json").read_text())["queues"] == 3
    names: list[str] = []
    for k, landing in enumerate(producer.landings):
        files = _visible(landing)
        names += [p.name for p in files]
        assert len([p for p in files if p.stat().st_size]) == 1, f"queue {k}: one file per flush"
        for line in (line for p in files for line in p.read_bytes().splitlines()):
            record, _ = classify_line(line)
            assert (record is None and k == 0) or queue_of(record["key"], 3) == k  # type: ignore[index]
    assert len(names) == len(set(names)) == 4  # three queues' flushes and the empty file of queue 2
    with pytest.raises(ValueError, match="no string key"):
        Producer(tmp_path, autoflush=False).send({"id": "x", "seq": 1})
    with pytest.raises(ConfigError, match="queue=3 is not a queue of a topic of 3 queues: choose 0 to 2"):
        Producer(tmp_path, autoflush=False).send_raw(b"x", queue=3)


def test_produce_routes_misroutes_on_request_and_refuses_another_number_of_queues(tmp_path: Path) -> None:
    """`produce --queues 3 --misroute F` sends each record to its key's queue but about F of them to another (each a
    wrong_queue line there, its repeats too); a later run without --queues writes to the topic's three; --queues 2
    is refused naming both numbers and the file; --misroute on a topic of one queue is refused."""
    summary = produce(tmp_path, records=600, keys=9, duplicates=0.1, misroute=0.1, queues=3, seed=7, progress=False)
    assert summary.queues == 3 and 30 < summary.misrouted < 100
    found = {"good": 0, "wrong_queue": 0}
    for k in range(3):
        for path in iter_queue_files(QueueLayout(tmp_path, k, 3)):
            for line in path.read_bytes().splitlines():
                record, reason = classify_line(line, queue=k, queues=3)
                found["good" if record is not None else str(reason)] += 1
    assert found["wrong_queue"] >= summary.misrouted
    assert found["good"] + found["wrong_queue"] == summary.records + summary.duplicates
    assert produce(tmp_path, records=10, keys=2, seed=8, progress=False).queues == 3
    done = tenure("produce", "--data-root", str(tmp_path), "--records", "1", "--queues", "2")
    assert done.returncode == 2 and "--queues 2 does not match the topic" in done.stderr, done.stderr
    assert f"which has 3 queues ({tmp_path / '_topic.json'})" in done.stderr
    with pytest.raises(ValueError, match=r"misroute=0\.1 needs a topic of several queues"):
        produce(tmp_path / "one", records=1, keys=1, misroute=0.1, progress=False)
