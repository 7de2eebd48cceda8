"""Tests of the auditor: the line rules, and that verify catches every planted violation on real files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kazoo.client import KazooClient

from tenure.career.output import QueueOutput, publish_batch
from tenure.career.queue import REASONS, QueueLayout, classify_line
from tenure.election import GroupPaths
from tenure.errors import ConfigError
from tenure.service.ops import VERIFIED, produce, write_lines
from tenure.service.ops._verify import (
    CONTENT_FIELDS,
    LATE_REASON,
    VerifyError,
    check_data_root,
    iter_queue_files,
    verify,
)
from tests._replicas import tenure

REPO = Path(__file__).resolve().parent.parent

GOOD = {"id": "a-1", "key": "k", "seq": 1, "ts": 1_700_000_000_000, "payload": {"x": [1, 2]}}


def _line(obj: object) -> bytes:
    return json.dumps(obj).encode()


def _without(name: str) -> bytes:
    return _line({k: v for k, v in GOOD.items() if k != name})


def _with(**fields: Any) -> bytes:
    return _line({**GOOD, **fields})


CASES: list[tuple[str, bytes, str | None]] = [
    ("good", _line(GOOD), None),
    ("good_null_payload", _with(payload=None), None),
    ("good_extra_field", _with(extra="ok"), None),
    ("good_unicode", _with(key="клю́ч-鍵"), None),
    ("good_crlf", _line(GOOD) + b"\r", None),
    ("good_surrounding_spaces", b"  " + _line(GOOD) + b"\t", None),
    ("good_int64_edges", _with(seq=-(2**63), ts=2**63 - 1), None),
    ("empty", b"", "empty_line"),
    ("only_whitespace", b" \t\r", "empty_line"),
    ("oversized", _with(payload="x" * 100), "oversized"),
    ("not_utf8", _line(GOOD).replace(b'"k"', b'"\xff"'), "not_utf8"),
    ("truncated_json", _line(GOOD)[:-3], "bad_json"),
    ("trailing_garbage", _line(GOOD) + b" x", "bad_json"),
    ("two_values", b"{} {}", "bad_json"),
    ("nan_payload", _line(GOOD).replace(b'{"x": [1, 2]}', b"NaN"), "bad_json"),
    ("utf8_bom", b"\xef\xbb\xbf" + _line(GOOD), "bad_json"),
    ("array", b"[1, 2]", "not_object"),
    ("string", b'"id"', "not_object"),
    ("null", b"null", "not_object"),
    *((f"missing_{name}", _without(name), f"missing_field:{name}") for name in ("id", "key", "seq", "ts",
                                                                                 "payload")),
    ("missing_before_type", _line({"id": 5}), "missing_field:key"),
    ("id_int", _with(id=5), "bad_type:id"),
    ("id_null", _with(id=None), "bad_type:id"),
    ("key_list", _with(key=["k"]), "bad_type:key"),
    ("seq_string", _with(seq="5"), "bad_type:seq"),
    ("seq_bool", _with(seq=True), "bad_type:seq"),
    ("seq_float", _with(seq=5.0), "bad_type:seq"),
    ("seq_over_int64", _with(seq=2**63), "bad_type:seq"),
    ("ts_float_string", _with(ts="1700000000000.5"), "bad_type:ts"),
    ("ts_float", _with(ts=1.7e12), "bad_type:ts"),
    ("ts_bool", _with(ts=False), "bad_type:ts"),
]


@pytest.mark.parametrize(("raw", "expected"), [(raw, exp) for _, raw, exp in CASES],
                         ids=[c[0] for c in CASES])
def test_classify_line(raw: bytes, expected: str | None) -> None:
    """Each line class gets its stable reason; good lines come back as the parsed record."""
    record, reason = classify_line(raw, max_line_bytes=128)
    assert reason == expected
    assert (record is None) == (expected is not None)
    if expected is None:
        assert record is not None and record["id"] == GOOD["id"]
    else:
        assert reason in REASONS


def test_deep_nesting_is_bad_json_not_a_crash() -> None:
    """JSON nested past Python's recursion limit is bad_json, not a RecursionError."""
    assert classify_line(b"[" * 50_000 + b"]" * 50_000) == (None, "bad_json")


def test_oversized_is_strictly_greater_than_the_limit() -> None:
    """A line of exactly max_line_bytes is accepted; one byte more is oversized."""
    line = _with(payload="")
    pad = 200 - len(line)
    exact = _with(payload="x" * pad)
    assert len(exact) == 200
    assert classify_line(exact, 200)[1] is None
    assert classify_line(exact + b" ", 200)[1] == "oversized"


def test_reasons_are_unique_and_cover_each_class() -> None:
    """REASONS lists each reason once, with one missing_field and bad_type entry per field."""
    assert len(REASONS) == len(set(REASONS))
    assert {r.split(":")[0] for r in REASONS} == {
        "bad_json", "not_object", "missing_field", "bad_type", "oversized", "not_utf8", "empty_line", "wrong_queue"}
    assert "bad_type:payload" not in REASONS  # payload is any JSON


# -- a synthetic data root: a queue, and the output a correct pipeline would publish -------------------------


def _rec(i: int, key: str, seq: int) -> bytes:
    return _line({"id": f"id-{i}", "key": key, "seq": seq, "ts": 1_700_000_000_000 + i, "payload": {"i": i}})


def _make_queue(root: Path) -> list[str]:
    """Three queue files with repeats, bad lines and an empty file; returns the file names in order."""
    seqs: dict[str, int] = defaultdict(int)
    names = []
    i = 0
    for f in range(3):
        lines = []
        for _ in range(20):
            key = f"k{i % 4}"
            seqs[key] += 1
            lines.append(_rec(i, key, seqs[key]))
            i += 1
        lines.insert(5, lines[2])  # a repeat within the file
        lines.insert(7, b"{not json")
        lines.insert(9, b"")
        lines.append(_with(seq="7"))
        name = f"p0000000000001-0000001-{f:08d}.jsonl"
        write_lines(root / "landing", lines, name)
        names.append(name)
    lines0 = (root / "landing" / names[0]).read_bytes().splitlines()
    # a repeat across files, then an empty file (no lines)
    write_lines(root / "landing", [lines0[0]], "p0000000000001-0000001-00000009.jsonl")
    write_lines(root / "landing", [], "p0000000000001-0000001-00000010.jsonl")
    return names


_TABLE_SCHEMA = pa.schema([("id", pa.string()), ("key", pa.string()), ("seq", pa.int64()), ("ts", pa.int64()),
                           ("payload", pa.string()), ("_epoch", pa.int64()), ("_batch", pa.int64())])
_QUAR_SCHEMA = pa.schema([("value", pa.string()), ("reason", pa.string()), ("source_file", pa.string()),
                          ("line", pa.int64()), ("_epoch", pa.int64()), ("_batch", pa.int64())])


def _mark(root: Path, name: str, group: str = "default") -> None:
    """Mark the queue file ``name`` consumed by ``group``, as its leader does once the batch that read it is in."""
    folder = root / "consumed" / group
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).touch()


def _publish(root: Path, *, parts: int = 2) -> None:
    """Do what a correct pipeline does: one batch per queue file, ids deduplicated, keys split over parts, each
    file marked consumed."""
    seen: set[str] = set()
    files = sorted(iter_queue_files(root))
    for batch, path in enumerate(files, start=1):
        _mark(root, path.name)
        good: list[dict[str, Any]] = []
        bad: list[dict[str, Any]] = []
        for number, raw in enumerate(path.read_bytes().split(b"\n")[:-1], start=1):
            record, reason = classify_line(raw)
            if record is None:
                uri = path.as_uri() if number % 2 else str(path)  # both spellings occur in the wild
                bad.append({"value": raw.decode("utf-8", "replace"), "reason": reason, "source_file": uri,
                            "line": number, "_epoch": 1, "_batch": batch})
            elif record["id"] not in seen:
                seen.add(record["id"])
                payload = json.dumps(record["payload"])
                good.append({**record, "payload": payload, "_epoch": 1, "_batch": batch})
        folder = root / "table" / f"batch={batch}"
        for part in range(parts):
            mine = (r for r in good if sum(map(ord, r["key"])) % parts == part)
            rows = sorted(mine, key=lambda r: (r["key"], r["seq"]))
            if rows:
                folder.mkdir(parents=True, exist_ok=True)
                pq.write_table(pa.Table.from_pylist(rows, _TABLE_SCHEMA), folder / f"part-{part:05d}.parquet")
        if bad:
            qfolder = root / "quarantine" / f"batch={batch}"
            qfolder.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(bad, _QUAR_SCHEMA), qfolder / "part-00000.parquet")


