"""Smoke test of bench/: the quickest benchmarks run end to end on tiny sizes, and their output keeps its shape.

Speed is never asserted here: these are benchmarks, and the machines are noisy. Only shapes and counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bench import run
from bench._common import CpuMeter, Result, Target, markdown_table, percentiles, write_result
from bench._plots import add_plot, change_plot, latency_plot, rate_plot
from bench._throughput import _disturbed, _leader_batches, _logged_batches, _rate_over_time, _steady_rate
from tenure.service.local import wait_for

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([], {"n": 0, "p50": None, "max": None}, id="empty"),
        pytest.param([3.0], {"n": 1, "p50": 3.0, "p90": 3.0, "p99": 3.0, "max": 3.0}, id="one"),
        pytest.param([float(i) for i in range(1, 11)], {"n": 10, "p50": 5.0, "p90": 9.0, "p99": 10.0, "max": 10.0},
                     id="nearest-rank-of-ten"),
        pytest.param([5.0, 1.0, 3.0], {"p50": 3.0, "mean": 3.0}, id="unsorted-input"),
    ],
)
def test_percentiles_are_nearest_rank(values: list[float], expected: dict[str, float | None]) -> None:
    """percentiles() uses nearest rank on sorted data and gives None for an empty sample."""
    stats = percentiles(values)
    assert {k: stats[k] for k in expected} == expected


def test_markdown_table_unions_columns_and_marks_missing_cells() -> None:
    """Columns come from every row in first-seen order; a missing or None cell shows a dash."""
    table = markdown_table([{"a": 1, "b": 0.123456}, {"a": None, "c": "x"}])
    assert table.splitlines() == ["| a | b | c |", "|---|---|---|", "| 1 | 0.1235 | — |", "| — | — | x |"]


def test_steady_rate_skips_warm_up_batches_and_flags_gaps() -> None:
    """The steady rate counts batches after the warm-up ones over the time since the last warm-up batch ended."""
    batches = [{"batch_id": i, "committed_at": float(i), "written": 100} for i in range(10)]
    figures = _steady_rate(batches)
    assert figures["records_per_s"] == 100.0  # 6 batches of 100 records over 6 s (batch 3 to batch 9)
    assert figures["contiguous"] is True
    assert _steady_rate([b for b in batches if b["batch_id"] != 5])["contiguous"] is False


def test_logged_batches_are_the_leaders_committed_batches_without_the_warm_up(tmp_path: Path) -> None:
    """The throughput bench reads tenure's batches from the replica's log: the warm-up's and other events are
    left out, a partial last line is skipped, and each batch began ``batch_s`` before its event."""
    log = tmp_path / "replica-1.log"
    lines = [
        {"event": "batch_committed", "warmup": True, "batch": 0, "written": 5, "batch_s": 1.0,
         "timestamp": "2026-11-26T10:00:00Z"},
        {"event": "inaugurated", "epoch": 1, "timestamp": "2026-11-26T10:00:01Z"},
        {"event": "batch_committed", "epoch": 1, "batch": 0, "written": 100, "batch_s": 1.5,
         "timestamp": "2026-11-26T10:00:03.500000Z"},
        {"event": "batch_skipped", "batch": 0, "timestamp": "2026-11-26T10:00:04Z"},
    ]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines) + "Spark says hello\n" +
                   '{"event": "batch_committed", "epoch": 1, "bat')
    (batch,) = _logged_batches(log)
    assert batch["batch_id"] == 0 and batch["written"] == 100
    assert batch["committed_at"] - batch["started_at"] == pytest.approx(1.5)
    assert batch["committed_at"] % 60 == pytest.approx(3.5)


def test_the_leaders_batches_are_read_from_whichever_replica_committed_and_a_change_of_leader_is_refused(
        tmp_path: Path) -> None:
    """With several replicas, the throughput bench measures the one whose log has committed batches (followers log
    only their warm-up's, or nothing yet); a second replica that committed means the run saw a leadership change,
    which is refused rather than measured as a steady rate."""
    def write(name: str, *events: dict[str, object]) -> Path:
        log = tmp_path / f"{name}.log"
        log.write_text("".join(json.dumps({"timestamp": "2026-11-26T10:00:00Z", **e}) + "\n" for e in events))
        return log

    warm_up = {"event": "batch_committed", "warmup": True, "batch": 0, "written": 5, "batch_s": 1.0}
    committed = {"event": "batch_committed", "epoch": 1, "batch": 0, "written": 100, "batch_s": 1.0}
    first, second, third = write("r1", warm_up), write("r2", warm_up, committed), tmp_path / "r3.log"
    assert _leader_batches([first, second, third]) == (second, _logged_batches(second))
    assert _leader_batches([first, third]) == (first, [])
    write("r1", warm_up, committed)
    with pytest.raises(RuntimeError, match="leadership changed during the run \\(r1, r2 committed\\)"):
        _leader_batches([first, second, third])


def test_a_run_is_disturbed_when_other_processes_took_more_than_a_tenth_of_a_core() -> None:
    """Other processes' CPU over the run's wall time decides; a run without CPU figures is not judged."""
    assert _disturbed({"cpu": {"wall_s": 50.0, "other_cpu_s": 70.0}})
    assert not _disturbed({"cpu": {"wall_s": 50.0, "other_cpu_s": 3.0, "zookeeper_cpu_s": 20.0}})
    assert not _disturbed({"cpu": {}}) and not _disturbed({})


def test_cpu_meter_counts_a_child_that_exited_with_its_parent(tmp_path: Path) -> None:
    """A process tree's CPU includes children that exited before the reading (as Spark's Python workers do)."""
    meter = CpuMeter()
    meter.start(os.getpid())
    subprocess.run([sys.executable, "-c", "sum(range(30_000_000))"], check=True)
    figures = meter.stop()
    assert figures["driver_cpu_s"] >= 0.3, figures
    assert figures["wall_s"] > 0 and figures["cores_busy"] > 0


def test_cpu_meter_leaves_out_an_orphan_that_init_reaps(tmp_path: Path) -> None:
    """An orphan that spent its CPU before the reading and exits during it (an earlier run's JVM outliving its
    Python process) is reaped by init, whose reaped time would carry the orphan's whole lifetime into ``other``:
    the meter must not count it (it once marked a bare run as disturbed by 81 s of a 50-s run). Init's own
    reading is compared, not ``other``, which counts whatever else runs on the machine meanwhile."""
    spun, go = tmp_path / "spun", tmp_path / "go"
    child = (f"import pathlib, time\nwhile time.process_time() < 0.6: pass\npathlib.Path({str(spun)!r}).touch()\n"
             f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)")
    launcher = (f"import subprocess, sys, time\nprint(subprocess.Popen([sys.executable, '-c', {child!r}]).pid, "
                "flush=True)\ntime.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        orphan = psutil.Process(int(parent.stdout.readline()))
        wait_for(spun.exists, 60, "the child to spin")
        meter = CpuMeter()
        meter.start(os.getpid())
        parent.kill()  # the child lives on, an orphan
        parent.wait()
        wait_for(lambda: orphan.ppid() != parent.pid, 60, "the orphan to be adopted")
        if orphan.ppid() != 1:
            pytest.skip(f"orphans are adopted by a subreaper here (pid {orphan.ppid()}), not by init")
        go.touch()
        wait_for(lambda: not orphan.is_running(), 60, "init to reap the orphan")
        init_s = meter._read()[1][1] - meter._start[1][1]
    finally:
        go.touch()
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert init_s < 0.3, init_s


def test_cpu_meter_names_the_other_process_that_used_the_most() -> None:
    """A disturbed run says what disturbed it: the busiest process outside the measured tree, by command line."""
    # Spins for 0.6 CPU seconds, then sleeps: its CPU no longer moves when the meter and the test read it.
    spin = "import time\nwhile time.process_time() < 0.6: pass\ntime.sleep(60)"
    measured = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "measured-tree"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "idle-neighbour"])
    meter = CpuMeter()
    meter.start(measured.pid)
    busy = subprocess.Popen([sys.executable, "-c", spin, "busy-neighbour"])
    try:
        neighbour = psutil.Process(busy.pid)
        wait_for(lambda: sum(neighbour.cpu_times()[:2]) >= 0.5 and neighbour.status() == psutil.STATUS_SLEEPING,
                 30, "the busy neighbour to spin its 0.6 s and sleep")
        figures = meter.stop()
        busy_s = sum(psutil.Process(busy.pid).cpu_times()[:2])
    finally:
        for proc in (measured, idle, busy):
            proc.kill()
            proc.wait()
    assert figures["other_cpu_s"] >= busy_s >= 0.5, figures
    named, _, used = figures["heaviest_other"].rpartition(" (")
    # On a busy machine another process may have used more than ours: then it must be named, with its seconds.
    assert "busy-neighbour" in named or float(used.removesuffix(" s)")) >= busy_s - 0.05, figures


def test_result_renders_targets_and_errors() -> None:
    """A result's markdown names a missed target and a failure plainly."""
    result = Result(name="x", title="X", command="python -m bench.run --only x", error="TimeoutError: slow",
                    targets=[Target("gap p50 (s)", 2.5, "≤ 1 s", False)])
    text = result.to_markdown()
    assert "MISSED" in text
    assert "**Failed:** TimeoutError: slow" in text


