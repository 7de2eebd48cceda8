"""A fenced write whose reply is lost and cannot be read back raises ``CommitOutcomeUnknown``, by name.

The ZooKeeper primitives are replaced (monkeypatched) so the lost reply is certain; the runner's handling of the
error is covered by ``tests/test_runner_faults.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog

import tenure.election._fence as fence_module
import tenure.election._handover as handover_module
from tenure.election import Fence, GroupPaths, HandoverRecord, LeadershipState
from tenure.election._fence import CommitTally
from tenure.election._transaction import OutcomeUnknownError
from tenure.errors import CommitOutcomeUnknown, ElectionError


@dataclass
class _Term:
    """Just enough of an election for a ``Fence``: leading at epoch 7."""

    paths: GroupPaths = field(default_factory=lambda: GroupPaths("g"))
    client: Any = None
    acl: Any = None
    op_timeout_s: float = 1.0
    epoch: int | None = 7
    state: LeadershipState = LeadershipState.LEADING
    faults: Any = None
    log: Any = field(default_factory=structlog.get_logger)

    def is_leader(self) -> bool:
        return True


def _lost_reply(*_: Any, **__: Any) -> int:
    raise OutcomeUnknownError("connection lost")


def _unreadable(*_: Any, **__: Any) -> tuple[bytes, int]:
    raise ConnectionError("still cut off")


@pytest.fixture()
def fence(monkeypatch: pytest.MonkeyPatch) -> Fence:
    for module in (fence_module, handover_module):  # the commit's and the handover record's writes
        monkeypatch.setattr(module, "fenced_set", _lost_reply)
        monkeypatch.setattr(module, "read_record", lambda *_, **__: (None, 0))
    monkeypatch.setattr(fence_module, "read_back", _unreadable)
    return Fence(_Term(), epoch=7, node="/tenure/g/election/n_1", node_version=0, tally=CommitTally())


def test_commit_outcome_unknown_is_named(fence: Fence) -> None:
    """A commit whose reply is lost and cannot be read back raises CommitOutcomeUnknown, an ElectionError."""
    with pytest.raises(CommitOutcomeUnknown, match="outcome unknown") as caught:
        fence.commit({"batch": 1}, expected_version=0)
    assert isinstance(caught.value, ElectionError)


def test_handover_write_outcome_unknown_is_named(fence: Fence) -> None:
    """The handover record, written through the same fence, raises the same error when its reply is lost."""
    with pytest.raises(CommitOutcomeUnknown, match=r"handover.*outcome unknown"):
        fence.write_handover(HandoverRecord(7, None, True, 1.0))
