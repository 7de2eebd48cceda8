"""The benchmarks' plots (matplotlib, Agg): leader changes as stacked segments, rates over time, latency CDFs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench._common import Result, percentiles
from bench._split import SEGMENTS

__all__ = ["add_plot", "change_bars", "change_plot", "latency_plot", "pyplot", "rate_plot", "save", "segment_legend"]

# One colour per segment, the same in every plot; the segments after the gap's end are hatched.
_COLOURS = dict(zip(SEGMENTS, ["#6d4c41", "#a1887f", "#fbc02d", "#f57f17", "#7b1fa2", "#ab47bc", "#1976d2",
                               "#42a5f5", "#90caf9", "#00897b", "#4db6ac", "#2e7d32", "#81c784", "#e64a19",
                               "#455a64", "#90a4ae"], strict=True))
_AFTER_GAP = ("commit", "publish")
# tenure and the bare query keep their colours across plots (by a label's first word); others take the rest.
_KINDS = {"tenure": "#2e7d32", "bare": "#78909c"}
_OTHERS = ("#1565c0", "#ef6c00", "#6a1b9a", "#00838f")


def _colour(label: str, index: int) -> str:
    words = label.split(maxsplit=1)
    return _KINDS.get(words[0] if words else "", _OTHERS[index % len(_OTHERS)])


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files only; no display on a benchmark machine)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> None:
    """Lay ``fig`` out, write it to ``path`` (PNG) and close it."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # legends placed outside the axes stay in
    pyplot().close(fig)


def add_plot(result: Result, out: Path, draw: Callable[[Path], None]) -> None:
    """Draw ``<out>/<result.name>.png`` with ``draw(path)`` and list it in ``result.plots``; a plot that fails
    becomes a note, so the figures are never lost to a drawing error."""
    path = out / f"{result.name}.png"
    try:
        draw(path)
    except Exception as exc:
        result.notes.append(f"No plot: {type(exc).__name__}: {exc}")
        return
    result.plots.append(path.name)


def change_bars(ax: Any, changes: Mapping[str, Sequence[Mapping[str, Any]]], *,
                total_key: str) -> list[tuple[float, Mapping[str, Any]]]:
    """One stacked bar per leader change on ``ax``: its ``segments_s`` in time order, grouped by recipe (the keys
    of ``changes``), with a tick at the measured ``total_key`` (e.g. ``gap_s``); a change without a split is a
    grey bar of its total. Returns each bar's x and row, for marks of the caller's own."""
    placed: list[tuple[float, Mapping[str, Any]]] = []
    names: list[str] = []
    x = 0.0
    for label, rows in changes.items():
        for index, row in enumerate(rows):
            segments = row.get("segments_s") or {}
            bottom = 0.0
            for key, value in segments.items():
                if value:
                    ax.bar(x, value, bottom=bottom, width=0.7, color=_COLOURS.get(key, "#bdbdbd"),
                           hatch="//" if key in _AFTER_GAP else None, edgecolor="white", linewidth=0.3,
                           label=SEGMENTS.get(key, key))
                    bottom += value
            if not segments and row.get(total_key) is not None:
                ax.bar(x, row[total_key], width=0.7, color="#bdbdbd", label="not split")
            if row.get(total_key) is not None:
                ax.hlines(row[total_key], x - 0.42, x + 0.42, color="black", linewidth=1.6,
                          label=f"measured {total_key.removesuffix('_s').replace('_', ' ')}")
            placed.append((x, row))
            names.append(f"{label} #{index + 1}")
            x += 1.0
        x += 0.6  # a space between recipes
    middle, span = (x - 1.6) / 2, max(x - 0.4, 5.0)  # bars from 0 to x - 1.6; a few keep their width
    ax.set_xlim(middle - span / 2, middle + span / 2)
    ax.set_xticks([p for p, _ in placed], names, rotation=45, ha="right", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return placed


def segment_legend(ax: Any, **kwargs: Any) -> None:
    """The legend without repeats, segments in time order first."""
    handles = dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    order = [label for label in SEGMENTS.values() if label in handles]
    order += [label for label in handles if label not in order]
    ax.legend([handles[label] for label in order], order, **kwargs)


def change_plot(path: Path, changes: Mapping[str, Sequence[Mapping[str, Any]]], *, title: str, total_key: str,
                ylabel: str, lines: Mapping[str, float]) -> None:
    """``change_bars`` of every change, with a dashed horizontal line per ``lines`` entry (label → seconds:
    the target, the session timeout), saved to ``path``."""
    plt = pyplot()
    count = sum(len(rows) for rows in changes.values())
    fig, ax = plt.subplots(figsize=(max(7.0, 1.2 + 0.45 * count), 5.2))
    change_bars(ax, changes, total_key=total_key)
    for index, (label, seconds) in enumerate(lines.items()):
        ax.axhline(seconds, color=("#c62828", "#1565c0", "#6a1b9a")[index % 3], linestyle="--", linewidth=1,
                   label=label)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, loc="left")
    segment_legend(ax, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save(fig, path)


def rate_plot(path: Path, series: Mapping[str, Sequence[Sequence[float]]], *, title: str,
              ylabel: str = "records/s (batch's records / time since the previous commit)") -> None:
    """One line per run (label → ``[seconds since the run's first commit, rate]`` points), saved to ``path``.
    Runs whose label starts with the same word share a colour (tenure green, bare grey, as in every plot here);
    rounds differ by line style."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.8))
    styles = ("-", "--", ":", "-.")
    seen: dict[str, int] = {}
    for label, points in series.items():
        kind = (label.split(maxsplit=1) or [""])[0]
        seen[kind] = seen.get(kind, 0) + 1
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                color=_colour(label, len(seen) - 1), linestyle=styles[(seen[kind] - 1) % len(styles)], label=label)
    ax.set_xlabel("seconds since the run's first commit")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path)


def latency_plot(path: Path, samples: Mapping[str, Sequence[float]], targets: Mapping[str, float], title: str, *,
                 unit: str = "s", log_x: bool = False) -> None:
    """The empirical CDF of each sample (label → values), its p50 and p99 in the legend, and a dashed vertical
    line per target (label → value, e.g. ``{"p99 target": 5.0}``), saved to ``path``.

    Example::

        latency_plot(out / "latency.png", {"tenure": tenure_s, "bare": bare_s}, {"p99 target": 5.0},
                     "End-to-end latency: file written → row published")
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    for index, (label, values) in enumerate(samples.items()):
        data = sorted(values)
        if not data:
            continue
        stats = percentiles(data)
        shares = [0.0] + [(i + 1) / len(data) for i in range(len(data))]  # from 0 at the smallest value
        ax.step([data[0], *data], shares, where="post", color=_colour(label, index),
                label=f"{label} (n={stats['n']}, p50 {stats['p50']:.3g} {unit}, p99 {stats['p99']:.3g} {unit})")
    for index, (label, value) in enumerate(targets.items()):
        ax.axvline(value, color=("#c62828", "#6a1b9a", "#f9a825")[index % 3], linestyle="--", linewidth=1,
                   label=f"{label}: {value:g} {unit}")
    for share in (0.5, 0.99):
        ax.axhline(share, color="#9e9e9e", linewidth=0.6, linestyle=":")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(f"latency ({unit})")
    ax.set_ylabel("share of samples at or below")
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=10, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    save(fig, path)
