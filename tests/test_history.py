"""The term history: each term recorded by its own leader, closed by itself or by its successor, bounded, shown."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kazoo.client import KazooClient

from tenure.career.output import publish_batch
from tenure.election import HISTORY_LIMIT, Election, GroupPaths, HandoverRecord, Identity, TermHistory, read_history
from tenure.errors import Fenced
from tenure.service.local import wait_for
from tenure.service.ops import format_history
from tests._replicas import ReplicaSet, tenure


def _handover(epoch: int, *, clean: bool) -> HandoverRecord:
    """The handover record the term of ``epoch`` left, as its successor read it."""
    return HandoverRecord(epoch, None, clean, time.time())


def _terms(zk_client: KazooClient, group: str) -> list[dict[str, object]]:
    return [t.to_json() for t in read_history(zk_client, group)]


def test_terms_are_recorded_and_closed_by_their_end_or_their_successor(counter_replicas: ReplicaSet,
                                                                        zk_client: KazooClient, zk_group: str) -> None:
    """A clean handover closes the term `clean`; a SIGKILLed leader's term is closed `crash` by its successor;
    each term has its own epoch, leader, first commit and counts."""
    first = counter_replicas.start("r1")
    wait_for(first.is_leader, 30, "r1 to lead")
    second = counter_replicas.start("r2")
    wait_for(lambda: second.get("/readyz")[0] == 200, 30, "r2 ready")
    wait_for(lambda: (t := _terms(zk_client, zk_group)) and t[-1]["first_commit_at"], 60, "r1's first commit")
    first.signal(signal.SIGTERM)
    assert first.wait(20) == 0
    wait_for(second.is_leader, 20, "r2 to lead")
    wait_for(lambda: _terms(zk_client, zk_group)[-1]["first_commit_at"], 60, "r2's first commit")
    wait_for(lambda: second.metrics().get("tenure_batches_total{outcome=committed}", 0) >= 3, 20,
             "r2 to commit a few batches")
    second.signal(signal.SIGKILL)
    second.wait(10)
    third = counter_replicas.start("r3")
    wait_for(third.is_leader, 30, "r3 to lead after r2's session expired")
    # The deadlines are the machine's: CI on a starved host once waited over 20 s for this.
    wait_for(lambda: len(t := _terms(zk_client, zk_group)) == 3 and t[-1]["first_commit_at"], 60,
             "three terms, r3's with its first commit")
    terms = _terms(zk_client, zk_group)

    r1, r2, r3 = terms
    assert [t["replica_id"] for t in terms] == ["r1", "r2", "r3"]
    assert r1["epoch"] < r2["epoch"] < r3["epoch"]
    assert r1["ended"] == "clean" and r1["closed_by"] is None and r1["batches"] > 0 and r1["records"] > 0
    assert r2["ended"] == "crash" and r2["closed_by"] == r3["epoch"] and r2["batches"] >= 1
    # its last commit comes from the commit record it left, not from its last history update (its first commit)
    assert r2["last_commit_at"] > r2["first_commit_at"]
    assert r3["ended"] is None and r3["closed_by"] is None
    for term in terms:
        assert term["elected_at"] <= term["first_commit_at"] <= (term["ended_at"] or time.time())
    table = format_history(read_history(zk_client, zk_group))
    assert "crash (found by" in table and "running" in table and "clean" in table


def test_a_stale_leader_records_no_term(zk_client: KazooClient, zk_hosts: str, zk_group: str) -> None:
    """The append is checked against the term's own election node, as a commit is: once the node is gone, the
    write is fenced and the history is unchanged."""
    election = Election(zk_client, group=zk_group, identity=Identity("stale", "h", 1, "", time.time()),
                        session_timeout_s=10.0)
    election.start()
    try:
        wait_for(election.is_leader, 10, "leadership")
        fence = election.fence()
        node_version = fence.node_version
        zk_client.delete(fence.node)  # what the session's end does to a paused leader's node
        with pytest.raises(Fenced):
            TermHistory(zk_client, zk_group).begin(epoch=fence.epoch, node=fence.node, node_version=node_version,
                                                   replica_id="stale", elected_at=time.time(), previous=None)
        assert read_history(zk_client, zk_group) == []
    finally:
        election.close()


def test_the_history_keeps_the_last_terms_only(zk_client: KazooClient, zk_group: str) -> None:
    """The term history keeps the last ``HISTORY_LIMIT`` terms, oldest dropped first, each closed by its successor as
    ``clean`` or ``crash`` by the handover record it left."""
    paths = GroupPaths(zk_group)
    zk_client.ensure_path(paths.election)
    history = TermHistory(zk_client, zk_group)
    for epoch in range(1, HISTORY_LIMIT + 6):
        node = zk_client.create(f"{paths.election}/n-{epoch}", b"", ephemeral=True)
        history.begin(epoch=epoch, node=node, node_version=0, replica_id=f"r{epoch % 3}",
                      elected_at=time.time(), previous=_handover(epoch - 1, clean=epoch % 2 == 0))
        zk_client.delete(node)
    terms = read_history(zk_client, zk_group)
    assert len(terms) == HISTORY_LIMIT
    assert [t.epoch for t in terms] == list(range(6, HISTORY_LIMIT + 6))
    # each closed by its successor: clean when the handover record it left said so, crash otherwise
    assert {t.ended for t in terms[:-1]} == {"clean", "crash"}
    assert all(t.ended == ("clean" if (t.epoch + 1) % 2 == 0 else "crash") for t in terms[:-1])


def test_tenure_history_prints_a_table_and_json(zk_client: KazooClient, zk_hosts: str, zk_group: str) -> None:
    """`tenure history` prints the terms as a table (a running term shown as such, its duration) and as JSON with
    ``--json``; `tenure status` shows the last terms too."""
    paths = GroupPaths(zk_group)
    zk_client.ensure_path(paths.election)
    node = zk_client.create(f"{paths.election}/n-1", b"", ephemeral=True)
    TermHistory(zk_client, zk_group).begin(
        epoch=42, node=node, node_version=0, replica_id="r9", elected_at=time.time() - 65, previous=None)

    table = tenure("history", "--zk", zk_hosts, "--group", zk_group)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.strip().splitlines()
    assert header.split() == ["epoch", "replica", "elected", "lasted", "ended", "first", "commit", "gap", "batches",
                              "records"]
    assert row.split()[:2] == ["42", "r9"] and "1m0" in row and "running" in row
    data = json.loads(tenure("history", "--zk", zk_hosts, "--group", zk_group, "--json", "--last", "1").stdout)
    assert data["group"] == zk_group and [t["epoch"] for t in data["terms"]] == [42]
    status = tenure("status", "--zk", zk_hosts, "--group", zk_group)
    assert "last 1 terms" in status.stdout and "r9" in status.stdout


def test_tenure_history_names_the_delta_versions_each_term_wrote(zk_client: KazooClient, zk_hosts: str,
                                                                  zk_group: str, tmp_path: Path) -> None:
    """With --data-root, each term's row names the versions of table/'s Delta table its batches became (by the
    epoch each version's commit info carries: a successor that rolls a batch forward adds it as the committing
    epoch's)."""
    paths = GroupPaths(zk_group)
    zk_client.ensure_path(paths.election)
    history = TermHistory(zk_client, zk_group)
    for epoch in (7, 9, 11):
        node = zk_client.create(f"{paths.election}/n-{epoch}", b"", ephemeral=True)
        history.begin(epoch=epoch, node=node, node_version=0, replica_id=f"r{epoch}", elected_at=time.time(),
                      previous=None if epoch == 7 else _handover(epoch - 2, clean=True))
        zk_client.delete(node)
    table = tmp_path / "table"
    table.mkdir()
    for batch, epoch in ((0, 7), (1, 7), (2, 7), (3, 9)):
        pq.write_table(pa.table({"id": [f"b{batch}"], "_epoch": [epoch], "_batch": [batch]}),
                       table / f"batch-{batch:012d}-part-00000.parquet")
        publish_batch(table, batch, epoch=epoch, replica_id=f"r{epoch}")

    shown = tenure("history", "--zk", zk_hosts, "--group", zk_group, "--data-root", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line.split()[-1] for line in shown.stdout.strip().splitlines()[1:]}
    assert "delta versions" in shown.stdout.splitlines()[0]
    assert rows == {"7": "(3)", "9": "3", "11": "-"}
    assert "0–2 (3)" in shown.stdout
    data = json.loads(tenure("history", "--zk", zk_hosts, "--group", zk_group, "--json",
                             "--data-root", str(tmp_path)).stdout)
    assert {t["epoch"]: t["delta_versions"] for t in data["terms"]} == {7: [0, 1, 2], 9: [3], 11: []}
