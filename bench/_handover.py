"""Handover gap (graceful, SIGTERM) and crash failover (SIGKILL): tenure warm, tenure cold, the naive recipe;
each change split into segments (``bench._split``) and drawn as a stacked bar."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._cluster import (
    HANDOVER_TIMEOUT_S,
    SESSION_TIMEOUT_S,
    Cluster,
    Commit,
    CommitTimeline,
    NaiveCluster,
    TenureCluster,
    rss,
)
from bench._common import BenchContext, Result, Target, percentiles
from bench._plots import add_plot, change_plot
from bench._split import (
    PROGRESS_FIGURES,
    SEGMENTS,
    Event,
    SplitError,
    batch_progress,
    median_segments,
    read_log,
    split_change,
    steady_interval_s,
    steady_progress,
)
from tenure.service.replica import ReplicaSpec

__all__ = ["change", "run_failover", "run_handover", "stats", "steady"]

_RATE = 2000.0  # records/s from the producer: always data waiting, well below what a leader drains
_STEADY_COMMITS = 3  # commits by the current leader before the next change
# Generous: on a loaded 2-core machine a cold SparkSession alone has taken a minute here.
_START_TIMEOUT_S = 600.0
_CHANGE_TIMEOUT_S = 300.0
_MIB = 1 << 20
_SPLIT_NOTE = ("Segments (`bench/_split.py`): boundaries from the replicas' own JSON logs (`handed_over`, `released`, "
               "`elected`, `spark_session_ready`, `inaugurated`, `query_started`, `batch_committed` with `read_s`, "
               "`stage_s`, `commit_s`) and the first commit's `committed_at`; a graceful split starts at the old "
               "leader's last commit, a crash's at the signal. The gap ends at `committed_at`, which the commit "
               "record takes just before the fenced write: `commit` and `publish` (hatched in the plot) follow it. "
               "A missing event leaves its segment empty (—) and its time in the next one.")


def steady(cluster: Cluster, timeline: CommitTimeline, timeout_s: float) -> Commit:
    """Wait until the current leader has made ``_STEADY_COMMITS`` commits and every follower is ready — in the
    election and, with warm standby, warmed.

    Every one, not just the successor: the replica restarted after the previous change warms its Spark on the
    same 2 cores, and a change made meanwhile measures that contention (handover gaps of 8-12 s against 3.7 s
    with the machine to itself), not the handover. An operator's rolling restart waits for ready the same way.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        latest = timeline.latest()
        states = [cluster.ready(r) for r in cluster.replica_ids()]
        if all(states) and latest is not None and latest.replica_id in cluster.replica_ids() \
                and cluster.pid(latest.replica_id) is not None \
                and sum(c.epoch == latest.epoch for c in timeline.snapshot()) >= _STEADY_COMMITS:
            return latest
        if time.monotonic() > deadline:
            ready_by_id = dict(zip(cluster.replica_ids(), states, strict=True))
            raise TimeoutError(f"{cluster.label}: not steady after {timeout_s:g} s (ready: {ready_by_id}, "
                               f"latest commit: {latest})")
        time.sleep(0.2)


def change(cluster: Cluster, timeline: CommitTimeline, *, crash: bool) -> dict[str, Any]:
    """One leader change: SIGTERM (or SIGKILL) the leader, time the successor's first commit, restart it."""
    before = steady(cluster, timeline, _START_TIMEOUT_S)
    leader, old_epoch = before.replica_id, before.epoch
    followers = [r for r in cluster.replica_ids() if r != leader and cluster.ready(r)]
    footprint = {"leader_rss_mib": round(rss(cluster, leader) / _MIB, 1),
                 "follower_rss_mib": round(sum(rss(cluster, r) for r in followers) / max(len(followers), 1) / _MIB, 1)}
    start = len(timeline.snapshot())
    signalled_at = time.time()
    if crash:
        cluster.kill(leader)
    else:
        cluster.terminate(leader)
    exited_at = time.time()
    first = timeline.wait_for(lambda c: c.epoch != old_epoch, _CHANGE_TIMEOUT_S, "by a new leader", start=start)
    last_old = max((c for c in timeline.snapshot() if c.epoch == old_epoch), key=lambda c: c.committed_at)
    cluster.restart(leader)
    return {
        "from": leader, "to": first.replica_id,
        "gap_s": round(first.committed_at - last_old.committed_at, 3),
        "signal_to_first_commit_s": round(first.committed_at - signalled_at, 3),
        "signalled_at": signalled_at,
        "signal_to_exit_s": round(exited_at - signalled_at, 3),
        "first_batch_records": first.written,
        "first_batch_id": first.batch_id,
        **footprint,
    }


