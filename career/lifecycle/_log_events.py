"""The log events of the runner and its policies that other code reads (the drill, tests, bench): named once, here.

``inaugurated`` and ``handed_over`` are the Spark career's too (its own logger): it imports them from here.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BACKING_OFF",
    "BATCH_ATTEMPT_FAILED",
    "CANARY_HANDOVER",
    "CANARY_SKIPPED",
    "CAREER_FAILED",
    "COMMIT_OUTCOME_UNKNOWN",
    "DEFERRED_TO_HANDOVER_TARGET",
    "DRAINED",
    "EXECUTE_NOT_LEADER",
    "FENCED",
    "HANDED_OVER",
    "HANDING_OVER",
    "HANDOVER_RECORDED",
    "HANDOVER_RECORD_NOT_WRITTEN",
    "HANDOVER_REQUESTED",
    "HEALTHY_AGAIN",
    "INAUGURATED",
    "INAUGURATING",
    "INAUGURATION_ABANDONED",
    "LEADERSHIP_SUSPENDED",
    "LEFT_ELECTION",
    "MEMBERS_CHANGED",
    "QUEUE_MOVE_DONE",
    "QUEUE_MOVE_STARTED",
    "RUNNER_LOGGER",
    "RUNNER_STARTING",
    "RUNNER_STATE",
    "STALE_ELECTED_IGNORED",
    "STALLED",
]

#: the runner's logger: its events carry ``logger="tenure.runner"``
RUNNER_LOGGER: Final = "tenure.runner"

RUNNER_STARTING: Final = "runner_starting"
RUNNER_STATE: Final = "runner_state"  # fields old, new (Role values), epoch, queue
INAUGURATING: Final = "inaugurating"
INAUGURATED: Final = "inaugurated"
INAUGURATION_ABANDONED: Final = "inauguration_abandoned"
LEADERSHIP_SUSPENDED: Final = "leadership_suspended"
HANDING_OVER: Final = "handing_over"
HANDOVER_RECORDED: Final = "handover_recorded"
HANDOVER_RECORD_NOT_WRITTEN: Final = "handover_record_not_written"
HANDED_OVER: Final = "handed_over"
FENCED: Final = "fenced"
EXECUTE_NOT_LEADER: Final = "execute_not_leader"
COMMIT_OUTCOME_UNKNOWN: Final = "commit_outcome_unknown"
CAREER_FAILED: Final = "career_failed"
BACKING_OFF: Final = "backing_off"  # after a career failure, before rejoining
HANDOVER_REQUESTED: Final = "handover_requested"  # the leader acts on `tenure handover` (field to)
DEFERRED_TO_HANDOVER_TARGET: Final = "deferred_to_handover_target"  # one ahead of the target steps aside
STALLED: Final = "stalled"  # the replica gives every lock up and exits (fields reason, detail, batch, epoch, queue)
QUEUE_STALLED: Final = "queue_stalled"  # one queue's term revoked for a stall, the others go on (same fields)
STALE_ELECTED_IGNORED: Final = "stale_elected_ignored"
BATCH_ATTEMPT_FAILED: Final = "batch_attempt_failed"
LEFT_ELECTION: Final = "left_election"
LEFT_LINE_AT_CAP: Final = "left_line_at_cap"  # leading --max-queues-led queues: out of a queue's line (field queue)
HEALTHY_AGAIN: Final = "healthy_again"
DRAINED: Final = "drained"
CANARY_HANDOVER: Final = "canary_handover"
CANARY_SKIPPED: Final = "canary_skipped"
MEMBERS_CHANGED: Final = "members_changed"  # the balance saw another set of members (field members)
QUEUE_MOVE_STARTED: Final = "queue_move_started"  # the balance hands a led queue to the plan's member (queue, to)
QUEUE_MOVE_DONE: Final = "queue_move_done"  # that queue has a new leader (queue, to, leader), or the request expired