def test_rate_over_time_is_each_batchs_records_over_the_time_since_the_previous_commit() -> None:
    """Per-batch rates: the first batch has no previous commit; later ones divide by the interval before them."""
    batches = [{"batch_id": 0, "committed_at": 10.0, "written": 50}, {"batch_id": 2, "committed_at": 14.0,
                                                                       "written": 300},
               {"batch_id": 1, "committed_at": 12.0, "written": 100}]
    assert _rate_over_time(batches) == [[2.0, 50.0], [4.0, 150.0]]


def test_result_markdown_renders_named_tables_and_plots_and_round_trips_through_json() -> None:
    """Named tables follow the main one, plots are images relative to the result's folder, and from_json
    gives back what to_json wrote (older files without tables or plots read too)."""
    result = Result(name="handover", title="Handover", command="c", table=[{"a": 1}],
                    targets=[Target("gap", 1.5, "≤ 1 s", False)], tables={"Split": [{"b": 2}]},
                    plots=["handover.png"], notes=["a note"])
    text = result.to_markdown()
    assert text.index("| a |") < text.index("**Split**") < text.index("![Handover](handover.png)") \
        < text.index("- a note")
    assert Result.from_json(json.loads(json.dumps(result.to_json()))) == result
    legacy = {k: v for k, v in result.to_json().items() if k not in ("tables", "plots")} | {"unknown": 1}
    assert Result.from_json(legacy).tables == {}