def _parts(root: Path) -> list[Path]:
    return sorted((root / "table").rglob("part-*.parquet"))


def _rewrite(path: Path, edit: Any) -> None:
    rows = pq.read_table(path).to_pylist()
    pq.write_table(pa.Table.from_pylist(edit(rows), pq.read_schema(path)), path)


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    """A data root with a queue and its correct published output."""
    _make_queue(tmp_path)
    _publish(tmp_path)
    return tmp_path


def test_clean_dataset_is_ok(root: Path) -> None:
    """A correct output passes: every id once, every bad line once, no inversion; counts add up."""
    report = verify(root)
    assert report.ok, report.render()
    assert report.ids_in == report.ids_written == report.rows_written == 60
    assert report.repeated_lines_in == 4
    assert report.bad_lines_in == report.quarantined == report.quarantine_rows == 9
    assert report.bad_by_reason == {"bad_json": 3, "empty_line": 3, "bad_type:seq": 3}
    assert report.queue_files == 5
    first = report.render().splitlines()[0]
    assert first == ("verify: OK — 60 ids in, 60 written, 0 lost, 0 duplicated, 0 inversions; "
                     "9 bad lines, 9 quarantined")
    body = json.loads(report.to_json())
    assert body["ok"] is True and body["lost"] == 0 and body["ids_in"] == 60


def test_absent_folders_are_empty(tmp_path: Path) -> None:
    """Absent folders read as empty: an empty data root passes only with allow_empty; a queue no consumer has
    read waits whole (not lost), and fails."""
    assert not verify(tmp_path).ok
    assert verify(tmp_path, allow_empty=True).ok
    _make_queue(tmp_path)
    report = verify(tmp_path)
    assert not report.ok
    assert (report.lost, report.waiting, report.unaccounted, report.waiting_files) == (0, 60, 60, 4)
    assert report.unquarantined == report.waiting_bad_lines == 9


def test_planted_loss_is_caught(root: Path) -> None:
    """Deleting one published row is reported as one lost id, with the id as the example."""
    part = _parts(root)[0]
    dropped = pq.read_table(part).column("id")[0].as_py()
    _rewrite(part, lambda rows: rows[1:])
    report = verify(root)
    assert not report.ok
    assert report.lost == 1
    assert report.examples["lost"] == [dropped]


def test_planted_duplicate_is_caught(root: Path) -> None:
    """A row published again in a later batch is a duplicated id."""
    part = _parts(root)[0]
    row = pq.read_table(part).to_pylist()[0]
    folder = root / "table" / "batch=99"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist([{**row, "_batch": 99, "seq": 10_000}], _TABLE_SCHEMA),
                   folder / "part-00000.parquet")
    report = verify(root)
    assert not report.ok
    assert report.duplicated_ids == report.duplicated == 1
    assert report.examples["duplicated_ids"] == [{"id": row["id"], "rows": 2}]
    assert report.lost == 0 and report.inversions == 0


def test_planted_inversion_within_a_part_is_caught(root: Path) -> None:
    """Two rows of one key swapped inside a part file are an order inversion."""
    part = _parts(root)[0]

    def swap(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[0], rows[1] = rows[1], rows[0]
        assert rows[0]["key"] == rows[1]["key"]
        return rows

    _rewrite(part, swap)
    report = verify(root)
    assert not report.ok
    assert report.inversions == 1
    example = report.examples["inversions"][0]
    assert example["seq_before"] > example["seq_after"]


def test_planted_inversion_across_batches_is_caught(root: Path) -> None:
    """A key whose seq goes down from one batch to the next is an inversion, whatever the folder names."""
    first = sorted((root / "table" / "batch=1").glob("*.parquet"))[0]
    rows = pq.read_table(first).to_pylist()
    folder = root / "table" / "batch=100"  # sorts before batch=2 by name: order must come from _batch
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist([{**rows[0], "id": "new-1", "_batch": 100}], _TABLE_SCHEMA),
                   folder / "part-00000.parquet")
    late = {"id": "new-1", "key": rows[0]["key"], "seq": rows[0]["seq"], "ts": rows[0]["ts"],
            "payload": json.loads(rows[0]["payload"])}
    write_lines(root / "landing", [_line(late)], "p9-extra.jsonl")
    report = verify(root)
    assert report.inversions == 1, report.render()
    assert report.content_mismatches == 0, report.render()
    assert report.examples["inversions"][0]["batch_after"] == 100
    assert not report.ok


def test_batch_order_comes_from_the_column_not_the_path(tmp_path: Path) -> None:
    """Batches 9 and 10 live in folders that sort the other way round by name; that is no inversion."""
    write_lines(tmp_path / "landing", [_rec(1, "k", 1), _rec(2, "k", 2)], "a.jsonl")
    for batch, i, seq in ((9, 1, 1), (10, 2, 2)):
        folder = tmp_path / "table" / f"batch={batch}"
        folder.mkdir(parents=True)
        row = {"id": f"id-{i}", "key": "k", "seq": seq, "ts": 1_700_000_000_000 + i, "payload": f'{{"i":{i}}}',
               "_epoch": 1, "_batch": batch}
        pq.write_table(pa.Table.from_pylist([row], _TABLE_SCHEMA), folder / "part-00000.parquet")
    report = verify(tmp_path)
    assert report.ok, report.render()


def test_unquarantined_bad_line_is_caught(root: Path) -> None:
    """A bad line missing from quarantine/ is reported with its file, line and reason."""
    qpart = sorted((root / "quarantine").rglob("*.parquet"))[0]
    _rewrite(qpart, lambda rows: rows[1:])
    report = verify(root)
    assert not report.ok
    assert report.unquarantined == 1
    assert report.examples["unquarantined"][0]["reason"] == "bad_json"


def test_bad_line_quarantined_twice_is_a_duplicate(root: Path) -> None:
    """The same (file, line) quarantined twice — once as a path, once as a URI — counts as duplicated."""
    qpart = sorted((root / "quarantine").rglob("*.parquet"))[0]
    _rewrite(qpart, lambda rows: [*rows, {**rows[0], "source_file": "file:///elsewhere/" +
                                          Path(rows[0]["source_file"].split(":", 1)[-1]).name, "_batch": 50}])
    report = verify(root)
    assert not report.ok
    assert report.duplicated_bad_lines == 1 and report.duplicated == 1


def test_unexpected_rows_are_caught(root: Path) -> None:
    """A written id the queue never held, and a quarantine row for no bad line, are both unexpected."""
    folder = root / "table" / "batch=77"
    folder.mkdir()
    row = {"id": "ghost", "key": "zz", "seq": 1, "ts": 0, "payload": "{}", "_epoch": 1, "_batch": 77}
    pq.write_table(pa.Table.from_pylist([row], _TABLE_SCHEMA), folder / "part-00000.parquet")
    qfolder = root / "quarantine" / "batch=77"
    qfolder.mkdir()
    qrow = {"value": "x", "reason": "bad_json", "source_file": "nowhere.jsonl", "line": 3, "_epoch": 1,
            "_batch": 77}
    pq.write_table(pa.Table.from_pylist([qrow], _QUAR_SCHEMA), qfolder / "part-00000.parquet")
    report = verify(root)
    assert not report.ok
    assert report.unexpected_ids == 1 and report.unexpected_quarantined == 1 and report.unexpected == 2
    assert report.examples["unexpected_ids"] == ["ghost"]