def _run_cluster(cluster: Cluster, count: int, *, crash: bool, rows: list[dict[str, Any]],
                 budget_s: float | None = None) -> None:
    """Append one row per change to ``rows`` (so the changes measured survive a later failure); split each once
    the replicas have stopped, when their logs are complete (a batch's event follows its commit record)."""
    started = time.monotonic()
    cluster.start()
    timeline = CommitTimeline(cluster.connect_string, cluster.group)
    try:
        with timeline:
            for index in range(count):
                if budget_s is not None and index > 0 and time.monotonic() - started > budget_s:
                    print(f"bench: {cluster.label}: time budget spent after {index} changes", file=sys.stderr)
                    break
                rows.append(change(cluster, timeline, crash=crash))
                print(f"bench: {cluster.label} change {index + 1}/{count}: {rows[-1]}", file=sys.stderr, flush=True)
    finally:
        cluster.stop()
        _split_rows(cluster, timeline.snapshot(), rows, crash=crash)


def _log_files(cluster: Cluster, replica_id: str) -> list[Path]:
    """A replica's log files: one per replica for tenure (appended across restarts), one per start for naive."""
    if isinstance(cluster, NaiveCluster):
        return sorted(cluster.logs.glob(f"{replica_id}.*.log"))
    if isinstance(cluster, TenureCluster):
        return [cluster.topology.logs / f"{replica_id}.log"]
    return []


def _split_rows(cluster: Cluster, commits: list[Commit], rows: list[dict[str, Any]], *, crash: bool) -> None:
    """Add each row's split (``bench._split.split_change``), or ``split_error`` saying why there is none."""
    events: dict[str, list[Event]] = {}
    for row in rows:
        try:
            for replica_id in (row["from"], row["to"]):
                if replica_id not in events:
                    events[replica_id] = read_log(_log_files(cluster, replica_id))
            row.update(split_change(commits, row, events[row["from"]], events[row["to"]], crash=crash,
                                    naive=isinstance(cluster, NaiveCluster)))
            if not isinstance(cluster, NaiveCluster):
                row["successor_batch_interval_s"] = steady_interval_s(events[row["to"]], row["new_epoch"])
                row["first_batch_progress"] = batch_progress(events[row["to"]], row["new_epoch"],
                                                             row["first_batch_id"])
                row["old_steady_progress"] = steady_progress(events[row["from"]], row["old_epoch"])
        except (SplitError, KeyError, ValueError, OSError) as exc:
            row["split_error"] = f"{type(exc).__name__}: {exc}"


