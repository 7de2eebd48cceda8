"""The configuration reference of the docs, generated from the declared settings: ``python -m
tenure.service.replica._reference [--check]`` rewrites (or checks) the block of ``docs/operating/configuration.md``
between ``<!-- settings:table -->`` and ``<!-- /settings:table -->``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from tenure.service.replica._config import SETTINGS
from tenure.settings import Declaration

__all__ = ["CLOSE", "OPEN", "PAGE", "default_text", "main", "settings_reference"]

PAGE: Final = Path(__file__).resolve().parents[2] / "docs" / "operating" / "configuration.md"
OPEN: Final = "<!-- settings:table -->"
CLOSE: Final = "<!-- /settings:table -->"

#: Each part's heading, by the field that holds it in ``ReplicaConfig`` ("" for the replica's own settings).
_TITLES: Final = {
    "": "The replica",
    "election": "The election",
    "runner": "The runner",
    "watchdog": "The progress watchdog",
    "health": "Every career's health check",
    "counter": "The counter career",
    "master": "A Spark standalone master",
    "spark": "The Spark career",
}


def default_text(declaration: Declaration) -> str:
    """A setting's default as the reference shows it."""
    if declaration.required:
        return "required"
    if declaration.computed or declaration.default is None:
        return declaration.default_text or "—"
    return f"`{declaration.default}`"


def _where(declaration: Declaration) -> str:
    """The file and class that declare the setting, e.g. ``election/_settings.py`` (``ElectionSettings``)."""
    module = declaration.owner.__module__.removeprefix("tenure.").replace(".", "/")
    return f"`{module}.py` (`{declaration.owner.__name__}`)"


def settings_reference() -> list[str]:
    """The generated block's lines: per part, a heading, where it is declared, and its settings' table."""
    lines: list[str] = []
    part: str | None = None
    for declaration in SETTINGS:
        here = declaration.path[0] if len(declaration.path) > 1 else ""
        if here != part:
            part = here
            lines += ["", f"### {_TITLES[here]}", "", f"Declared in {_where(declaration)}.", "",
                      "| flag | variable | default | unit | meaning |", "|---|---|---|---|---|"]
        lines.append(f"| `{declaration.flag}` | `{declaration.variable}` | {default_text(declaration)} | "
                     f"{declaration.unit or ''} | {declaration.describe()} |")
    return lines[1:]  # no blank line right after the opening marker


def _block(lines: list[str]) -> tuple[int, int]:
    """The indexes of the block's opening and closing markers in ``lines``."""
    try:
        start = lines.index(OPEN)
        return start, lines.index(CLOSE, start)
    except ValueError:
        raise SystemExit(f"{PAGE} has no {OPEN} … {CLOSE} block") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the page's block (exit 0), or with ``--check`` say whether it is stale (exit 1)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when the block is stale")
    args = parser.parse_args(argv)
    lines = PAGE.read_text().splitlines()
    start, end = _block(lines)
    fresh = [*lines[:start + 1], *settings_reference(), *lines[end:]]
    if fresh == lines:
        return 0
    if args.check:
        print(f"{PAGE} is stale: run python -m tenure.service.replica._reference", file=sys.stderr)
        return 1
    PAGE.write_text("\n".join(fresh) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