def test_plots_draw_pngs_and_a_failed_plot_becomes_a_note(tmp_path: Path) -> None:
    """Each drawing helper writes a PNG; add_plot lists it in result.plots, or notes why there is none."""
    rows = [{"gap_s": 5.0, "segments_s": {"stop_query": 1.0, "release": 0.5, "election": 0.3, "session": None,
                                          "inauguration": 0.2, "query_start": 0.7, "planning": 0.4, "read": 1.1,
                                          "stage": 0.8, "commit": 0.05, "publish": 0.15}},
            {"gap_s": 4.0, "split_error": "SplitError: no commit"}]
    naive = [{"gap_s": 25.0, "segments_s": {"stop_query": 1.0, "election": 1.2, "naive_start": 22.8}}]
    result = Result(name="handover", title="Handover", command="c")
    add_plot(result, tmp_path, lambda path: change_plot(path, {"tenure-warm": rows, "naive": naive}, title="t",
                                                        total_key="gap_s", ylabel="s", lines={"target": 1.0}))
    add_plot(result, tmp_path, lambda path: rate_plot(path.with_name("rate.png"),
                                                      {"bare round 1": [[1.0, 9.0], [2.0, 10.0]],
                                                       "tenure round 1": [[1.0, 8.0]]}, title="t"))
    latency_plot(tmp_path / "latency.png", {"tenure": [0.5, 1.0, 2.0], "bare": [0.4, 0.9], "empty": []},
                 {"p99 target": 5.0}, "latency")

    def broken(_path: Path) -> None:
        raise ValueError("no data")

    add_plot(result, tmp_path, broken)
    assert result.plots == ["handover.png", "handover.png"]
    assert result.notes == ["No plot: ValueError: no data"]
    for name in ("handover.png", "rate.png", "latency.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")