def _segment_tables(changes: dict[str, list[dict[str, Any]]], noun: str, total_key: str,
                    total_title: str) -> dict[str, list[dict[str, Any]]]:
    """Two tables: the median of each segment per recipe, and every change's segments (labelled, in seconds)."""
    medians = [{"recipe": label, "split": f"{sum(bool(r.get('segments_s')) for r in rows)} of {len(rows)}",
                **median_segments(rows)} for label, rows in changes.items() if rows]
    every = [{"recipe": label, "#": i + 1, total_title: r.get(total_key),
              **{SEGMENTS[k]: v for k, v in (r.get("segments_s") or {}).items()},
              **({"split error": r["split_error"]} if "split_error" in r else {})}
             for label, rows in changes.items() for i, r in enumerate(rows)]
    progress = [{"recipe": label, "#": i + 1, "batch": name, **figures}
                for label, rows in changes.items() for i, r in enumerate(rows)
                for name, figures in ((f"successor's first ({r.get('first_batch_id')})", r.get("first_batch_progress")),
                                      ("old leader's steady (median)", r.get("old_steady_progress")))
                if figures]
    tables = {"Where the time goes: median seconds per segment (medians do not add up to the median total)": medians,
              f"Every {noun}: seconds per segment": every}
    if progress:
        tables[f"Every {noun}: Spark's progress of the successor's first batch and of the old leader's steady "
               f"batches ({', '.join(PROGRESS_FIGURES)}: ms; `batch_progress` and `batch_committed` events)"] = progress
    return tables


def _run_recipes(ctx: BenchContext, recipes: list[tuple[str, Callable[[Path], Cluster]]], count: int, *,
                 crash: bool, result: Result) -> dict[str, list[dict[str, Any]]]:
    """Each recipe's block of changes; a recipe that fails keeps what it measured and the others still run."""
    changes: dict[str, list[dict[str, Any]]] = {}
    errors: list[str] = []
    budget_s = ctx.budget_s / len(recipes) if ctx.budget_s else None
    for label, factory in recipes:
        changes[label] = []
        try:
            _run_cluster(factory(ctx.work / label), count, crash=crash, rows=changes[label], budget_s=budget_s)
        except Exception as exc:
            errors.append(f"{label}: {type(exc).__name__}: {exc} (after {len(changes[label])} changes)")
            result.notes.append(f"{label} stopped early — {errors[-1]}")
    if errors:
        result.error = "; ".join(errors)
    short = {label: len(rows) for label, rows in changes.items() if len(rows) < count}
    if short and not errors:
        result.notes.append(f"Fewer changes than asked ({count}) within the time budget (--budget-min): {short}.")
    return changes


def stats(values: list[float]) -> dict[str, Any]:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in percentiles(values).items()}


def successor_batch_s(rows: list[dict[str, Any]]) -> float | None:
    """The median steady batch of the successors in ``rows`` (each row's ``successor_batch_interval_s``)."""
    values = [r["successor_batch_interval_s"] for r in rows if r.get("successor_batch_interval_s") is not None]
    return stats(values)["p50"] if values else None


def handover_targets(warm: list[dict[str, Any]], summary: dict[str, dict[str, Any]],
                     ratio: float | None) -> list[Target]:
    """Issue 18's: the warm gap within one steady batch of the successor's (+0.5 s at p50, +1 s at p90), and at
    most a tenth of the naive recipe's."""
    gap = summary.get("tenure-warm", {}).get("gap_s", {})
    batch = successor_batch_s(warm)
    out = []
    for stat, slack in (("p50", 0.5), ("p90", 1.0)):
        limit = None if batch is None else round(batch + slack, 3)
        value = gap.get(stat)
        out.append(Target(f"tenure warm gap {stat} (s)", value,
                          f"≤ successor's steady batch {batch} s + {slack:g} s = {limit} s",
                          None if limit is None or value is None else value <= limit))
    out.append(Target("gap p50 ratio tenure-warm / naive", ratio, "≤ 0.1", None if ratio is None else ratio <= 0.1))
    gaps = [r["gap_s"] for r in warm]
    growth = round(gaps[-1] / gaps[0], 3) if len(gaps) >= 2 and gaps[0] > 0 else None
    out.append(Target(f"tenure warm gap: last / first of {len(gaps)} consecutive handovers", growth, "≤ 1.2",
                      None if growth is None else growth <= 1.2))
    return out