def test_hidden_and_staging_files_are_skipped(root: Path) -> None:
    """Files in _staging/ or with hidden names are not published output or queue, and do not count."""
    staging = root / "table" / "_staging" / "epoch=9"
    staging.mkdir(parents=True)
    shutil.copy(_parts(root)[0], staging / "part-00000.parquet")
    shutil.copy(_parts(root)[0], root / "table" / "batch=1" / ".part-00000.parquet.crc")
    (root / "table" / "_SUCCESS").write_bytes(b"")
    (root / "landing" / ".p-being-written.jsonl.tmp").write_bytes(b"garbage")
    (root / "landing" / "_p-hidden.jsonl").write_bytes(b"garbage\n")
    (root / "landing" / "notes.txt").write_bytes(b"garbage\n")
    report = verify(root)
    assert report.ok, report.render()


def test_archive_is_read_recursively(root: Path) -> None:
    """Queue files moved into archive/ subfolders still count as queue input."""
    sub = root / "archive" / "2024-01-01"
    sub.mkdir(parents=True)
    for path in sorted((root / "landing").glob("*.jsonl"))[:2]:
        path.rename(sub / path.name)
    report = verify(root)
    assert report.ok, report.render()
    assert report.ids_in == 60 and report.queue_files == 5


def test_reason_mismatch_is_reported_but_not_fatal(root: Path) -> None:
    """A quarantine reason that differs from classify_line's is counted for information only."""
    qpart = sorted((root / "quarantine").rglob("*.parquet"))[0]
    _rewrite(qpart, lambda rows: [{**rows[0], "reason": "something_else"}, *rows[1:]])
    report = verify(root)
    assert report.ok
    assert report.reason_mismatches == 1


def test_missing_column_is_a_clear_error(root: Path) -> None:
    """A part file without the required columns raises VerifyError naming the file and the columns."""
    part = _parts(root)[0]
    pq.write_table(pq.read_table(part).drop_columns(["_batch"]), part)
    with pytest.raises(VerifyError, match=r"lacks column\(s\) _batch"):
        verify(root)


def test_max_line_bytes_must_be_positive(tmp_path: Path) -> None:
    """A non-positive line limit is rejected with the value in the message."""
    with pytest.raises(ValueError, match="max_line_bytes=0"):
        verify(tmp_path, max_line_bytes=0)


def test_a_file_being_archived_is_counted_once(root: Path) -> None:
    """A leader archiving while verify runs: a file seen in landing/ and again in archive/ counts once (a rename
    keeps the inode; a hard link shows the one file in both folders, as a scan across the rename does)."""
    name = sorted((root / "landing").glob("*.jsonl"))[0].name
    (root / "archive").mkdir()
    os.link(root / "landing" / name, root / "archive" / name)
    report = verify(root)
    assert report.ok, report.render()
    assert report.queue_files == 5 and report.ids_in == 60


def test_a_name_used_again_is_another_file(root: Path) -> None:
    """A producer used a name again: the archived file and the new one in landing/ are both read (verify once
    skipped the second by name, and its ids went missing)."""
    name = sorted((root / "landing").glob("*.jsonl"))[0].name
    (root / "archive").mkdir()
    (root / "landing" / name).rename(root / "archive" / name)
    (root / "landing" / name).write_text(json.dumps({"id": "again-1", "key": "again", "seq": 1, "ts": 0,
                                                     "payload": {}}) + "\n")
    report = verify(root)
    assert report.ids_in == 61 and report.queue_files == 6, report.render()
    assert report.waiting == 1 and report.lost == 0, "the new file is not read yet: lag, not loss"


#: Root without the capabilities that let it read any file: another user's file of mode 0600 is EACCES to it.
_NO_DAC = ("setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search")


def test_a_queue_file_verify_may_not_read_fails_the_audit_unless_the_consumer_refused_it(root: Path) -> None:
    """``tenure verify`` run by a user who may not read a queue file (another user's, mode 0600) cannot audit its
    ids: exit 2, one line naming the file and the fix. Once the consumer has refused that file (a quarantine row at
    line 0, reason ``unreadable``, as its batch writes it), the file's ids are the consumer's to replay, not this
    audit's to read: it passes, and a reader that can read the file counts them as refused, not lost."""
    name = "p0000000000002-0000001-00000000.jsonl"
    write_lines(root / "landing", [_rec(900, "kx", 1)], name)
    secret = root / "landing" / name
    secret.chmod(0o600)
    os.chown(secret, 65534, 65534)
    _mark(root, name)
    command = [*_NO_DAC, sys.executable, "-m", "tenure", "verify", "--data-root", str(root)]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"tenure: error: cannot read queue file {name} (PermissionError: Permission denied; 1 such file(s)): " \
           "run verify as a user that can read the queue" in refused.stderr.splitlines()
    folder = root / "quarantine" / "batch=9"
    folder.mkdir()
    row = {"value": "EACCES: Permission denied", "reason": "unreadable", "source_file": secret.as_uri(), "line": 0,
           "_epoch": 1, "_batch": 9}
    pq.write_table(pa.Table.from_pylist([row], _QUAR_SCHEMA), folder / "part-00000.parquet")
    audited = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120, cwd=REPO,
                             check=False)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert json.loads(audited.stdout)["entries_refused"] == 1
    report = verify(root)  # as root: the file is read, and its id is refused, not lost
    assert report.ok and (report.entries_refused, report.ids_refused, report.lost) == (1, 1, 0), report.render()


# -- the CLI: a wrong path, an empty queue, exit codes, JSON on stdout ----------------------------------------