def test_summary_merges_by_benchmark_so_a_folder_describes_every_benchmark_in_it(tmp_path: Path) -> None:
    """A second run into a folder replaces its own benchmarks' entries and keeps the others; SUMMARY.md shows
    every benchmark whose result file is there."""
    first = [Result(name="herd", title="Herd", command="h", seconds=5.0),
             Result(name="handover", title="Handover", command="x", seconds=9.0,
                    targets=[Target("gap", 2.0, "≤ 1 s", False)])]
    for result in first:
        write_result(tmp_path, result)
    summary = run._merge_summary(tmp_path, first, 14.0, False, ["--only", "herd", "handover"])
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    again = Result(name="handover", title="Handover", command="x", seconds=7.0,
                   targets=[Target("gap", 0.5, "≤ 1 s", True)])
    write_result(tmp_path, again)
    merged = run._merge_summary(tmp_path, [again], 7.0, False, ["--only", "handover"])
    assert set(merged["benchmarks"]) == {"herd", "handover"}
    assert merged["benchmarks"]["handover"]["seconds"] == 7.0
    assert merged["benchmarks"]["herd"]["seconds"] == 5.0
    assert [i["benchmarks"] for i in merged["invocations"]] == [["herd", "handover"], ["handover"]]
    text = run._summary_markdown(tmp_path, merged)
    assert "### Herd" in text and "### Handover" in text and "| handover | gap | 0.5 |" in text


@pytest.mark.long
@pytest.mark.timeout(1500)
def test_quick_run_of_herd_fence_latency_and_failover_writes_results_and_plots(tmp_path: Path) -> None:
    """`python -m bench.run --quick --only herd fence_latency failover` runs against a real ensemble (and 3 warm
    Spark replicas) and writes results; failover draws its plot and splits its crash into segments."""
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "herd", "fence_latency", "failover", "--out",
         str(out), "--work", str(tmp_path / "work")],
        cwd=REPO, capture_output=True, text=True, timeout=1440, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for name in ("herd", "fence_latency", "failover"):
        body = json.loads((out / f"{name}.json").read_text())
        assert body["name"] == name
        assert body["error"] is None
        assert {"params", "figures", "table", "targets", "notes", "seconds", "command"} <= set(body)
        assert all({"name", "measured", "target", "met"} <= set(t) for t in body["targets"])
        assert (out / f"{name}.md").read_text().startswith("### ")
    herd = json.loads((out / "herd.json").read_text())
    rows = herd["figures"]["changes"]
    assert {(r["recipe"], r["N"]) for r in rows} == {(recipe, n) for recipe in ("tenure", "children-watch")
                                                     for n in (5, 10)}
    for row in rows:
        # Counts, not speed: tenure wakes one successor; the children watch wakes every other contender.
        expected = 1 if row["recipe"] == "tenure" else row["N"] - 1
        assert row["deliveries (client)"] == expected
        assert row["fired (mntr) − leader's own"] == expected
    fence = json.loads((out / "fence_latency.json").read_text())
    assert fence["figures"]["fenced_ms"]["n"] == fence["params"]["commits"]
    # The split is the same code for a graceful handover (bench._handover._run_cluster); a quick handover run,
    # three recipes of 3 Spark replicas, takes 7 minutes here, so the crash carries the end-to-end check.
    failover = json.loads((out / "failover.json").read_text())
    assert failover["plots"] == ["failover.png"]
    assert (out / "failover.png").read_bytes().startswith(b"\x89PNG")
    assert "![" in (out / "failover.md").read_text()
    crashes = failover["figures"]["changes"]
    assert crashes and all("split_error" not in r for r in crashes), crashes
    for row in crashes:
        segments = row["segments_s"]
        assert next(iter(segments)) == "detection" and "stop_query" not in segments
        assert segments["detection"] is not None and segments["stage"] is not None
        assert sum(v or 0 for k, v in segments.items() if k not in ("commit", "publish")) == \
            pytest.approx(row["signal_to_first_commit_s"], abs=0.02)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["benchmarks"]) == {"herd", "fence_latency", "failover"}
    assert (out / "SUMMARY.md").exists()


