"""`tenure drill`: failover drills on the local topology, with measured figures, PASS/FAIL and a timeline plot.

Each scenario starts a fresh topology (3 ZooKeeper servers, 3 replicas; a producer with the Spark career),
injects one fault for real, keeps the work going, lets the system settle and audits the output. What it measures
comes from three sources that do not depend on the career: ZooKeeper's commit record (polled every 50 ms, each
change kept), the replicas' ``/metrics`` (scraped every 200 ms, kept per process so a killed replica's last
counts stay) and the replicas' JSON logs (``runner_state``, ``inaugurated``, ``leadership_suspended`` …).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import structlog

from tenure.service.drill._context import Drill
from tenure.service.drill._criteria import ScenarioResult, judge, verdict
from tenure.service.drill._readout import audit, measure, timeline
from tenure.service.drill._report import plot_timeline, render_report, write_json
from tenure.service.drill._scenarios import SCENARIOS, cluster_refusal, expand
from tenure.service.drill._settings import DrillError, DrillSettings, career_unavailable
from tenure.service.local import EnsembleError, NetNamespace, SparkClusterError, netns_unavailable

__all__ = ["run_drills", "run_scenario"]

_log = structlog.get_logger("tenure.drill")


def run_scenario(name: str, settings: DrillSettings, directory: Path) -> ScenarioResult:
    """Run one scenario in ``directory/<name>`` (wiped first) and judge it; never raises for a failed drill."""
    spec = SCENARIOS[name]
    if spec.spark_only and settings.career != "spark":
        return ScenarioResult(name, spec.fault, "skipped", "needs the Spark career on a cluster" if spec.cluster
                              else f"needs the Spark career ({spec.spark_need})")
    if spec.cluster and not settings.spark_workers:
        return ScenarioResult(name, spec.fault, "skipped", "needs a Spark cluster (--spark-cluster 2)")
    if spec.netns and settings.spark_workers:
        return ScenarioResult(name, spec.fault, "skipped", "the Spark cluster listens on loopback, out of reach "
                              "of a replica in a network namespace: run it without --spark-cluster")
    if spec.netns and (why := netns_unavailable()):
        return ScenarioResult(name, spec.fault, "skipped", why)
    if spec.produce_s is not None and settings.produce_s < spec.produce_s:
        settings = replace(settings, produce_s=spec.produce_s)  # the same records, spread over longer
    scenario_dir = directory / name
    if scenario_dir.exists():
        shutil.rmtree(scenario_dir)
    started = time.monotonic()
    ns: NetNamespace | None = None
    _log.info("drill_starting", scenario=name, career=settings.career, directory=str(scenario_dir))
    try:
        ns = NetNamespace.create() if spec.netns else None
        for attempt in (1, 2):
            if scenario_dir.exists():
                shutil.rmtree(scenario_dir)
            drill = Drill(name, settings, scenario_dir, ns, hang_files=spec.hang_files,
                          replica_spec=spec.replica_spec(settings) if spec.replica_spec is not None else None)
            try:
                if not spec.custom_start:
                    drill.prepare()
                spec.inject(drill)
                drill.settle()
            except (EnsembleError, SparkClusterError) as exc:
                drill.m.error = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # a timeout or a failed step: reported as a failed criterion
                drill.m.error = f"{type(exc).__name__}: {exc}"
                _log.error("drill_step_failed", scenario=name, error=drill.m.error)
            finally:
                drill.ended_at = time.time()
                if drill.monitor is not None:
                    drill.monitor.stop()
                drill.topology.stop()
            # The ensemble's and the Spark cluster's ports are picked free but can be taken by another process
            # before they bind them: start over once on fresh ports.
            if not (drill.monitor is None and drill.m.error
                    and drill.m.error.startswith(("EnsembleError", "SparkClusterError")) and attempt == 1):
                break
            _log.warning("drill_retrying", scenario=name, reason=drill.m.error)
    finally:
        if ns is not None:
            ns.close()
    try:
        audit(drill)
    except Exception as exc:
        drill.m.audit_detail = f"audit failed: {type(exc).__name__}: {exc}"
    if drill.monitor is not None:
        measure(drill)
    criteria = judge(drill.m, settings)
    result = ScenarioResult(name, spec.fault, verdict(criteria), seconds=time.monotonic() - started,
                            measurements=drill.m, criteria=criteria, timeline=timeline(drill))
    _log.info("drill_finished", scenario=name, status=result.status, seconds=round(result.seconds, 1))
    return result


def run_drills(scenarios: list[str], *, directory: Path, records: int | None, json_out: Path | None,
               plot_out: Path | None, short: bool = False, career: str = "spark", spark_workers: int = 0,
               echo: Callable[[str], None] = print) -> int:
    """Run the named scenarios (or ``all``), print the report, write JSON and plot; 1 if any criterion failed.

    With ``spark_workers`` every scenario's leader runs on an embedded Spark cluster of that many workers, and
    ``all`` includes the scenarios that fault the cluster. Refusals (``DrillError``) come before anything starts.
    """
    names = expand(scenarios, spark_cluster=spark_workers > 0)
    if why := cluster_refusal(names, career=career, spark_workers=spark_workers):
        raise DrillError(why)
    settings = DrillSettings.make(career=career, records=records, short=short, spark_workers=spark_workers)
    if why := career_unavailable(career):
        raise DrillError(why)
    results: list[ScenarioResult] = []
    for name in names:
        result = run_scenario(name, settings, directory)
        results.append(result)
        echo(f"drill {name}: {result.status.upper()}" + (f" ({result.reason})" if result.reason else "")
             + (f" in {result.seconds:.0f} s" if result.status != "skipped" else ""))
    echo(render_report(results))
    if json_out is not None:
        write_json(json_out, {"settings": asdict(settings), "results": [r.to_dict() for r in results]})
    if plot_out is not None:
        plot_timeline(results, plot_out)
    return 1 if any(r.status == "fail" for r in results) else 0
