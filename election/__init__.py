"""ZooKeeper leader election with fencing epochs (no Spark, no processes here).

Each replica of a group creates an ephemeral-sequential node ``/tenure/<group>/election/<guid>-n_<seq>`` holding its
identity (in a group of several queues, one in each queue's line, ``/tenure/<group>/queues/<k>/election``, one
``Election`` per queue on the replica's one session). A replica leads iff its node is the lowest AND the node's
``ephemeralOwner`` is the replica's current session (re-checked after every reconnect). Every other replica watches only
the next-lower node, so one departure wakes one replica. All state changes happen on one control thread per
``Election``; kazoo listeners and watches only enqueue. Consumers see ``Following``, ``Elected``, ``Suspended``,
``Resumed``, ``Revoked`` (exactly once per term, only after ``Elected``) and ``ConnectionChanged``.

What is guaranteed:

* At most one node is the lowest at any instant, and a term's epoch — the ``czxid`` of its node — is unique
  and only ever rises for the group, even across deletion and re-creation of the election parent (sequence
  numbers would restart there; zxids rise for the ensemble's whole life).
* Output made visible through ``Fence.commit`` (and ``write_handover``) is fenced: it is one ZooKeeper
  transaction that checks the leader's own election node and compare-and-sets the record's version, so a
  leader whose node is gone (session expired, node deleted) or whose view of the record is stale cannot
  write, however long it was paused. A commit whose stored epoch is already higher is refused too. The
  ZooKeeper ensemble decides; no clock is trusted for this.
* ``is_leader()`` turns False, and commits are refused before sending (``NotLeader``), as soon as kazoo
  reports the connection SUSPENDED or the local safe-until deadline passes (``safe_fraction`` of the session
  timeout after the send time of the last answered request), whichever comes first.
* A graceful ``release`` deletes the node at once, so the successor is notified within a round-trip;
  a crashed leader is replaced once ZooKeeper expires its session (about the session timeout).

What is not guaranteed:

* No election can promise one leader at every instant. A partitioned, paused or slow former leader may still
  *believe* it leads, and ``is_leader()`` may have returned True just before its session expired. Anything
  the leader does outside the fence (writing staging files, calling external systems) can overlap with its
  successor's work; only the fenced record decides what is visible, so make those effects idempotent and
  keyed by the record (as tenure's career does with batch ids and epochs).
* The safe-until deadline is a local, best-effort pause: it assumes the local clock runs at about the rate
  of the servers'. A process paused between its check and the transaction is still stopped by the fence.
* A commit whose reply is lost has an unknown outcome until the record is read back; ``Fence.commit``
  tries once and otherwise raises ``CommitOutcomeUnknown`` (an ``ElectionError``) — re-read with ``read_commit()``.
* Every public call raises the product's errors only (``TenureError`` and its subclasses, in ``tenure.errors``),
  never kazoo's: a connection or session lost, or a call timed out, is ``ZooKeeperUnavailable``; an ACL refusal
  ``ZooKeeperDenied`` (both ``ElectionError``s); ``Fenced`` and ``CommitOutcomeUnknown`` keep their meaning. Code
  outside ``election/`` holds a client (``connect``) only to pass it to these calls.
* Epochs rise only within one ensemble's life: wiping ZooKeeper's data directory restarts zxids.
* Digest ACLs (``DigestCredential``) are applied when znodes are created; existing open znodes keep their ACL.

Example::

    from tenure.election import DigestCredential, Election, Elected, Identity

    election = Election(client, group="orders", identity=Identity.local("r1"), on_event=queue.put)
    election.start()
    # on Elected(epoch):
    fence = election.fence()
    record, version = fence.read_commit()
    fence.commit({"batch": 7, "published": "table/batch=7"}, expected_version=version)
"""


from tenure.election._acl import DigestCredential
from tenure.election._client import ZooKeeperClient, connect, connected, disconnect, is_connected
from tenure.election._election import ELECTED, RESUMED, REVOKED, SUSPENDED, Election
from tenure.election._events import (
    ConnectionChanged,
    Elected,
    ElectionEvent,
    Following,
    Resumed,
    Revoked,
    Suspended,
)
from tenure.election._fence import COMMIT_FENCED, Fence
from tenure.election._four_letter import four_letter_word
from tenure.election._group_identity import GroupIdentity, bind_group, read_group_identity
from tenure.election._handover import FailedBatch, HandoverRecord, read_handover
from tenure.election._history import HISTORY_LIMIT, TERM_ENDINGS, TermHistory, TermRecord, read_history
from tenure.election._identity import Identity
from tenure.election._layout import MAX_QUEUES, QUEUES, GroupPaths, QueuePaths
from tenure.election._line import JOINED, RELEASE_INCOMPLETE, RELEASED
from tenure.election._members import BalanceView, Membership, read_leaders, read_members
from tenure.election._plan import Member, moves, plan, rendezvous_weight
from tenure.election._registry import (
    QueueKey,
    RegisteredGroup,
    group_queues,
    list_groups,
    register_group,
    registered_groups,
    unregister_group,
)
from tenure.election._requests import DrainRequest, HandoverRequest, OperatorRequests
from tenure.election._settings import ElectionSettings
from tenure.election._states import TRANSITIONS, IllegalTransitionError, LeadershipState, check_transition
from tenure.election._status import Contender, GroupStatus, group_status, read_commit, read_contenders

__all__ = [
    "COMMIT_FENCED",
    "ELECTED",
    "HISTORY_LIMIT",
    "JOINED",
    "MAX_QUEUES",
    "QUEUES",
    "RELEASED",
    "RELEASE_INCOMPLETE",
    "RESUMED",
    "REVOKED",
    "SUSPENDED",
    "TERM_ENDINGS",
    "TRANSITIONS",
    "BalanceView",
    "ConnectionChanged",
    "Contender",
    "DigestCredential",
    "DrainRequest",
    "Elected",
    "Election",
    "ElectionEvent",
    "ElectionSettings",
    "FailedBatch",
    "Fence",
    "Following",
    "GroupIdentity",
    "GroupPaths",
    "GroupStatus",
    "HandoverRecord",
    "HandoverRequest",
    "Identity",
    "IllegalTransitionError",
    "LeadershipState",
    "Member",
    "Membership",
    "OperatorRequests",
    "QueueKey",
    "QueuePaths",
    "RegisteredGroup",
    "Resumed",
    "Revoked",
    "Suspended",
    "TermHistory",
    "TermRecord",
    "ZooKeeperClient",
    "bind_group",
    "check_transition",
    "connect",
    "connected",
    "disconnect",
    "four_letter_word",
    "group_queues",
    "group_status",
    "is_connected",
    "list_groups",
    "moves",
    "plan",
    "read_commit",
    "read_contenders",
    "read_group_identity",
    "read_handover",
    "read_history",
    "read_leaders",
    "read_members",
    "register_group",
    "registered_groups",
    "rendezvous_weight",
    "unregister_group",
]