def test_latency_figures_leave_out_the_prefill_and_the_first_batches() -> None:
    """Latency is per queue file (visible − landed); batches that read the prefill's files and the first
    ``skip`` steady ones are left out; a batch's duration runs from its trigger to its commit."""
    from bench._latency import _figures

    landed = {"pre-1": 0.0, "a": 10.0, "b": 11.0, "c": 12.0, "d": 12.5}
    batches = [
        {"batch_id": 0, "files": ["pre-1"], "triggered_at": 0.1, "done_at": 5.0, "visible_at": 5.1},
        {"batch_id": 1, "files": ["pre-1", "a"], "triggered_at": 5.2, "done_at": 10.4, "visible_at": 10.5},
        {"batch_id": 2, "files": ["b"], "triggered_at": 11.1, "done_at": 11.5, "visible_at": 11.6},
        {"batch_id": 3, "files": ["c", "d"], "triggered_at": 12.6, "done_at": 13.0, "visible_at": 13.1},
        {"batch_id": 4, "files": [], "triggered_at": 13.2, "done_at": 13.3, "visible_at": 13.4},
    ]
    figures = _figures(batches, landed, {"pre-1"}, skip=1)
    assert figures["latencies"] == [1.1, 0.6]  # batch 3 only: c and d
    assert figures["durations"] == [0.4]
    assert figures["batches"] == 1


def test_paired_runs_rotate_the_order_and_render_medians_and_ratios_to_the_first_way() -> None:
    """Paired runs rotate the ways' order by one place a round; the table gives each way its median records/s over
    rounds (a run without a rate left out), its ratio to the first way, its median read step, and every round's rate."""
    from bench._paired import _order, _render

    names = ["bare", "a", "b"]
    assert [_order(names, i) for i in range(4)] == [
        ["bare", "a", "b"], ["a", "b", "bare"], ["b", "bare", "a"], ["bare", "a", "b"]]

    def run(way: str, rate: float | None, read: float) -> dict[str, object]:
        return {"way": way, "records_per_s": rate, "read_s": {"p50": read}, "in_batch_s": {"p50": read + 1}}

    results = {"command": "x.py 3", "records": 1000, "records_per_file": 10, "rounds": 3, "runs": [
        run("bare", 100.0, 2.0), run("bare", 120.0, 1.0), run("bare", 90.0, 3.0),
        run("a", 95.0, 2.5), run("a", None, 9.0), run("a", 105.0, 1.5),
        run("b", 50.0, 4.0)]}
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in _render(results, "T", names).splitlines()
            if line.startswith("| ") and not line.startswith("| way")}
    assert rows["bare"][1:4] == ["100", "1.000", "2.000"]
    assert rows["a"][1:4] == ["100", "1.000", "2.500"]  # the run without a rate is left out of its median
    assert rows["b"][1:3] == ["50", "0.500"]
    assert rows["a"][5].rstrip(" |") == "95, , 105"
