"""A topic of N queues, the data side (issue 51): routing, the layouts of queue k of N, the topic's recorded N, the
commit record of a queue, and the Delta outputs every queue writes into at once.

Pure logic and real files: routing values fixed once, paths compared with what the layout of before topics had several
queues built, real Delta tables written by delta-rs from several processes at once.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tenure.career.identity import TOPIC_FILE, ensure_topic, read_topic
from tenure.career.output import (
    APP_ID,
    QueueOutput,
    batch_of,
    batch_versions,
    covered_batch,
    part_of,
    publish_batch,
)
from tenure.career.queue import QueueLayout, classify_line, queue_of
from tenure.career.set_aside import MANIFEST, REPLAY_REQUEST, published, write_json
from tenure.career.spark._errors import CommitRecordError
from tenure.career.spark._layout import Layout
from tenure.career.spark._record import check_record
from tenure.errors import ConfigError
from tenure.service.ops import ReplayError, request_replay
from tenure.service.ops._verify._delta import audit_delta
from tenure.service.ops._verify._scan import batch_epochs
from tests.test_output import own_handle

# -- routing -------------------------------------------------------------------------------------------------

#: Computed once (SHA-256 of the key's UTF-8 bytes, first 8 bytes big-endian, mod N) and written here, so that a
#: change of the function, which would send a key's records to another queue than before, fails.
ROUTES: dict[str, tuple[int, int]] = {  # key → (its queue of 4, its queue of 7)
    "acct-7": (1, 4),
    "k0": (2, 2),
    "k1": (0, 6),
    "order-42": (3, 5),
    "user:1001": (0, 0),
    "café": (1, 6),
    "東京": (1, 5),
    "": (0, 1),
    "a" * 100: (3, 1),
    "k-bad": (0, 1),
}


@pytest.mark.parametrize("key", sorted(ROUTES))
def test_a_key_routes_to_the_queue_written_down_once(key: str) -> None:
    """queue_of gives each of ten fixed keys the queue computed once, for 4 and 7 queues, and 0 for one queue."""
    assert (queue_of(key, 4), queue_of(key, 7)) == ROUTES[key]
    assert queue_of(key, 1) == 0


def test_routing_is_the_documented_formula() -> None:
    """The route is the first 8 bytes of the key's SHA-256, big-endian, modulo N (what docs/concepts/queues.md gives
    producers in other languages), checked against the digest's hex as `sha256sum` prints it."""
    digest_hex = "557babe866364845"  # printf %s acct-7 | sha256sum | cut -c1-16
    assert queue_of("acct-7", 4) == int(digest_hex, 16) % 4 == 1
    assert queue_of("acct-7", 1000) == int(digest_hex, 16) % 1000


def test_a_record_of_another_queues_key_is_wrong_queue() -> None:
    """A valid record found in a queue other than its key's is bad (wrong_queue); in its key's queue, or in a topic
    of one queue, it is valid; a line bad for another reason keeps that reason."""
    line = json.dumps({"id": "a", "key": "acct-7", "seq": 1, "ts": 2, "payload": None}).encode()
    assert classify_line(line, queue=1, queues=4)[1] is None
    assert classify_line(line, queue=0, queues=4) == (None, "wrong_queue")
    assert classify_line(line)[1] is None
    assert classify_line(b'{"id":"a","key":"acct-7","seq":true,"ts":2,"payload":1}', queue=0, queues=4) == (
        None, "bad_type:seq")


# -- layouts ---------------------------------------------------------------------------------------------------


def test_one_queue_is_laid_out_exactly_as_before_queues(tmp_path: Path) -> None:
    """Queue 0 of a topic of one has today's paths, names, app id and no _queue column: the queue folder itself,
    checkpoint/epoch=<e>, order/, retry/, set-aside/, _staging/epoch=<e>/batch=<B>, batch-<B>-… part files, and the
    application id tenure."""
    layout = Layout(tmp_path, tmp_path / "q")
    assert layout == Layout(tmp_path, tmp_path / "q", 0, 1)
    rel = layout.relative
    assert (layout.landing, layout.archive, layout.queue.marks("g")) == (
        tmp_path / "q" / "landing", tmp_path / "q" / "archive", tmp_path / "q" / "consumed" / "g")
    assert [rel(p) for p in (layout.checkpoint, layout.term_checkpoint(7), layout.order, layout.retry,
                             layout.set_aside, layout.dedup, layout.table, layout.quarantine, layout.dead_letter)] == [
        "checkpoint", "checkpoint/epoch=7", "order", "retry", "set-aside", "dedup", "table", "quarantine",
        "dead-letter"]
    assert [rel(layout.staging(output, 7, 3)) for output in (layout.table, layout.order)] == [
        "table/_staging/epoch=7/batch=3", "order/_staging/epoch=7/batch=3"]
    assert {layout.published_name(output, 3, "part-00000.parquet") for output in layout.outputs().values()} == {
        "batch-000000000003-part-00000.parquet"}
    assert (layout.output.app_id, layout.output.column) == (APP_ID, None)