def failover_targets(rows: list[dict[str, Any]], worst: float | None) -> list[Target]:
    """Issue 18's: the worst SIGKILL → first commit within the session timeout + a steady batch + 1 s."""
    batch = successor_batch_s(rows)
    limit = None if batch is None else round(SESSION_TIMEOUT_S + batch + 1, 3)
    return [Target("SIGKILL→first commit, worst (s)", worst,
                   f"≤ session timeout {SESSION_TIMEOUT_S:g} s + steady batch {batch} s + 1 s = {limit} s",
                   None if limit is None or worst is None else worst <= limit)]


def run_handover(ctx: BenchContext) -> Result:
    """Graceful handovers (SIGTERM of the leader, then restart it so 3 contenders remain), per recipe."""
    count = 2 if ctx.quick else 10
    result = Result(
        name="handover", title="Handover gap: graceful (SIGTERM) leader changes, data waiting",
        command="python -m bench.run --only handover",
        params={"handovers_per_recipe": count, "contenders": 3, "producer_records_per_s": _RATE,
                "session_timeout_s": SESSION_TIMEOUT_S, "handover_timeout_s": HANDOVER_TIMEOUT_S,
                "spark": "local[2], 2 shuffle partitions, UI off, 5 files per trigger, the default trigger"},
    )
    recipes: list[tuple[str, Callable[[Path], Cluster]]] = [
        ("tenure-warm", lambda d: TenureCluster(d, standby="warm", rate=_RATE)),
        ("naive", lambda d: NaiveCluster(d, rate=_RATE)),
        ("tenure-cold", lambda d: TenureCluster(d, standby="cold", rate=_RATE)),
        # Warm standby with the follower's state kept ready (issue 53; off by default): its term links what is new.
        ("tenure-warm-state", lambda d: TenureCluster(d, standby="warm", rate=_RATE, label="tenure-warm-state",
                                                      spec=ReplicaSpec(standby_state="on"))),
        # The same without the fork server of the query's source runners (issue 53): Spark starts each itself.
        ("tenure-warm-state-fork-off", lambda d: TenureCluster(
            d, standby="warm", rate=_RATE, label="tenure-warm-state-fork-off",
            spec=ReplicaSpec(standby_state="on", fork_server="off"))),
    ]
    if ctx.recipes is not None:
        unknown = set(ctx.recipes) - {label for label, _ in recipes}
        if unknown:
            raise ValueError(f"--recipes: no recipe {sorted(unknown)}; choose from {[r for r, _ in recipes]}")
        recipes = [(label, factory) for label, factory in recipes if label in ctx.recipes]
        result.params["recipes"] = list(ctx.recipes)
    else:  # comparisons of one setting, run only when named
        recipes = [(label, factory) for label, factory in recipes if not label.startswith("tenure-warm-state")]
    changes = _run_recipes(ctx, recipes, count, crash=False, result=result)
    summary: dict[str, dict[str, Any]] = {}
    for label, rows in changes.items():
        if not rows:
            continue
        summary[label] = {"gap_s": stats([r["gap_s"] for r in rows]),
                          "signal_to_first_commit_s": stats([r["signal_to_first_commit_s"] for r in rows])}
        gap = summary[label]["gap_s"]
        result.table.append({"recipe": label, "handovers": gap["n"], "gap p50 s": gap["p50"],
                             "gap p90 s": gap["p90"], "gap max s": gap["max"],
                             "SIGTERM→first commit p50 s": summary[label]["signal_to_first_commit_s"]["p50"],
                             "first batch records (min)": min(r["first_batch_records"] for r in rows)})
    footprint = {label: {"leader_rss_mib": stats([r["leader_rss_mib"] for r in rows])["p50"],
                         "follower_rss_mib": stats([r["follower_rss_mib"] for r in rows])["p50"]}
                 for label, rows in changes.items() if rows}
    result.figures["footprint_median_mib"] = footprint
    result.table += [{"recipe": label, "leader RSS MiB (median)": f["leader_rss_mib"],
                      "follower RSS MiB (median)": f["follower_rss_mib"]} for label, f in footprint.items()]
    warm_p50 = summary.get("tenure-warm", {}).get("gap_s", {}).get("p50")
    naive_p50 = summary.get("naive", {}).get("gap_s", {}).get("p50")
    ratio = round(warm_p50 / naive_p50, 4) if warm_p50 is not None and naive_p50 else None
    result.figures.update({"summary": summary, "changes": changes, "ratio_warm_over_naive_p50": ratio})
    result.tables.update(_segment_tables(changes, "handover", "gap_s", "gap s"))
    add_plot(result, ctx.out, lambda path: change_plot(
        path, changes, title="Graceful handover gap per handover, split: tenure warm vs naive (and tenure cold)",
        total_key="gap_s", ylabel="seconds from the old leader's last commit",
        lines={} if (b := successor_batch_s(changes.get("tenure-warm", []))) is None
        else {"target p50: successor's steady batch + 0.5 s": b + 0.5}))
    result.targets += handover_targets(changes.get("tenure-warm", []), summary, ratio)
    result.notes += [
        "Gap: the old leader's last commit to the new leader's first commit, both read from "
        "`/tenure/<group>/commit` (`committed_at`, the committer's clock, same machine), polled every 20 ms.",
        "Each recipe runs its own block of handovers on its own 3-replica topology (ensemble, producer): three "
        "topologies at once would put 9 Spark JVMs on 2 cores. After each handover the stopped replica is "
        "restarted (it rejoins at the back of the line once ready) and the next change waits until the leader "
        f"has made {_STEADY_COMMITS} commits and every follower is ready (warmed, with warm standby).",
        "Footprint rows: RSS of the replica's process tree (Python + its Spark JVM + Python workers, from /proc) "
        "just before each change, leader and ready followers (mean).",
        "naive: kazoo's `Election` recipe; the winner starts a SparkSession and the same query (same pipeline "
        "functions and Spark settings) on election and stops it on SIGTERM (`bench/_naive.py`).",
        _SPLIT_NOTE,
        "naive logs only its election and its step-down, so its split is: stop query, release + election, then "
        "SparkSession + query + first batch in one segment.",
    ]
    return result


