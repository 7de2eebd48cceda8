"""Tests of the auditor: the line rules, and that verify catches every planted violation on real files."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service._producer import write_lines
from service._verify import REASONS, VerifyError, classify_line, iter_queue_files, verify

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
        "bad_json", "not_object", "missing_field", "bad_type", "oversized", "not_utf8", "empty_line"}
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


def _publish(root: Path, *, parts: int = 2) -> None:
    """Do what a correct pipeline does: one batch per queue file, ids deduplicated, keys split over parts."""
    seen: set[str] = set()
    files = sorted(iter_queue_files(root))
    for batch, path in enumerate(files, start=1):
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
    """An empty data root verifies OK with zero counts; a queue with no output loses everything."""
    assert verify(tmp_path).ok
    _make_queue(tmp_path)
    report = verify(tmp_path)
    assert not report.ok
    assert report.lost == 60 and report.unquarantined == 9


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
    late = {"id": "new-1", "key": rows[0]["key"], "seq": rows[0]["seq"], "ts": 0, "payload": None}
    write_lines(root / "landing", [_line(late)], "p9-extra.jsonl")
    report = verify(root)
    assert report.inversions == 1, report.render()
    assert report.examples["inversions"][0]["batch_after"] == 100
    assert not report.ok


def test_batch_order_comes_from_the_column_not_the_path(tmp_path: Path) -> None:
    """Batches 9 and 10 live in folders that sort the other way round by name; that is no inversion."""
    write_lines(tmp_path / "landing", [_rec(1, "k", 1), _rec(2, "k", 2)], "a.jsonl")
    for batch, i, seq in ((9, 1, 1), (10, 2, 2)):
        folder = tmp_path / "table" / f"batch={batch}"
        folder.mkdir(parents=True)
        row = {"id": f"id-{i}", "key": "k", "seq": seq, "ts": 0, "payload": "{}", "_epoch": 1,
               "_batch": batch}
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
    """A leader archiving while verify runs: a file seen in landing/ and again in archive/ counts once."""
    name = sorted((root / "landing").glob("*.jsonl"))[0].name
    (root / "archive").mkdir()
    shutil.copy2(root / "landing" / name, root / "archive" / name)
    report = verify(root)
    assert report.ok, report.render()
    assert report.queue_files == 5 and report.ids_in == 60