def test_queue_k_of_n_has_a_folder_of_its_own_and_shares_the_outputs(tmp_path: Path) -> None:
    """Queue 2 of 4: queues/2/ in the topic's folder; its checkpoint, order, retry, set-aside and dedup under
    queue=2; its staging in the shared outputs under _staging/queue=2 (in its own folders without); its part files
    in the shared outputs queue-2-batch-<B>-…; its app id tenure-queue-2 and _queue 2."""
    layout = Layout(tmp_path, None, 2, 4)
    rel = layout.relative
    assert (rel(layout.landing), rel(layout.archive), rel(layout.queue.marks("g"))) == (
        "queues/2/landing", "queues/2/archive", "queues/2/consumed/g")
    assert [rel(p) for p in (layout.term_checkpoint(7), layout.order, layout.retry, layout.set_aside,
                             layout.dedup)] == [
        "checkpoint/queue=2/epoch=7", "order/queue=2", "retry/queue=2", "set-aside/queue=2", "dedup/queue=2"]
    assert [rel(layout.staging(output, 7, 3)) for output in (layout.table, layout.dead_letter, layout.order)] == [
        "table/_staging/queue=2/epoch=7/batch=3", "dead-letter/_staging/queue=2/epoch=7/batch=3",
        "order/queue=2/_staging/epoch=7/batch=3"]
    assert layout.published_name(layout.quarantine, 3, "part-1.parquet") == "queue-2-batch-000000000003-part-1.parquet"
    assert layout.published_name(layout.retry, 3, "part-1.parquet") == "batch-000000000003-part-1.parquet"
    assert (layout.output.app_id, layout.output.column) == ("tenure-queue-2", 2)
    assert [q.folder for q in QueueLayout.each(tmp_path, 3)] == [tmp_path / "queues" / str(k) for k in range(3)]


@pytest.mark.parametrize(("queue", "queues"), [(4, 4), (-1, 2), (0, 0), (True, 2)])
def test_a_queue_outside_its_topic_is_refused(queue: int, queues: int) -> None:
    """A queue number outside 0..N-1, or a count below 1, is refused naming the value."""
    with pytest.raises(ConfigError, match="queue"):
        Layout(Path("/srv"), None, queue, queues)


def test_part_file_names_say_their_queue_and_batch() -> None:
    """A part file's name gives its queue (None for a topic of one queue's) and batch; each queue's batch_of reads its
    own names only."""
    assert part_of("batch-000000000003-part-00000.parquet") == (None, 3)
    assert part_of("queue-2-batch-000000000003-part-00000.parquet") == (2, 3)
    assert part_of("part-00000-abc.parquet") is None
    assert batch_of("queue-2-batch-000000000003-part-0.parquet") is None
    assert QueueOutput(2, 4).batch_of("queue-2-batch-000000000003-part-0.parquet") == 3
    assert QueueOutput(1, 4).batch_of("queue-2-batch-000000000003-part-0.parquet") is None


# -- the topic's recorded N ------------------------------------------------------------------------------------


def test_the_topic_records_its_queues_and_refuses_another_number(tmp_path: Path) -> None:
    """A new topic is written with --queues N (1 without), a later call without --queues takes the recorded N, one
    with another N is refused in one line naming both, the folder and the file."""
    topic = ensure_topic(tmp_path / "t", 4)
    assert topic.queues == 4 and json.loads((tmp_path / "t" / TOPIC_FILE).read_text())["queues"] == 4
    assert ensure_topic(tmp_path / "t") == topic == read_topic(tmp_path / "t", 4)
    with pytest.raises(ConfigError) as refused:
        ensure_topic(tmp_path / "t", 2)
    assert str(refused.value) == (f"--queues 2 does not match the topic at {tmp_path / 't'}, which has 4 queues "
                                  f"({tmp_path / 't' / TOPIC_FILE}): pass --queues 4 or use another queue folder")
    assert ensure_topic(tmp_path / "new").queues == 1


def test_a_queue_folder_of_before_is_a_topic_of_one_queue(tmp_path: Path) -> None:
    """A folder with a landing/ and no _topic.json (a queue of an earlier release) becomes a topic of one queue, so
    --queues 4 is refused rather than laying four queues beside its files."""
    (tmp_path / "landing").mkdir()
    with pytest.raises(ConfigError, match="which has 1 queue "):
        ensure_topic(tmp_path, 4)
    assert ensure_topic(tmp_path).queues == 1


