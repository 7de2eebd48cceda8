"""Presenting drills and chaos runs: the shared text and JSON rendering, the drills' report, the timeline plot.

rich and matplotlib are imported where they are used: ``tenure drill --help`` and the CLI's start stay fast.
"""

from __future__ import annotations

import io
import json
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenure.service.drill._criteria import ScenarioResult

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

__all__ = ["pass_fail", "plot_timeline", "render", "render_report", "table", "write_json"]


def render(parts: Iterable[RenderableType], *, width: int) -> str:
    """``parts`` (tables, lines of text with rich markup) printed one after another, as plain text."""
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, color_system=None)
    for part in parts:
        console.print(part)
    return out.getvalue()


def table(title: str, columns: Sequence[str], *, right: Collection[str] = ()) -> Table:
    """An empty table titled ``title`` (on the left) with ``columns``; those in ``right`` right-justified."""
    from rich.table import Table

    out = Table(title=title, title_justify="left")
    for column in columns:
        out.add_column(column, justify="right" if column in right else "left")
    return out


def pass_fail(passed: bool) -> str:
    """A criterion's verdict cell."""
    return "[green]PASS[/]" if passed else "[red]FAIL[/]"


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """``payload`` as indented JSON at ``path`` (its directory created); what JSON cannot hold as its ``str``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str))


def _fmt(value: float | None, unit: str = "s") -> str:
    return "—" if value is None else f"{value:.2f} {unit}".rstrip()


def render_report(results: list[ScenarioResult], *, width: int = 120) -> str:
    """The terminal report: one row of figures per scenario, then every criterion with PASS/FAIL."""
    figure_columns = ("scenario", "result", "detect", "new leader", "commit gap", "commits att/fenced", "changes",
                      "audit lost/dup/inv", "took")
    figures = table("tenure drill", figure_columns, right=figure_columns[2:])
    checks = table("criteria", ("scenario", "criterion", "", "measured"))
    for r in results:
        colour = {"pass": "green", "fail": "red", "skipped": "yellow"}[r.status]
        status = f"[{colour}]{r.status.upper()}[/]"
        m = r.measurements
        if m is None:
            figures.add_row(r.scenario, status, "", "", "", "", "", "", "")
            checks.add_row(r.scenario, "skipped", "[yellow]SKIP[/]", r.reason)
            continue
        audit = "—" if m.audit_ok is None else f"{m.audit_lost}/{m.audit_duplicated}/{m.audit_inversions}"
        figures.add_row(r.scenario, status, _fmt(m.detect_s), _fmt(m.new_leader_s), _fmt(m.commit_gap_s),
                        f"{m.commits_attempted}/{m.commits_fenced}", str(m.leadership_changes), audit,
                        f"{r.seconds:.0f} s")
        for c in r.criteria:
            checks.add_row(r.scenario, c.name, pass_fail(c.passed), c.detail)
    failed = [r.scenario for r in results if r.status == "fail"]
    summary = (f"drill: {'FAILED ' + ', '.join(failed) if failed else 'OK'} — "
               f"{sum(r.status == 'pass' for r in results)} passed, {len(failed)} failed, "
               f"{sum(r.status == 'skipped' for r in results)} skipped")
    return render([figures, checks, summary], width=width)


def plot_timeline(results: list[ScenarioResult], path: Path) -> None:
    """A PNG: per scenario, leadership per replica over time (leading/paused), commits, fault and heal markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in results if r.timeline]
    if not shown:
        return
    fig, axes = plt.subplots(len(shown), 1, figsize=(13, 2.4 * len(shown) + 0.6), squeeze=False)
    colours = {"leading": "#2e7d32", "paused": "#f9a825", "suspended": "#f9a825"}
    for ax, r in zip((a[0] for a in axes), shown, strict=True):
        tl = r.timeline
        markers = tl["markers"]
        origin = min([mk["at"] for mk in markers] or [tl["started_at"]])
        firsts = [span["start"] for span in tl["leadership"]] + [c["at"] for c in tl["commits"]]
        start = min(max(tl["started_at"], min(firsts, default=origin) - 1, origin - 30) - origin, -1.0)
        rows = {rid: i for i, rid in enumerate(tl["replicas"])}
        for span in sorted(tl["leadership"], key=lambda sp: sp["state"] != "leading"):  # pauses on top
            y = rows.get(span["replica"], 0)
            ax.broken_barh([(span["start"] - origin, span["end"] - span["start"])], (y - 0.3, 0.6),
                           facecolors=colours.get(span["state"], "grey"), alpha=0.8)
        xs = [c["at"] - origin for c in tl["commits"] if c["replica"] in rows]
        ys = [rows[c["replica"]] + 0.38 for c in tl["commits"] if c["replica"] in rows]
        ax.scatter(xs, ys, marker="|", s=40, color="black", linewidths=0.8, label="commit")
        # Many markers (a chaos run): only their numbers ("#7"), which the report's fault table explains.
        dense = len(markers) > 8
        for k, mk in enumerate(sorted(markers, key=lambda mk: mk["at"])):
            x = mk["at"] - origin
            ax.axvline(x, color="#c62828" if mk["kind"] == "fault" else "#1565c0",
                       linestyle="-" if mk["kind"] == "fault" else "--", linewidth=1.2)
            label = mk["label"].split()[0] if dense and mk["label"].startswith("#") else mk["label"]
            if dense and mk["kind"] != "fault":
                continue  # the heal's dashed line sits beside its fault's number
            # staggered in three rows: labels of close markers (a fault and its heal) stay readable
            ax.text(x, len(rows) - 0.45 - 0.22 * (k % 3), f" {label}", fontsize=7, va="bottom",
                    color="#c62828" if mk["kind"] == "fault" else "#1565c0")
        ax.set_yticks(list(rows.values()), list(rows.keys()))
        ax.set_ylim(-0.6, len(rows) - 0.1 + 0.4)
        ax.set_xlim(start, tl["ended_at"] - origin + 1)
        m = r.measurements
        figures = "" if m is None else (f" — detect {_fmt(m.detect_s)}, new leader {_fmt(m.new_leader_s)}, "
                                        f"commit gap {_fmt(m.commit_gap_s)}")
        ax.set_title(f"{r.scenario}: {r.status.upper()}{figures}", fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1][0].set_xlabel("seconds from the first fault (green: leading, amber: suspended or paused, |: commit; "
                           "red: fault, blue dashed: heal or restart)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