def run_failover(ctx: BenchContext) -> Result:
    """Crash failover: SIGKILL of the leader (warm standby) to the successor's first commit."""
    count = 1 if ctx.quick else 5
    result = Result(
        name="failover", title="Crash failover: SIGKILL of the leader, tenure warm standby",
        command="python -m bench.run --only failover",
        params={"crashes": count, "contenders": 3, "session_timeout_s": SESSION_TIMEOUT_S,
                "producer_records_per_s": _RATE},
    )
    rows = _run_recipes(ctx, [("tenure-warm", lambda d: TenureCluster(d, standby="warm", rate=_RATE))], count,
                        crash=True, result=result)["tenure-warm"]
    kill = stats([r["signal_to_first_commit_s"] for r in rows])
    gap = stats([r["gap_s"] for r in rows])
    result.table = [{"SIGKILL→first commit p50 s": kill["p50"], "p90 s": kill["p90"], "max s": kill["max"],
                     "last→first commit p50 s": gap["p50"], "session timeout s": SESSION_TIMEOUT_S,
                     "crashes": kill["n"]}]
    result.figures = {"kill_to_first_commit_s": kill, "gap_s": gap, "changes": rows}
    result.tables.update(_segment_tables({"tenure-warm": rows}, "crash", "signal_to_first_commit_s",
                                        "SIGKILL→first commit s"))
    add_plot(result, ctx.out, lambda path: change_plot(
        path, {"tenure-warm": rows}, title="Crash failover per crash, split: SIGKILL of the leader → the "
        "successor's first commit", total_key="signal_to_first_commit_s", ylabel="seconds from the SIGKILL",
        lines={f"session timeout {SESSION_TIMEOUT_S:g} s": SESSION_TIMEOUT_S}))
    result.targets += failover_targets(rows, kill["max"])
    result.notes += ["The successor learns of the crash only when ZooKeeper expires the dead leader's "
                     "session, so the floor is the session timeout.", _SPLIT_NOTE]
    return result
