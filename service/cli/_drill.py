"""``tenure drill``: failover drills and the chaos run; the rules between its arguments are the drill's own."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tenure.election import MAX_QUEUES
from tenure.errors import TenureError
from tenure.service._logs import log_to_file
from tenure.service.cli._root import fail

__all__ = ["drill"]


@click.command()
@click.argument("scenarios", nargs=-1, required=True)
@click.option("--json", "json_out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write every result (figures, criteria, timeline) as JSON to this file.")
@click.option("--plot", "plot_out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also draw a PNG timeline: leadership per replica, commits, fault and heal markers.")
@click.option("--records", type=click.IntRange(min=100), default=None,
              help="Records the producer writes per scenario (Spark career). [default: 20000; 6000 with --short]")
@click.option("--career", type=click.Choice(["spark", "counter"]), default="spark", envvar="TENURE_DRILL_CAREER",
              show_default=True, help="The replicas' career; the audit is `verify` (spark) or the counter check.")
@click.option("--short", is_flag=True, help="The shortened timeline of the tests: session timeout 4 s, "
              "fewer records; the stuck-leader drills with probe timeout 3 s, stall timeout 20 s, row timeout 2 s "
              "(else the replica's defaults).")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path(".tenure/drill"),
              show_default=True, help="One folder per scenario, wiped first: ZooKeeper data, data root, logs.")
@click.option("--faults", type=click.IntRange(1, 100), default=None,
              help="chaos: how many faults, spread over the production. [default: 5]")
@click.option("--seed", type=int, default=None,
              help="chaos: draws the faults, their times and the producer's data; printed in the report. "
              "[default: drawn]")
@click.option("--queues", type=click.IntRange(1, MAX_QUEUES), default=None,
              help="chaos: run the drill group as a topic of this many queues (the producer routes by key); each "
              "leader's fault names a queue and hits its leader, recovery is waited for on every queue it led. "
              "[default: 1]")
@click.option("--spark-cluster", "spark_workers", type=click.IntRange(0, 8), default=0,
              envvar="TENURE_DRILL_SPARK_CLUSTER", show_default=True,
              help="Run the leader on an embedded Spark standalone cluster of this many workers (0: local Spark in "
              "each replica); needed by worker-loss and master-loss, which `all` then includes.")
def drill(scenarios: tuple[str, ...], json_out: Path | None, plot_out: Path | None, records: int | None,
          career: str, short: bool, directory: Path, faults: int | None, seed: int | None, queues: int | None,
          spark_workers: int) -> None:
    """Failover drills: SCENARIO … or `all`; prints figures and PASS/FAIL per criterion, exits 1 on any FAIL.

    Scenarios: handover, targeted-handover, crash, zombie, partition, short-partition, zk-follower-loss, zk-leader-loss,
    quorum-loss, flaky-link, spark-death, cold-start, rolling-restart; with --spark-cluster W also worker-loss
    (SIGKILL a worker, W >= 2) and master-loss (SIGKILL the Spark master, restart it). Network drills need root and
    `ip netns`, and skip on a cluster.

    `stuck-leader` runs the four drills of a replica whose work hangs while its process and ZooKeeper session live
    (Spark career, the progress watchdog's default limits): frozen-jvm (the leader's JVM frozen: it gives the lock
    up and exits 4), hung-row-function (the leader's row function hangs on a socket: it stalls and exits 4),
    frozen-next-in-line (the next in line's JVM frozen: it leaves the line, then the leader is SIGTERMed and the
    healthy third takes over) and poison-batch (a batch failing on every leader is set aside after
    --max-batch-attempts terms). Each is also a scenario of its own, and part of `all`.

    `tenure drill chaos --records N --faults K [--seed S] [--queues Q]` (alone): K seeded random faults (leader
    SIGKILL, SIGTERM, whole-tree pause, network partition, ZooKeeper server restart, injected fault points) over a
    steady production, a recovery wait after each, then a full `tenure verify` audit; exits 1 on any failed
    recovery or audit. With --queues Q the group is a topic of Q queues: each leader's fault hits the leader of a
    drawn queue, and every queue that replica led must recover.
    """
    from tenure.service.drill import check_arguments, run_chaos, run_drills

    try:
        check_arguments(scenarios, faults=faults, seed=seed, spark_workers=spark_workers, plot=plot_out is not None,
                        queues=queues)
        events = log_to_file(directory / "drill.log")
        click.echo(f"drill: events in {events}; each run's processes log under its folder's logs/")
        if "chaos" in scenarios:
            code = run_chaos(directory=directory, records=records, faults=faults or 5, seed=seed, career=career,
                             short=short, queues=queues or 1, json_out=json_out, plot_out=plot_out, echo=click.echo)
        else:
            code = run_drills(list(scenarios), directory=directory, records=records, json_out=json_out,
                              plot_out=plot_out, short=short, career=career, spark_workers=spark_workers,
                              echo=click.echo)
    except TenureError as exc:
        fail(exc)
    sys.exit(code)