def test_cli_refuses_a_data_root_that_does_not_exist(tmp_path: Path) -> None:
    """`tenure verify --data-root /typo` exits 2 with one line naming the path and the flag, nothing on stdout."""
    result = tenure("verify", "--data-root", str(tmp_path / "typo"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("tenure: error:")]
    assert errors == [f"tenure: error: data root {tmp_path / 'typo'} does not exist: check --data-root"]


@pytest.mark.parametrize(("layout", "queue", "message"), [
    ("file", False, "is not a directory: check --data-root"),
    ("no_layout", False, "is not a data root (no landing/, archive/, queues/ or table/ in it): check --data-root"),
    ("queue_missing", True, "queue dir {queue} does not exist: check --queue-dir"),
    ("queue_without_folders", True, "is not a queue (no landing/, archive/ or queues/ in it): check --queue-dir"),
], ids=["file", "no_layout", "queue_missing", "queue_without_folders"])
def test_not_a_data_root_is_a_clear_error(tmp_path: Path, layout: str, queue: bool, message: str) -> None:
    """A file, a folder with none of landing/, archive/, queues/, table/, or a queue dir without a queue is
    refused."""
    root = tmp_path / "root"
    queue_dir = tmp_path / "queue"
    if layout == "file":
        root.write_text("")
    else:
        root.mkdir()
        (root / "checkpoint").mkdir()  # something, but not a data root's folders
    if layout == "queue_without_folders":
        queue_dir.mkdir()
    with pytest.raises(VerifyError) as caught:
        check_data_root(root, queue_dir if queue else None)
    assert message.format(queue=queue_dir) in str(caught.value)


def test_a_data_root_with_only_a_table_or_a_queue_is_accepted(tmp_path: Path) -> None:
    """Each of landing/, archive/ and table/ alone makes a data root; a group's root with a queue dir too."""

    def refusal(root: Path, queue: Path | None = None) -> str | None:
        try:
            check_data_root(root, queue)
        except VerifyError as exc:
            return str(exc)
        return None

    for name in ("landing", "archive", "table"):
        (tmp_path / name).mkdir()
        assert refusal(tmp_path) is None, name
        (tmp_path / name).rmdir()
    (tmp_path / "queue" / "archive").mkdir(parents=True)
    (tmp_path / "group").mkdir()
    assert refusal(tmp_path / "group", tmp_path / "queue") is None


def test_an_audit_of_no_id_fails_unless_allowed(tmp_path: Path) -> None:
    """A queue without a valid id fails (exit 1, saying why and how to allow it); --allow-empty passes (exit 0)."""
    write_lines(tmp_path / "landing", [b"{not json"], "p1.jsonl")  # a bad line, but no id
    report = verify(tmp_path)
    assert not report.ok and report.empty
    assert "no valid id in the queue" in report.summary_line() and "--allow-empty" in report.summary_line()
    assert verify(tmp_path, allow_empty=True).ok is False  # its bad line was never quarantined
    (tmp_path / "landing" / "p1.jsonl").unlink()
    assert verify(tmp_path, allow_empty=True).ok
    failed = tenure("verify", "--data-root", str(tmp_path))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert failed.stdout.startswith("verify: FAILED — no valid id in the queue")
    allowed = tenure("verify", "--data-root", str(tmp_path), "--allow-empty", "--json")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    body = json.loads(allowed.stdout)
    assert body["ok"] is True and body["empty"] is True and body["allow_empty"] is True


def test_cli_exit_codes_and_json_on_stdout(root: Path) -> None:
    """A clean root exits 0 with one JSON object on stdout and nothing on stderr (a command for people shows only
    warnings there); a changed row exits 1."""
    clean = tenure("verify", "--data-root", str(root), "--json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert len(clean.stdout.splitlines()) == 1 and clean.stderr == ""
    merged = subprocess.run([sys.executable, "-m", "tenure", "verify", "--data-root", str(root), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, cwd=REPO,
                            check=False)
    assert json.loads(merged.stdout)["ok"] is True, "`verify --json 2>&1` must be exactly one JSON document"
    logged = subprocess.run([sys.executable, "-m", "tenure", "--log-level", "info", "verify", "--data-root",
                             str(root), "--json"], capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert f'"event": "{VERIFIED}"' in logged.stderr, "--log-level given: its events are shown on stderr"
    body = json.loads(clean.stdout)
    assert body["ok"] is True and body["rows_compared"] == 60 and body["content_mismatches"] == 0
    assert {"ids_late", "late_rows", "late_repeats", "wrongly_late", "retry_batch", "retry_oldest_age_s",
            "content_mismatches_by_field", "content_fields", "empty"} <= body.keys()
    part = _parts(root)[0]
    _rewrite(part, lambda rows: [{**rows[0], "payload": '{"i":-1}'}, *rows[1:]])
    changed = tenure("verify", "--data-root", str(root))
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert changed.stdout.startswith("verify: FAILED") and "1 content mismatches" in changed.stdout
    ignored = tenure("verify", "--data-root", str(root), "--ignore-field", "payload")
    assert ignored.returncode == 0, ignored.stdout + ignored.stderr


# -- content: each written row holds its queue line ------------------------------------------------------------


@pytest.mark.parametrize(("name", "value"), [
    ("key", "k-other"), ("seq", 999), ("ts", 5), ("payload", '{"i":-1}'),
], ids=["key", "seq", "ts", "payload"])
def test_a_row_that_differs_from_its_queue_line_is_caught(root: Path, name: str, value: Any) -> None:
    """A written row whose key, seq, ts or payload differs from its queue line fails, naming id and field."""
    part = _parts(root)[0]
    row = pq.read_table(part).to_pylist()[0]
    _rewrite(part, lambda rows: [{**rows[0], name: value}, *rows[1:]])
    report = verify(root)
    assert not report.ok
    assert report.content_mismatches == 1 and report.content_mismatches_by_field == {name: 1}
    assert report.rows_compared == 60
    expected = json.loads(row["payload"]) if name == "payload" else row[name]
    found = json.loads(value) if name == "payload" else value
    assert report.examples["content_mismatches"] == [
        {"id": row["id"], "in": "table", "field": name, "expected": expected, "found": found}]
    assert "e.g. content_mismatches: " in report.render()
    assert verify(root, content_fields=[f for f in CONTENT_FIELDS if f != name]).content_mismatches == 0


def test_payload_is_compared_as_json_not_text(root: Path) -> None:
    """Spaces and key order do not matter; a value's type does (true is not 1, "1" is not 1)."""
    write_lines(root / "landing", [_line({"id": "p-1", "key": "kp", "seq": 1, "ts": 7,
                                          "payload": {"a": 1, "b": [True, None, "x"]}})], "p9-extra.jsonl")
    folder = root / "table" / "batch=90"
    folder.mkdir()

    def publish(payload: str) -> Any:
        row = {"id": "p-1", "key": "kp", "seq": 1, "ts": 7, "payload": payload, "_epoch": 1, "_batch": 90}
        pq.write_table(pa.Table.from_pylist([row], _TABLE_SCHEMA), folder / "part-00000.parquet")
        return verify(root)

    assert publish('{ "b": [true, null, "x"],  "a": 1 }').ok
    report = publish('{"a":1,"b":[1,null,"x"]}')
    assert report.content_mismatches == 1
    assert report.examples["content_mismatches"][0]["found"] == {"a": 1, "b": [1, None, "x"]}
    assert publish('{"a":"1","b":[true,null,"x"]}').content_mismatches == 1
    assert publish("not json").examples["content_mismatches"][0]["found"] == "not json"


def test_long_payloads_are_compared_too(root: Path) -> None:
    """A payload longer than what is kept inline (kept as a digest) still matches as JSON, and mismatches."""
    payload = {"text": "x" * 1000, "n": 1}
    write_lines(root / "landing", [_line({"id": "long-1", "key": "kl", "seq": 1, "ts": 7, "payload": payload})],
                "p9-extra.jsonl")
    folder = root / "table" / "batch=90"
    folder.mkdir()

    def publish(value: Any) -> Any:
        row = {"id": "long-1", "key": "kl", "seq": 1, "ts": 7, "payload": json.dumps(value, indent=1),
               "_epoch": 1, "_batch": 90}
        pq.write_table(pa.Table.from_pylist([row], _TABLE_SCHEMA), folder / "part-00000.parquet")
        return verify(root)

    assert publish({"n": 1, "text": "x" * 1000}).ok
    report = publish({**payload, "n": 2})
    assert report.content_mismatches == 1 and report.examples["content_mismatches"][0]["field"] == "payload"


def test_a_repeat_with_changed_content_may_be_written_as_either(root: Path) -> None:
    """An id the queue holds twice with different payloads passes when its row equals either, fails otherwise."""
    versions = [{"id": "r-1", "key": "kr", "seq": 1, "ts": 7, "payload": {"v": v}} for v in (1, 2)]
    write_lines(root / "landing", [_line(versions[0])], "p9-a.jsonl")
    write_lines(root / "landing", [_line(versions[1])], "p9-b.jsonl")
    folder = root / "table" / "batch=90"
    folder.mkdir()

    def publish(v: int) -> Any:
        row = {**versions[0], "payload": json.dumps({"v": v}), "_epoch": 1, "_batch": 90}
        pq.write_table(pa.Table.from_pylist([row], _TABLE_SCHEMA), folder / "part-00000.parquet")
        return verify(root)

    for v in (1, 2):
        report = publish(v)
        assert report.ok and report.changed_repeats == 1, report.render()
    report = publish(3)
    assert not report.ok and report.content_mismatches == 1
    example = report.examples["content_mismatches"][0]
    assert example["expected"] == {"v": 1} and example["found"] == {"v": 3} and example["queue_versions"] == 2


# -- the retry store: held records are not lost, and their age is reported ------------------------------------

_RETRY_SCHEMA = pa.schema([
    ("id", pa.string()), ("key", pa.string()), ("seq", pa.int64()), ("ts", pa.int64()), ("payload", pa.string()),
    ("attempts", pa.int32()), ("first_failed_at", pa.float64()), ("last_failed_at", pa.float64()),
    ("due_at", pa.float64()), ("error", pa.string()),
])  # tenure.career.spark._retry's snapshot columns (imported from there it would need pyspark)


def _snapshot(root: Path, batch: int, part: int, rows: list[dict[str, Any]], first_failed_at: list[float | None]
              ) -> None:
    held = [{**r, "attempts": 0 if t is None else 1, "first_failed_at": t, "last_failed_at": t,
             "due_at": None if t is None else t + 60, "error": None if t is None else "ValueError: no"}
            for r, t in zip(rows, first_failed_at, strict=True)]
    (root / "retry").mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist(held, _RETRY_SCHEMA),
                   root / "retry" / f"batch-{batch:012d}-part-{part:05d}.parquet")


def test_records_in_the_current_retry_snapshot_are_reported_with_their_age(root: Path) -> None:
    """Ids held in every part of the newest snapshot are waiting (not lost), with the oldest one's age; the
    superseded snapshot of an earlier batch does not count."""
    part = _parts(root)[0]
    rows = pq.read_table(part).to_pylist()
    _rewrite(part, lambda r: r[4:])  # four rows not written: three held now, one only in an older snapshot
    held = [{k: r[k] for k in ("id", "key", "seq", "ts", "payload")} for r in rows[:4]]
    now = 1_800_000_000.0
    _snapshot(root, 9, 0, held[3:4], [now - 999])
    _snapshot(root, 10, 0, held[:1], [now - 120.5])
    _snapshot(root, 10, 1, held[1:3], [now - 30, None])  # a waiter behind a failed record has no failure time
    report = verify(root, now=now)
    assert report.ids_waiting == 3 and report.retry_batch == 10 and report.retry_oldest_age_s == 120.5
    assert report.lost == 1 and report.examples["lost"] == [rows[3]["id"]]
    assert report.examples["waiting"] == [
        {"id": rows[0]["id"], "key": rows[0]["key"], "attempts": 1, "age_s": 120.5},
        {"id": rows[1]["id"], "key": rows[1]["key"], "attempts": 1, "age_s": 30.0},
        {"id": rows[2]["id"], "key": rows[2]["key"], "attempts": 0, "age_s": None},
    ]
    assert "3 waiting for retry (oldest 120 s)" in report.summary_line()
    assert "retry snapshot batch / oldest" in report.render() and "10 / 120.5 s" in report.render()
    (root / "retry" / "batch-000000000009-part-00000.parquet").unlink()
    _snapshot(root, 10, 2, held[3:4], [now - 5])
    assert verify(root, now=now).ok


# -- late records: quarantined as "late", accounted for, and each claim checked ----------------------------


def _late(root: Path, *, rid: str = "late-1", seq_above: int = 0, batch: int | None = None,
          value: str | None = None, name: str = "p9-late.jsonl") -> dict[str, Any]:
    """Queue a record of a published key with that key's highest seq (plus ``seq_above``), and quarantine it as
    late in a batch after every published one (or ``batch``); returns the record."""
    table = pq.read_table(_parts(root)[0]).to_pylist()
    key = table[0]["key"]
    published = [r for p in _parts(root) for r in pq.read_table(p).to_pylist() if r["key"] == key]
    top = max(published, key=lambda r: r["seq"])
    record = {"id": rid, "key": key, "seq": top["seq"] + seq_above, "ts": 1, "payload": {"late": True}}
    write_lines(root / "landing", [_line(record)], name)
    _mark(root, name)
    last = max(r["_batch"] for p in _parts(root) for r in pq.read_table(p).to_pylist())
    qrow = {"value": json.dumps(record, separators=(",", ":")) if value is None else value, "reason": LATE_REASON,
            "source_file": (root / "landing" / name).as_uri(), "line": 1, "_epoch": 1,
            "_batch": last + 1 if batch is None else batch}
    folder = root / "quarantine" / f"batch={qrow['_batch']}-{rid}"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([qrow], _QUAR_SCHEMA), folder / "part-00000.parquet")
    return {**record, "batch": qrow["_batch"], "top_batch": top["_batch"]}


def test_a_late_record_is_accounted_for_and_reported(root: Path) -> None:
    """A record quarantined as late, its key having published a seq at least its own earlier, passes: not lost,
    not a bad line (quarantine counts unchanged), not unexpected; counted and shown."""
    record = _late(root)
    report = verify(root)
    assert report.ok, report.render()
    assert report.ids_late == report.late_rows == 1 and report.late_repeats == 0 and report.wrongly_late == 0
    assert report.lost == 0 and report.unexpected == 0 and report.duplicated == 0
    assert report.bad_lines_in == report.quarantined == report.quarantine_rows == 9
    assert report.rows_compared == 61  # the late record matched its queue line too
    assert report.examples["late"] == [{"id": "late-1", "key": record["key"], "seq": record["seq"],
                                        "batch": record["batch"], "published_before": record["seq"]}]
    assert report.summary_line().startswith("verify: OK — 61 ids in, 60 written, 1 late, 0 lost")


@pytest.mark.parametrize("case", ["seq_above_published", "published_only_in_the_same_batch", "no_record"])
def test_a_record_that_was_not_late_is_wrongly_late(root: Path, case: str) -> None:
    """A late claim fails when no earlier batch published its key with a seq at least its own (a higher seq in
    the same batch does not count), or when the row holds no record."""
    if case == "seq_above_published":
        _late(root, seq_above=1)
    elif case == "published_only_in_the_same_batch":
        table = pq.read_table(_parts(root)[0]).to_pylist()
        top_batch = max(r["_batch"] for p in _parts(root) for r in pq.read_table(p).to_pylist()
                        if r["key"] == table[0]["key"])
        _late(root, batch=top_batch)
    else:
        _late(root, value="{not a record")
    report = verify(root)
    assert not report.ok
    assert report.wrongly_late == 1, report.render()
    assert "1 wrongly late" in report.summary_line()
    example = report.examples["wrongly_late"][0]
    if case == "no_record":
        assert example["why"] == "its value holds no valid record" and report.lost == 1
    else:
        assert example["id"] == "late-1" and report.lost == 0
        before = example["published_before"]
        assert before == example["seq"] - 1 if case == "seq_above_published" else before is None or \
            before < example["seq"]


@pytest.mark.parametrize("dead_batch", ["earlier", "same"])
def test_a_dead_lettered_seq_makes_a_later_copy_late(root: Path, dead_batch: str) -> None:
    """A dead-lettered record moves its key past it, as a written one does: a copy quarantined as late in a later
    batch passes (the id, dead-lettered and late, is neither lost nor duplicated); a dead letter of the same
    batch does not make it late."""
    record = _late(root, seq_above=1)  # above every written seq of its key: late only by the dead letter
    batch = record["batch"] - 1 if dead_batch == "earlier" else record["batch"]
    dead = {**{k: record[k] for k in ("id", "key", "seq", "ts")}, "payload": json.dumps(record["payload"]),
            "attempts": 1, "first_failed_at": 1.0, "last_failed_at": 1.0, "due_at": None,
            "error": "RuntimeError: poison", "_epoch": 1, "_batch": batch}
    (root / "dead-letter").mkdir()
    schema = _RETRY_SCHEMA.append(pa.field("_epoch", pa.int64())).append(pa.field("_batch", pa.int64()))
    pq.write_table(pa.Table.from_pylist([dead], schema),
                   root / "dead-letter" / f"batch-{batch:012d}-part-00000.parquet")
    report = verify(root)
    assert (report.ids_dead_lettered, report.ids_late, report.lost, report.duplicated) == (1, 1, 0, 0), \
        report.render()
    if dead_batch == "earlier":
        assert report.ok and report.wrongly_late == 0, report.render()
        assert report.examples["late"][0]["published_before"] == record["seq"]
    else:
        assert not report.ok and report.wrongly_late == 1, report.render()


def test_a_late_repeat_is_neither_lost_nor_duplicated(root: Path) -> None:
    """An id written once, its repeat arriving after the dedup window and quarantined as late: OK."""
    part = _parts(root)[0]
    row = pq.read_table(part).to_pylist()[0]
    repeat = {k: row[k] for k in ("id", "key", "seq", "ts")} | {"payload": json.loads(row["payload"])}
    write_lines(root / "landing", [_line(repeat)], "p9-repeat.jsonl")
    last = max(r["_batch"] for p in _parts(root) for r in pq.read_table(p).to_pylist())
    folder = root / "quarantine" / "batch=late"
    folder.mkdir()
    qrow = {"value": json.dumps(repeat, separators=(",", ":")), "reason": LATE_REASON,
            "source_file": str(root / "landing" / "p9-repeat.jsonl"), "line": 1, "_epoch": 1, "_batch": last + 1}
    pq.write_table(pa.Table.from_pylist([qrow], _QUAR_SCHEMA), folder / "part-00000.parquet")
    report = verify(root)
    assert report.ok, report.render()
    assert report.ids_late == 1 and report.late_repeats == 1
    assert report.duplicated == 0 and report.lost == 0 and report.unexpected == 0 and report.inversions == 0


def test_a_late_line_quarantined_twice_is_a_duplicate(root: Path) -> None:
    """The same queue line quarantined late twice is a duplicate (of late lines, not of bad lines)."""
    record = _late(root)
    folder = root / "quarantine" / "batch=again"
    shutil.copytree(root / "quarantine" / f"batch={record['batch']}-late-1", folder)
    report = verify(root)
    assert not report.ok
    assert report.duplicated_late_lines == report.duplicated == 1 and report.duplicated_bad_lines == 0
    assert report.examples["duplicated_late_lines"] == [{"file": "p9-late.jsonl", "line": 1, "rows": 2}]


# -- loss or lag: what the group has read, the commit record, records held for retry too long ------------------

_NEW = "p0000000000002-0000001-00000000.jsonl"  # sorts after every file of _make_queue


def _queue_more(root: Path, name: str = _NEW, *, count: int = 3, bad_line: bool = True,
                also: list[bytes] | None = None) -> list[str]:
    """Queue one file of ``count`` new records (ids ``new-<i>``) and a bad line (unless not ``bad_line``) that no
    output holds, plus the lines ``also``; returns the new ids."""
    ids = [f"new-{i}" for i in range(count)]
    lines = [_line({"id": rid, "key": "kn", "seq": i + 1, "ts": 1, "payload": None}) for i, rid in enumerate(ids)]
    write_lines(root / "landing", [*lines, *([b"{not json"] if bad_line else []), *(also or [])], name)
    return ids


def _checkpoint(root: Path, epoch: int | None, batch: int, names: list[str], *, committed: bool = True) -> None:
    """Write what term ``epoch``'s Spark checkpoint (None: the flat one of a tenure before per-term folders)
    holds for ``batch``: its end offset naming the queue files ``names`` and, if ``committed``, its commit."""
    folder = root / "checkpoint" / ("" if epoch is None else f"epoch={epoch}")
    (folder / "offsets").mkdir(parents=True, exist_ok=True)
    end = {"files": [[name, _mtime_ns(root / "landing" / name), 1] for name in names], "pending": []}
    (folder / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(end)}\n')
    if committed:
        (folder / "commits").mkdir(exist_ok=True)
        (folder / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def _mtime_ns(path: Path) -> int:
    """A queue file's modification time, as the queue source's offset records it (1: no such file)."""
    return path.stat().st_mtime_ns if path.exists() else 1


def _drop_row(root: Path, rid: str) -> None:
    """Delete the published row of ``rid``."""
    for part in _parts(root):
        _rewrite(part, lambda rows: [r for r in rows if r["id"] != rid])


def test_ids_only_in_a_file_not_read_yet_are_waiting_not_lost(root: Path) -> None:
    """A file the group has not read (in landing/, unmarked, in no committed batch) holds lag: its missing ids
    are waiting, its bad line too, and the audit fails; an id with a copy in a read file is lost even so."""
    first, second = ((root / "landing" / f"p0000000000001-0000001-0000000{f}.jsonl").read_bytes().splitlines()[0]
                     for f in (0, 1))
    for line in (first, second):
        _drop_row(root, json.loads(line)["id"])
    _queue_more(root, also=[first])  # read after its copy in a read file
    write_lines(root / "landing", [second], "a-unread.jsonl")  # read before its copy in a read file
    report = verify(root)
    assert not report.ok
    assert (report.lost, report.waiting, report.unaccounted, report.waiting_files) == (2, 3, 5, 2)
    assert report.unquarantined == report.waiting_bad_lines == 1
    assert report.examples["lost"] == sorted(json.loads(line)["id"] for line in (first, second))
    assert report.examples["waiting_files"] == ["a-unread.jsonl", _NEW]
    assert "2 lost, 3 waiting (and 1 bad line) in 2 files not read yet, " in report.summary_line()
    assert "not read yet: ids / bad lines / files  3 / 1 / 2 (group default)" in report.render()


@pytest.mark.parametrize("how", ["archived", "marked", "marked_by_the_only_group", "committed", "flat_checkpoint"])
def test_ids_missing_from_a_file_the_group_has_read_are_lost(root: Path, how: str) -> None:
    """A file in archive/, marked by the group (when no group is named, the only group with marks), or named by
    a batch the newest checkpoint has committed has been read: its missing ids are lost, and no flag excuses
    them."""
    ids = _queue_more(root)
    if how == "archived":
        (root / "archive").mkdir()
        (root / "landing" / _NEW).rename(root / "archive" / _NEW)
    elif how == "marked":
        _mark(root, _NEW)
    elif how == "marked_by_the_only_group":
        (root / "consumed" / "default").rename(root / "consumed" / "orders")
        _mark(root, _NEW, group="orders")
        assert verify(root, group="default").lost == 0, "another group's marks say nothing of this one"
    else:
        _checkpoint(root, None if how == "flat_checkpoint" else 5, 7, [_NEW])
    report = verify(root)
    assert (report.lost, report.waiting, report.waiting_files, report.unaccounted) == (3, 0, 0, 3)
    assert report.examples["lost"] == ids and report.unquarantined == 1 and report.waiting_bad_lines == 0
    assert report.group == ("orders" if how == "marked_by_the_only_group" else "default")
    assert not verify(root, allow_waiting=True).ok


def test_only_a_batch_the_newest_checkpoint_committed_reads_a_file(root: Path) -> None:
    """A batch planned but not committed has not read its files, nor has one committed only in an older term's
    checkpoint (a stale term's commit there was fenced); the newest term's commit has."""
    _queue_more(root)
    _checkpoint(root, 5, 7, [_NEW], committed=False)
    _checkpoint(root, 4, 7, [_NEW])
    report = verify(root)
    assert (report.lost, report.waiting) == (0, 3)
    _checkpoint(root, 5, 7, [_NEW])
    report = verify(root)
    assert (report.lost, report.waiting) == (3, 0)


def test_a_newer_file_under_a_marked_name_is_not_read_yet(root: Path) -> None:
    """A mark older than its file's modification time is of an earlier file under that name (the queue source
    reads the new one as new): the new file's ids are waiting."""
    _queue_more(root)
    _mark(root, _NEW)
    os.utime(root / "consumed" / "default" / _NEW, ns=(1, 1))
    report = verify(root)
    assert (report.lost, report.waiting) == (0, 3)


def test_allow_waiting_passes_what_waits_and_nothing_else(root: Path) -> None:
    """--allow-waiting turns an audit that fails only on waiting ids and bad lines into a pass; a lost id in a
    read file still fails it."""
    for count, bad_line in ((0, True), (3, False)):  # a bad line alone, then records alone
        _queue_more(root, count=count, bad_line=bad_line)
        assert not verify(root).ok
        report = verify(root, allow_waiting=True)
        assert report.ok, report.render()
        assert (report.waiting, report.waiting_bad_lines, report.waiting_files) == (count, int(bad_line), 1)
        assert report.summary_line().startswith("verify: OK") and report.allow_waiting
        (root / "landing" / _NEW).unlink()
    _queue_more(root)
    _drop_row(root, "id-0")
    report = verify(root, allow_waiting=True)
    assert not report.ok and report.lost == 1


def test_a_batch_published_by_two_epochs_fails(root: Path) -> None:
    """One _batch with two _epoch values across table/ and quarantine/ is a batch published by two terms."""
    part = sorted((root / "quarantine").rglob("*.parquet"))[0]
    batch = pq.read_table(part).column("_batch")[0].as_py()
    assert verify(root).batches_with_two_epochs == 0
    _rewrite(part, lambda rows: [{**r, "_epoch": 2} for r in rows])
    report = verify(root)
    assert not report.ok and report.batches_with_two_epochs == 1
    assert report.examples["batches_with_two_epochs"] == [
        {"batch": batch, "epochs": {"1": ["table"], "2": ["quarantine"]}}]
    assert "1 batches published by two epochs" in report.summary_line()


def test_output_above_the_committed_batch_fails(root: Path) -> None:
    """Given the group's committed batch, output of a later _batch (no commit covers it) fails; a function is
    read once the output is; without it the check is skipped, and the report says so."""
    top = max(r["_batch"] for p in _parts(root) for r in pq.read_table(p).to_pylist())
    unchecked = verify(root)
    assert unchecked.ok and unchecked.committed_batch is None
    assert "not checked: pass --zk and --group" in unchecked.render()
    covered = verify(root, committed_batch=top)
    assert covered.ok and covered.committed_batch == top and covered.batches_above_commit == 0
    report = verify(root, committed_batch=lambda: top - 1)
    assert not report.ok and report.committed_batch == top - 1 and report.batches_above_commit == 1
    assert report.examples["batches_above_commit"] == [{"batch": top, "epochs": {"1": ["quarantine", "table"]}}]
    assert "1 batches above the committed one" in report.summary_line()


def test_an_id_held_for_retry_longer_than_allowed_fails(root: Path) -> None:
    """With max_retry_age_s, an id held in the retry store longer than that since its first failure fails the
    audit and is named; a waiter with no failure time, or a younger one, does not."""
    part = _parts(root)[0]
    rows = pq.read_table(part).to_pylist()
    _rewrite(part, lambda r: r[3:])
    held = [{k: r[k] for k in ("id", "key", "seq", "ts", "payload")} for r in rows[:3]]
    now = 1_800_000_000.0
    _snapshot(root, 10, 0, held, [now - 120.5, now - 30, None])
    assert verify(root, now=now).ok
    report = verify(root, now=now, max_retry_age_s=60)
    assert not report.ok and report.retry_too_old == 1 and report.max_retry_age_s == 60
    assert report.examples["retry_too_old"] == [
        {"id": rows[0]["id"], "key": rows[0]["key"], "attempts": 1, "age_s": 120.5}]
    assert "1 held for retry too long" in report.summary_line()
    assert verify(root, now=now, max_retry_age_s=200).ok


def test_cli_json_has_the_new_fields_and_the_new_flags_work(root: Path) -> None:
    """--json carries waiting, unaccounted and the commit and retry checks; --allow-waiting passes a lagging
    root; --zk without --group is refused in one line."""
    _queue_more(root)
    lagging = tenure("verify", "--data-root", str(root), "--json")
    assert lagging.returncode == 1, lagging.stdout + lagging.stderr
    body = json.loads(lagging.stdout)
    assert {k: body[k] for k in ("ok", "lost", "waiting", "waiting_files", "waiting_bad_lines", "unaccounted",
                                 "allow_waiting", "group", "batches_with_two_epochs", "committed_batch",
                                 "batches_above_commit", "max_retry_age_s", "retry_too_old")} == {
        "ok": False, "lost": 0, "waiting": 3, "waiting_files": 1, "waiting_bad_lines": 1, "unaccounted": 3,
        "allow_waiting": False, "group": "default", "batches_with_two_epochs": 0, "committed_batch": None,
        "batches_above_commit": 0, "max_retry_age_s": None, "retry_too_old": 0}
    assert body["examples"]["waiting_files"] == [_NEW]
    allowed = tenure("verify", "--data-root", str(root), "--allow-waiting", "--group", "default",
                             "--max-retry-age-s", "60", "--json")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    body = json.loads(allowed.stdout)
    assert body["ok"] is True and body["allow_waiting"] is True and body["max_retry_age_s"] == 60
    refused = tenure("verify", "--data-root", str(root), "--zk", "127.0.0.1:1")
    assert refused.returncode == 2 and refused.stdout == ""
    assert "tenure: error: --zk needs --group: name the group whose committed batch verify should check" in \
        refused.stderr.splitlines()


def test_cli_checks_the_output_against_the_groups_commit_record(root: Path, zk_client: KazooClient,
                                                                 zk_hosts: str, zk_group: str) -> None:
    """With --zk and --group the committed batch comes from the group's commit record: output above it fails;
    a group without a commit record is refused before the audit, naming the flag."""
    top = max(r["_batch"] for p in _parts(root) for r in pq.read_table(p).to_pylist())
    (root / "consumed" / "default").rename(root / "consumed" / zk_group)  # --group names the marks' group too
    path = GroupPaths(zk_group).commit
    zk_client.create(path, json.dumps({"batch_id": top - 1, "epoch": 1}).encode(), makepath=True)
    ahead = tenure("verify", "--data-root", str(root), "--zk", zk_hosts, "--group", zk_group, "--json")
    assert ahead.returncode == 1, ahead.stdout + ahead.stderr
    body = json.loads(ahead.stdout)
    assert (body["committed_batch"], body["batches_above_commit"]) == (top - 1, 1)
    zk_client.set(path, json.dumps({"batch_id": top, "epoch": 1}).encode())
    covered = tenure("verify", "--data-root", str(root), "--zk", zk_hosts, "--group", zk_group)
    assert covered.returncode == 0, covered.stdout + covered.stderr
    assert f"0 (committed batch {top})" in covered.stdout and "0 / 0 / 0 (group " in covered.stdout
    unknown = tenure("verify", "--data-root", str(root), "--zk", zk_hosts, "--group", f"{zk_group}-typo")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "has no committed batch in ZooKeeper" in unknown.stderr and "check --group" in unknown.stderr


# -- the Delta tables: every version one committed batch, no file outside a version ---------------------------


def _as_delta(root: Path, *, skip: tuple[int, ...] = (), epoch: int = 1, together: tuple[int, ...] = ()) -> None:
    """Rename the synthetic output to the published names and add each batch to its folder's Delta table as
    ``finish_publish`` does; batches in ``skip`` stay out of the table, batches in ``together`` share one version
    (the last one's), as no correct publish would."""
    from deltalake import DeltaTable
    from deltalake.transaction import CommitProperties, Transaction

    from tenure.career.output import APP_ID
    from tenure.career.output import _add as add_action

    for name in ("table", "quarantine"):
        folder = root / name
        batches = sorted(int(p.name.split("=")[1]) for p in folder.glob("batch=*"))
        for batch in batches:
            for part in sorted((folder / f"batch={batch}").glob("part-*.parquet")):
                part.rename(folder / f"batch-{batch:012d}-{part.name}")
            (folder / f"batch={batch}").rmdir()
        for batch in batches:
            if batch in skip or batch in together[:-1]:
                continue
            if batch == (together[-1] if together else None):
                files = sorted(p for b in together for p in folder.glob(f"batch-{b:012d}-*.parquet"))
                DeltaTable(str(folder)).create_write_transaction(
                    [add_action(p) for p in files], mode="append", schema=DeltaTable(str(folder)).schema(),
                    commit_properties=CommitProperties(custom_metadata={"tenure.batch": str(batch),
                                                                        "tenure.epoch": str(epoch)},
                                                       app_transactions=[Transaction(APP_ID, batch)]))
                continue
            publish_batch(folder, batch, epoch=epoch, replica_id="r1")


def test_delta_outputs_are_audited_version_by_version(root: Path) -> None:
    """Delta outputs are audited version by version: one version per batch in each table, and the report says so."""
    _as_delta(root)
    report = verify(root)
    assert report.ok, report.render()
    assert report.delta_tables == 2
    assert report.delta_versions == len(list((root / "table").glob("batch-*-part-00000.parquet"))) + len(
        list((root / "quarantine").glob("batch-*.parquet")))
    assert "Delta tables / versions" in report.render()


def test_a_published_file_outside_every_delta_version_fails(root: Path) -> None:
    """A publish cut short between its renames and its Delta commit, never finished: a Delta reader misses it."""
    _as_delta(root, skip=(3,))
    report = verify(root)
    assert not report.ok
    assert report.files_outside_delta_versions >= 1
    assert any("batch-000000000003-" in f for f in report.examples["files_outside_delta_versions"])
    assert "files outside a Delta version" in report.summary_line()


def test_a_delta_version_holding_two_batches_fails(root: Path) -> None:
    """A Delta version that holds two batches' files fails the audit, naming the version."""
    _as_delta(root, together=(2, 3))
    report = verify(root)
    assert not report.ok and report.delta_versions_not_one_batch >= 1
    reasons = {v["reason"] for v in report.examples["delta_versions_not_one_batch"]}
    assert "its files are not the batch's" in reasons


def test_a_delta_version_naming_another_epoch_than_its_rows_fails(root: Path) -> None:
    """A Delta version whose epoch is not the one its batch's rows carry fails the audit with that reason."""
    _as_delta(root, epoch=5)  # the rows carry epoch 1
    report = verify(root)
    assert not report.ok
    reasons = {v["reason"] for v in report.examples["delta_versions_not_one_batch"]}
    assert reasons == {"its epoch is not the one the batch's rows carry"}


# -- a topic of several queues -------------------------------------------------------------------------------


def _publish_topic(root: Path, queues: int) -> None:
    """Do what correct leaders of each queue do: one batch per queue file in the queue's order, each line classified
    as found in that queue (a record of another queue's key is a wrong_queue bad line), ids deduplicated, the rows
    in queue-<k>-batch-<B>-… files of the shared outputs with their _queue, each batch one Delta version of the
    queue's application id, each file marked consumed by the group in its queue."""
    seen: set[str] = set()
    for queue in QueueLayout.each(root, queues):
        output = QueueOutput(queue.queue, queues)
        for batch, path in enumerate(sorted(iter_queue_files(queue))):
            (queue.marks("default")).mkdir(parents=True, exist_ok=True)
            (queue.marks("default") / path.name).touch()
            good: list[dict[str, Any]] = []
            bad: list[dict[str, Any]] = []
            for number, raw in enumerate(path.read_bytes().split(b"\n")[:-1], start=1):
                record, reason = classify_line(raw, queue=queue.queue, queues=queues)
                columns = {"_epoch": 1, "_batch": batch, "_queue": queue.queue}
                if record is None:
                    bad.append({"value": raw.decode("utf-8", "replace"), "reason": reason, "source_file": str(path),
                                "line": number, **columns})
                elif record["id"] not in seen:
                    seen.add(record["id"])
                    good.append({**record, "payload": json.dumps(record["payload"]), **columns})
            queued = pa.field("_queue", pa.int64())
            for folder, rows, schema in ((root / "table", sorted(good, key=lambda r: (r["key"], r["seq"])),
                                          _TABLE_SCHEMA.append(queued)),
                                         (root / "quarantine", bad, _QUAR_SCHEMA.append(queued))):
                if rows:
                    folder.mkdir(parents=True, exist_ok=True)
                    name = output.part_name(batch, "part-00000.parquet")
                    pq.write_table(pa.Table.from_pylist(rows, schema), folder / name)
                    publish_batch(folder, batch, epoch=1, replica_id="r1", parts=[name], queue=output)


@pytest.fixture()
def topic(tmp_path: Path) -> Path:
    """A topic of three queues fed by `tenure produce` (repeats, bad lines, records sent to a wrong queue) and the
    output correct leaders of its queues publish."""
    summary = produce(tmp_path, records=300, keys=12, duplicates=0.1, bad=0.1, misroute=0.05, queues=3, seed=5,
                      progress=False, batch_records=40)
    assert summary.misrouted > 0 and summary.duplicates > 0 and summary.bad_lines > 0
    _publish_topic(tmp_path, 3)
    return tmp_path


def test_a_topic_of_three_queues_is_audited_queue_by_queue_and_as_a_whole(topic: Path) -> None:
    """Every queue of the topic is audited: the ids in, bad lines (each misrouted record a wrong_queue bad line,
    quarantined), its files read, its rows and versions, per queue in --json; and the whole: each id once, each row
    in its key's queue."""
    report = verify(topic)
    assert report.ok, report.render()
    body = json.loads(report.to_json())
    assert body["queues"] == 3 and [q["queue"] for q in body["per_queue"]] == [0, 1, 2]
    assert sum(q["ids_in"] for q in body["per_queue"]) == report.ids_in == report.ids_written
    assert sum(q["rows_written"] for q in body["per_queue"]) == report.rows_written
    assert sum(q["wrong_queue"] for q in body["per_queue"]) == report.bad_by_reason["wrong_queue"] > 0
    assert all(q["delta_versions"] > 0 and q["lost"] == 0 and q["waiting_files"] == 0 for q in body["per_queue"])
    assert report.delta_versions == sum(q["delta_versions"] for q in body["per_queue"])
    assert "queue 2:" in report.render()


def test_a_misrouted_record_written_instead_of_quarantined_fails(topic: Path) -> None:
    """A consumer that wrote a record found in a wrong queue (instead of quarantining it as wrong_queue) fails the
    audit: its row is in another queue than its key's, its id unexpected, its bad line not quarantined."""
    found = next((path, raw) for path in iter_queue_files(topic) for raw in path.read_bytes().split(b"\n")[:-1]
                 if classify_line(raw, queue=int(path.parts[-3]), queues=3)[1] == "wrong_queue")
    path, raw = found
    record = json.loads(raw)
    queue = int(path.parts[-3])
    row = {**record, "payload": json.dumps(record["payload"]), "_epoch": 1, "_batch": 999, "_queue": queue}
    name = f"queue-{queue}-batch-000000000999-part-00000.parquet"
    pq.write_table(pa.Table.from_pylist([row], _TABLE_SCHEMA.append(pa.field("_queue", pa.int64()))),
                   topic / "table" / name)
    publish_batch(topic / "table", 999, epoch=1, replica_id="r1", parts=[name], queue=QueueOutput(queue, 3))
    report = verify(topic)
    assert not report.ok
    assert report.rows_in_wrong_queue == 1 and report.examples["rows_in_wrong_queue"][0]["key"] == record["key"]


def test_a_wrong_queue_line_left_unquarantined_fails(topic: Path) -> None:
    """A wrong_queue line missing from quarantine/ is a bad line not quarantined, named with its queue."""
    part = next(p for p in sorted((topic / "quarantine").glob("queue-*.parquet"))
                if "wrong_queue" in pq.read_table(p).column("reason").to_pylist())
    rows = pq.read_table(part).to_pylist()
    dropped = next(r for r in rows if r["reason"] == "wrong_queue")
    _rewrite(part, lambda found: [r for r in found if r is not dropped and r != dropped])
    report = verify(topic)
    assert not report.ok and report.unquarantined == 1
    (example,) = report.examples["unquarantined"]
    assert example["reason"] == "wrong_queue" and example["file"].startswith(f"queues/{dropped['_queue']}/")


def test_another_number_of_queues_is_refused_naming_both(topic: Path) -> None:
    """verify --queues 2 on a topic of three is refused in one line naming both numbers and the file."""
    with pytest.raises(ConfigError, match=r"--queues 2 does not match the topic at .*, which has 3 queues"):
        verify(topic, queues=2)
    done = tenure("verify", "--data-root", str(topic), "--queues", "2")
    assert done.returncode == 2 and "which has 3 queues" in done.stderr, done.stderr


def test_a_quarantine_part_with_a_refused_entry_and_a_late_record_is_read_whole(tmp_path: Path) -> None:
    """One batch that refused an entry (line 0) and held back a late record writes both in one quarantine part: the
    audit reads the refusal, the late record and the bad line beside them (it failed on the part before)."""
    from tenure.service.ops._verify._scan import scan_quarantine

    rows = [{"value": "gone since", "reason": "gone", "source_file": "/q/landing/a.jsonl", "line": 0},
            {"value": "{x", "reason": "bad_json", "source_file": "/q/landing/c.jsonl", "line": 2},
            {"value": _line(GOOD).decode(), "reason": LATE_REASON, "source_file": "/q/landing/b.jsonl", "line": 3}]
    pq.write_table(pa.Table.from_pylist([{**r, "_epoch": 1, "_batch": 4} for r in rows], _QUAR_SCHEMA),
                   tmp_path / "batch-000000000004-part-00000.parquet")
    scan = scan_quarantine(tmp_path)
    assert scan.refused == {"a.jsonl": "gone"}
    assert [(row.file, row.line, row.batch, row.record) for row in scan.late] == [("b.jsonl", 3, 4, GOOD)]
    assert (dict(scan.bad), scan.bad_rows) == ({("c.jsonl", 2): 1}, 1)
