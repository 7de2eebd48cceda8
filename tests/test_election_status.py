"""``tenure status`` rendering: the table and the JSON a group's status prints as."""

from __future__ import annotations

import io
import json

import pytest

from tenure.election import Elected, Following, HandoverRecord
from tenure.errors import ElectionError
from tenure.service.local import free_port
from tenure.service.ops import fetch_status, format_status_table, show_status
from tests.test_election import contenders


def test_status_table_and_json_show_leader_epoch_contenders_and_commit(zk_hosts: str, zk_group: str) -> None:
    """The table names the leader and epoch and lists contenders in line order with the last commit;
    --json carries the same facts for scripts."""
    with contenders(zk_hosts, zk_group) as made:
        leader = made.add("r1")
        leader.events.wait_for(Elected, 10)
        made.add("r2").events.wait_for(Following, 10)
        fence = leader.election.fence()
        fence.commit({"batch": 17, "published": "table/batch=17"}, expected_version=fence.read_commit()[1])
        leader.election.write_handover(HandoverRecord(fence.epoch, 16, True, 1.0))
        out = io.StringIO()
        status = show_status(zk_hosts, zk_group, out=out)
        text = out.getvalue()
        print(text)
        assert f"group {zk_group}: leader r1, epoch {fence.epoch}, 2 contenders" in text
        lines = text.splitlines()
        r1 = next(i for i, line in enumerate(lines) if " r1 " in line)
        r2 = next(i for i, line in enumerate(lines) if " r2 " in line)
        assert r1 < r2 and "leader" in lines[r1] and "follower" in lines[r2]
        assert "batch=17" in text and f"epoch={fence.epoch}" in text and "clean=True" in text
        assert status.leader is not None and status.leader.epoch == fence.epoch
        out = io.StringIO()
        show_status(zk_hosts, zk_group, as_json=True, out=out)
        data = json.loads(out.getvalue())
        assert data["epoch"] == fence.epoch and data["leader"]["identity"]["replica_id"] == "r1"
        assert [c["identity"]["replica_id"] for c in data["contenders"]] == ["r1", "r2"]
        assert data["commit"]["batch"] == 17 and data["commit_version"] == 1


def test_status_of_an_empty_group_says_no_leader(zk_hosts: str, zk_group: str) -> None:
    """A group nobody joined: no leader, no contenders, no commit — and no error."""
    text = format_status_table(fetch_status(zk_hosts, zk_group))
    assert "no leader" in text and "last commit (version None): none" in text


def test_status_with_unreachable_zookeeper_fails_with_one_clear_error() -> None:
    """Nothing listening: ElectionError naming the hosts and the fix, within the timeout."""
    hosts = f"127.0.0.1:{free_port()}"
    with pytest.raises(ElectionError, match=f"cannot reach ZooKeeper at {hosts} within 2 s: check --zk"):
        fetch_status(hosts, "g", timeout_s=2.0)