# -- the commit record of a queue ------------------------------------------------------------------------------


def _record(layout: Layout, batch: int = 3, epoch: int = 7) -> dict[str, Any]:
    """A commit record as queue ``layout.index``'s leader writes it (its own staging, parts and snapshots)."""
    staged = {name: layout.relative(layout.staging(output, epoch, batch))
              for name, output in layout.outputs().items() if name in ("table", "order")}
    return {
        **({"queue": layout.index} if layout.queues > 1 else {}),
        "batch_id": batch, "epoch": epoch, "staged": staged,
        "parts": {"table": [layout.published_name(layout.table, batch, "part-00000.parquet")]},
        "order": layout.relative(layout.order / layout.published_name(layout.order, batch, "part-00000.parquet")),
        "published_path": f"{layout.relative(layout.table)}/{layout.published_name(layout.table, batch, '*.parquet')}",
    }


def test_a_commit_record_is_checked_against_its_own_queues_layout(tmp_path: Path) -> None:
    """The record of queue 1 passes queue 1's check; queue 0's check refuses it (another queue's), and so does it
    when only its paths are another queue's: a record acts on its queue's files alone."""
    one, zero = Layout(tmp_path, None, 1, 2), Layout(tmp_path, None, 0, 2)
    check_record(one, _record(one))
    check_record(Layout(tmp_path), _record(Layout(tmp_path)))
    with pytest.raises(CommitRecordError, match="it is the record of queue 1, and this is queue 0's"):
        check_record(zero, _record(one))
    with pytest.raises(CommitRecordError, match="its staged path for table is"):
        check_record(zero, {**_record(one), "queue": 0})
    with pytest.raises(CommitRecordError, match="not a part file of batch 3"):
        check_record(zero, {**_record(zero), "parts": _record(one)["parts"]})


# -- the outputs every queue writes into -----------------------------------------------------------------------


def _part(folder: Path, queue: QueueOutput, batch: int, rows: int = 3, extra: dict[str, pa.Array] | None = None
          ) -> str:
    """One published part file of ``queue``'s batch (as the publish links it), with every output row's columns."""
    folder.mkdir(parents=True, exist_ok=True)
    name = queue.part_name(batch, "part-00000.parquet")
    columns = {"id": pa.array([f"{queue.queue}-{batch}-{i}" for i in range(rows)]),
               "key": pa.array([f"k{queue.queue}"] * rows), "seq": pa.array(range(rows), pa.int64()),
               "_epoch": pa.array([7] * rows, pa.int64()), "_batch": pa.array([batch] * rows, pa.int64()),
               "_queue": pa.array([queue.queue] * rows, pa.int64()), **(extra or {})}
    pq.write_table(pa.table(columns), folder / f".{name}")
    (folder / f".{name}").rename(folder / name)
    return name


def _publisher(folder: str, queue: int, queues: int, batches: int, start: Any) -> None:
    """A leader of ``queue`` in a process of its own: publishes its batches one after the other once ``start``
    opens."""
    output = QueueOutput(queue, queues)
    names = [_part(Path(folder), output, batch) for batch in range(batches)]
    start.wait(60)
    for batch, name in enumerate(names):
        publish_batch(Path(folder), batch, epoch=7, replica_id=f"r{queue}", parts=[name], queue=output)


