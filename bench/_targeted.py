"""Targeted handover (``tenure handover --to``) against the graceful SIGTERM handover, paired on one topology.

The issue's claim to check: a targeted handover costs what a graceful one does. Both kinds alternate on the same
3-replica warm topology under the same producer, so their gaps are compared in one run, as a ratio.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench._cluster import HANDOVER_TIMEOUT_S, SESSION_TIMEOUT_S, CommitTimeline, TenureCluster
from bench._common import BenchContext, Result, Target
from bench._handover import change, stats, steady
from tenure.election import connected, group_status
from tenure.service.ops import request_handover

__all__ = ["run_targeted"]

_RATE = 2000.0
_START_TIMEOUT_S = 600.0
_CHANGE_TIMEOUT_S = 300.0


def _targeted_change(cluster: TenureCluster, timeline: CommitTimeline) -> dict[str, Any]:
    """Hand over to the replica last in line (one replica steps aside); time the target's first commit."""
    before = steady(cluster, timeline, _START_TIMEOUT_S)
    with connected(cluster.connect_string) as client:
        line = [c.identity.replica_id for c in group_status(client, cluster.group).contenders if c.identity]
        target = line[-1]
        start = len(timeline.snapshot())
        requested_at = time.time()
        request_handover(client, cluster.group, to=target, timeout_s=_CHANGE_TIMEOUT_S)
    first = timeline.wait_for(lambda c: c.epoch != before.epoch, _CHANGE_TIMEOUT_S, "by the target", start=start)
    last_old = max((c for c in timeline.snapshot() if c.epoch == before.epoch), key=lambda c: c.committed_at)
    return {"kind": "targeted", "from": before.replica_id, "to": first.replica_id, "target": target,
            "stepped_aside": len(line) - 2, "gap_s": round(first.committed_at - last_old.committed_at, 3),
            "request_to_first_commit_s": round(first.committed_at - requested_at, 3)}



def run_targeted(ctx: BenchContext) -> Result:
    """Alternate a graceful SIGTERM handover and a targeted one, ``count`` of each, on one warm topology."""
    count = 1 if ctx.quick else 5
    result = Result(
        name="targeted", title="Targeted handover (tenure handover --to) against the graceful SIGTERM handover",
        command="python -m bench.run --only targeted",
        params={"handovers_per_kind": count, "contenders": 3, "producer_records_per_s": _RATE,
                "session_timeout_s": SESSION_TIMEOUT_S, "handover_timeout_s": HANDOVER_TIMEOUT_S,
                "target": "the replica last in line (the one between steps aside)"},
    )
    rows: list[dict[str, Any]] = []
    cluster = TenureCluster(ctx.work / "tenure-warm", standby="warm", rate=_RATE)
    cluster.start()
    try:
        with CommitTimeline(cluster.connect_string, cluster.group) as timeline:
            for index in range(count):
                for kind in ("sigterm", "targeted"):
                    row = ({"kind": "sigterm", **change(cluster, timeline, crash=False)} if kind == "sigterm"
                           else _targeted_change(cluster, timeline))
                    rows.append(row)
                    print(f"bench: targeted {index + 1}/{count} {kind}: {row}", file=sys.stderr, flush=True)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc} (after {len(rows)} handovers)"
    finally:
        cluster.stop()
    by_kind = {kind: stats([r["gap_s"] for r in rows if r["kind"] == kind]) for kind in ("sigterm", "targeted")}
    for kind, gap in by_kind.items():
        result.table.append({"handover": kind, "n": gap["n"], "gap p50 s": gap["p50"], "gap p90 s": gap["p90"],
                             "gap max s": gap["max"]})
    sigterm, targeted = by_kind["sigterm"]["p50"], by_kind["targeted"]["p50"]
    ratio = round(targeted / sigterm, 3) if sigterm and targeted is not None else None
    wrong = [r for r in rows if r["kind"] == "targeted" and r["to"] != r["target"]]
    result.figures.update({"gap_s": by_kind, "ratio_targeted_over_sigterm_p50": ratio, "handovers": rows})
    result.targets += [
        Target("gap p50 ratio targeted / SIGTERM", ratio, "≤ 1.2 (a graceful handover's cost)",
               ratio is not None and ratio <= 1.2),
        Target("targeted handovers that reached their target", len(rows) // 2 - len(wrong), f"all {len(rows) // 2}",
               not wrong),
    ]
    result.notes += [
        "Gap: the old leader's last commit to the new leader's first, from `/tenure/<group>/commit` "
        "(`committed_at`), polled every 20 ms, as in the handover benchmark.",
        "A SIGTERMed leader is restarted after its handover (it rejoins at the back once warm); a targeted "
        "handover's old leader rejoins at once, warm. Before each change the leader has made a few commits and "
        "every follower is ready.",
    ]
    return result
