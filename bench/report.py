"""Regenerate the README's benchmark tables from committed results: ``python -m bench.report [--check]``.

A block in the README names a result file and, after ``#``, which of its tables (``#table``, the default;
``#targets``; ``#tables/<title>`` for one of ``tables``)::

    <!-- bench:table bench/results/2026-11-22/handover.json#targets -->
    | … generated; do not edit … |
    <!-- /bench:table -->

Paths are relative to the README's folder. Without ``--check`` stale blocks are rewritten in place; with it,
each stale block is named and the exit status is 1. A missing file, an unknown table or an unclosed block is an
error (exit 2), and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import Target, markdown_table

__all__ = ["Block", "BlockError", "generate", "main", "parse_blocks"]

_README = Path(__file__).resolve().parent.parent / "README.md"
_OPEN = re.compile(r"^<!--\s*bench:table\s+(?P<path>[^#\s]+)(?:#(?P<selector>.*?))?\s*-->\s*$")
_CLOSE = re.compile(r"^<!--\s*/bench:table\s*-->\s*$")


class BlockError(ValueError):
    """A block that cannot be generated: its file is missing or unreadable, its table unknown, or it is unclosed."""


@dataclass(frozen=True)
class Block:
    """One ``bench:table`` block: its marker lines (0-based, the opening and closing), source and selector."""

    start: int
    end: int
    path: str
    selector: str

    @property
    def name(self) -> str:
        return f"bench:table {self.path}" + ("" if self.selector == "table" else f"#{self.selector}")


def parse_blocks(lines: Sequence[str], readme: str = "README.md") -> list[Block]:
    """Every block in ``lines`` outside fenced code (where the format itself can be shown); raises
    ``BlockError`` for an opening marker without its closing one."""
    blocks: list[Block] = []
    index, fenced = 0, False
    while index < len(lines):
        if lines[index].lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else _OPEN.match(lines[index])
        if match is None:
            index += 1
            continue
        end = next((j for j in range(index + 1, len(lines)) if _CLOSE.match(lines[j]) or _OPEN.match(lines[j])),
                   None)
        if end is None or not _CLOSE.match(lines[end]):
            raise BlockError(f"{readme}:{index + 1}: bench:table {match['path']} has no closing "
                             "<!-- /bench:table --> before the next block or the end; add it")
        blocks.append(Block(index, end, match["path"], (match["selector"] or "table").strip() or "table"))
        index = end + 1
    return blocks


def generate(block: Block, root: Path, readme: str = "README.md") -> str:
    """The markdown table a block should hold, from its result file under ``root``."""
    where = f"{readme}:{block.start + 1}: {block.name}"
    path = root / block.path
    try:
        body: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise BlockError(f"{where}: no such file {path}; commit the run's results there or fix the path") from None
    except (OSError, ValueError) as exc:
        raise BlockError(f"{where}: cannot read {path} ({type(exc).__name__}: {exc}); re-run the benchmark") from exc
    if block.selector == "table":
        rows = body.get("table") or []
    elif block.selector == "targets":
        rows = [Target(**t).row() for t in body.get("targets") or []]
    elif block.selector.startswith("tables/") and block.selector[len("tables/"):] in (body.get("tables") or {}):
        rows = body["tables"][block.selector[len("tables/"):]]
    else:
        titles = "; ".join(f"#tables/{t}" for t in body.get("tables") or {}) or "none"
        raise BlockError(f"{where}: unknown table '#{block.selector}'; use #table, #targets or one of the "
                         f"file's named tables ({titles})")
    return markdown_table(rows)


def _inner(lines: Sequence[str], block: Block) -> str:
    return "\n".join(lines[block.start + 1:block.end]).strip()


def main(argv: Sequence[str] | None = None) -> int:
    """Check or rewrite every block; 0 when all are current (or were rewritten), 1 when stale (``--check``),
    2 on a block that cannot be generated."""
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="name stale blocks and exit 1; write nothing")
    parser.add_argument("--readme", type=Path, default=_README, help="the markdown file (default: the repo's)")
    args = parser.parse_args(argv)
    readme: Path = args.readme
    lines = readme.read_text().splitlines()
    root, shown = readme.resolve().parent, readme.name
    try:
        wanted = [(block, generate(block, root, shown)) for block in parse_blocks(lines, shown)]
    except BlockError as exc:
        print(f"bench.report: {exc}", file=sys.stderr)
        return 2
    stale = [(block, table) for block, table in wanted if _inner(lines, block) != table]
    if args.check:
        for block, _table in stale:
            print(f"{shown}:{block.start + 1}: stale: {block.name}", file=sys.stderr)
        if stale:
            print(f"bench.report: {len(stale)} of {len(wanted)} blocks stale; run `python -m bench.report"
                  f"{'' if readme.resolve() == _README else f' --readme {readme}'}`", file=sys.stderr)
        return 1 if stale else 0
    for block, table in reversed(stale):  # from the end, so earlier blocks' line numbers hold
        lines[block.start + 1:block.end] = table.splitlines()
    if stale:
        readme.write_text("\n".join(lines) + "\n")
    print(f"bench.report: {len(stale)} of {len(wanted)} blocks rewritten in {readme}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