def _versions_by_queue(folder: Path) -> dict[int, list[int]]:
    """Each queue's batches in the order of their versions, read from the log's transactions (a version that adds
    no file, a schema change, is no batch)."""
    found: dict[int, list[int]] = {}
    for entry in sorted((folder / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in entry.read_text().splitlines()]
        if not any("add" in action for action in actions):
            continue
        txns = [action["txn"] for action in actions if "txn" in action]
        assert len(txns) == 1, f"{entry.name} holds {len(txns)} transactions, not one batch"
        found.setdefault(int(txns[0]["appId"].rsplit("-", 1)[1]), []).append(txns[0]["version"])
    return found


def test_leaders_of_several_queues_publish_into_one_table_at_once(tmp_path: Path) -> None:
    """Three processes, each the leader of one queue of three, publish eight batches each into one table at once,
    creating it too: every batch is one version of its own (none lost, none two in one, none twice), each queue's
    versions follow its batch order with its app id covering its last batch, and the Delta audit finds nothing."""
    folder, queues, batches = tmp_path / "table", 3, 8
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    leaders = [context.Process(target=_publisher, args=(str(folder), k, queues, batches, start))
               for k in range(queues)]
    try:
        for leader in leaders:
            leader.start()
        start.set()
        for leader in leaders:
            leader.join(120)
        assert [leader.exitcode for leader in leaders] == [0] * queues
    finally:
        for leader in leaders:
            if leader.is_alive():
                leader.kill()
                leader.join(10)
    assert _versions_by_queue(folder) == {k: list(range(batches)) for k in range(queues)}
    assert [covered_batch(folder, QueueOutput(k, queues)) for k in range(queues)] == [batches - 1] * queues
    assert DeltaTable(str(folder)).to_pyarrow_table().num_rows == queues * batches * 3
    assert {(v.queue, v.batch) for v in batch_versions(folder)} == {
        (k, b) for k in range(queues) for b in range(batches)}
    epochs = batch_epochs(DeltaTable(str(folder)).to_pyarrow_table())
    audit = audit_delta(tmp_path, {"table": epochs}, queues)
    assert (audit.problems, audit.versions, audit.by_queue) == (0, queues * batches, {k: batches for k in range(3)})


def test_a_commit_lost_to_another_queues_schema_change_is_tried_again(tmp_path: Path) -> None:
    """Queue 0's leader reads the table and is about to commit when queue 1's leader commits a batch with a new
    column (a schema version, then its batch): delta-rs refuses queue 0's commit (the metadata changed under it), and
    the publish tries again on the table as it is then: queue 0's batch is one version, after queue 1's."""
    folder = tmp_path / "table"
    zero, one = QueueOutput(0, 2), QueueOutput(1, 2)
    for output in (zero, one):
        publish_batch(folder, 0, epoch=7, replica_id="r", parts=[_part(folder, output, 0)], queue=output)
    read, go = threading.Event(), threading.Event()
    original = DeltaTable.create_write_transaction
    errors: list[BaseException] = []

    def held(self: DeltaTable, *args: Any, **kwargs: Any) -> None:
        if threading.current_thread().name == "queue-0" and not go.is_set():
            read.set()  # queue 0 has read the table and checked its transaction
            go.wait(30)
        original(self, *args, **kwargs)

    def publish_zero() -> None:
        try:
            publish_batch(folder, 1, epoch=7, replica_id="r0", parts=[_part(folder, zero, 1)], queue=zero)
        except BaseException as exc:
            errors.append(exc)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DeltaTable, "create_write_transaction", held)
        patch.setattr("tenure.career.output._open", own_handle)
        leader = threading.Thread(target=publish_zero, name="queue-0")
        leader.start()
        assert read.wait(30), "queue 0's leader never reached its commit"
        score = {"score": pa.array([1.5, 2.5, 3.5])}
        publish_batch(folder, 1, epoch=7, replica_id="r1", parts=[_part(folder, one, 1, extra=score)], queue=one)
        go.set()
        leader.join(60)
    assert not errors, errors
    assert _versions_by_queue(folder) == {0: [0, 1], 1: [0, 1]}
    assert [covered_batch(folder, q) for q in (zero, one)] == [1, 1]
    history = [(v.queue, v.batch) for v in batch_versions(folder)]
    assert history.index((1, 1)) < history.index((0, 1)), history


# -- replay, per queue -----------------------------------------------------------------------------------------


def test_a_replay_is_asked_of_the_queue_whose_batch_was_set_aside(tmp_path: Path) -> None:
    """In a topic of two queues, `tenure replay --queue 1` writes the request beside queue 1's set-aside batch and
    the wake-up tick into queue 1's landing/; without --queue it is refused naming the queues, and queue 0, which set
    nothing aside, has no such batch."""
    ensure_topic(tmp_path, 2)
    layout = Layout(tmp_path, None, 1, 2)
    for folder in (layout.set_aside, layout.landing):
        folder.mkdir(parents=True)
    write_json(layout.set_aside / published(4, MANIFEST), {"batch_id": 4, "records": 2, "files": ["a.jsonl"]})
    with pytest.raises(ReplayError, match=r"the topic has 2 queues.*pass --queue K \(0 to 1\)"):
        request_replay(tmp_path, [4])
    with pytest.raises(ReplayError, match=r"batch 4 is not set aside in .*set-aside/queue=0"):
        request_replay(tmp_path, [4], queue=0)
    assert request_replay(tmp_path, [4], queue=1).records == 2
    assert (layout.set_aside / published(4, REPLAY_REQUEST)).is_file()
    assert [p.suffix for p in layout.landing.iterdir()] == [".tick"]
    assert not Layout(tmp_path, None, 0, 2).landing.exists()
