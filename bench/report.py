"""Regenerate the documentation's benchmark tables from committed results: ``python -m bench.report [--check]``.

A block in a markdown page names a result file and, after ``#``, which of its tables (``#table``, the default;
``#targets``; ``#tables/<title>`` for one of ``tables``)::

    <!-- bench:table ../results/2026-11-22/handover.json#targets -->
    | … generated; do not edit … |
    <!-- /bench:table -->

The pages are ``README.md`` and every ``docs/**/*.md`` (``--page`` names others instead; repeatable). A block's
path is relative to its own page's folder, as a link in that page would be: ``docs/results`` is a symlink to
``bench/results``, so a page in ``docs/performance/`` names ``../results/<folder>/<name>.json``. Without
``--check`` stale blocks are rewritten in place; with it, each stale block is named (page and line) and the exit
status is 1. A missing file, an unknown table or an unclosed block is an error (exit 2), and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import Target, markdown_table

__all__ = ["Block", "BlockError", "generate", "main", "pages", "parse_blocks"]

_ROOT = Path(__file__).resolve().parent.parent
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


def parse_blocks(lines: Sequence[str], page: str = "README.md") -> list[Block]:
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
            raise BlockError(f"{page}:{index + 1}: bench:table {match['path']} has no closing "
                             "<!-- /bench:table --> before the next block or the end; add it")
        blocks.append(Block(index, end, match["path"], (match["selector"] or "table").strip() or "table"))
        index = end + 1
    return blocks


def generate(block: Block, root: Path, page: str = "README.md") -> str:
    """The markdown table a block should hold, from its result file; ``root`` is the folder of the block's page
    (named ``page`` in messages), which the block's path is relative to."""
    where = f"{page}:{block.start + 1}: {block.name}"
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


def pages(root: Path = _ROOT) -> list[Path]:
    """The markdown pages that may hold blocks: ``README.md`` and every ``docs/**/*.md``, in path order. Folders
    reached through a symlink (``docs/results``: the benchmarks' own markdown) are not pages of the site."""
    found = [Path(folder) / name for folder, _subfolders, files in os.walk(root / "docs")  # not into symlinks
             for name in files if name.endswith(".md")]
    return ([root / "README.md"] if (root / "README.md").is_file() else []) + sorted(found)


def _shown(page: Path) -> str:
    """A page's name in messages: its path in the repository, or its file name elsewhere."""
    try:
        return str(page.absolute().relative_to(_ROOT))
    except ValueError:
        return page.name


def main(argv: Sequence[str] | None = None) -> int:
    """Check or rewrite every block of every page; 0 when all are current (or were rewritten), 1 when stale
    (``--check``), 2 on a block that cannot be generated."""
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="name stale blocks and exit 1; write nothing")
    parser.add_argument("--page", "--readme", dest="pages", type=Path, action="append",
                        help="a markdown page to process instead of the repository's (repeatable)")
    args = parser.parse_args(argv)
    chosen: list[Path] = args.pages or pages()
    work: list[tuple[Path, str, list[str], list[tuple[Block, str]]]] = []
    try:
        for page in chosen:
            lines, shown = page.read_text().splitlines(), _shown(page)
            root = page.absolute().parent  # a symlinked page's links are relative to where it sits
            wanted = [(block, generate(block, root, shown)) for block in parse_blocks(lines, shown)]
            work.append((page, shown, lines, wanted))
    except BlockError as exc:
        print(f"bench.report: {exc}", file=sys.stderr)
        return 2
    total = sum(len(wanted) for *_, wanted in work)
    stale = [(page, shown, lines, [(b, t) for b, t in wanted if _inner(lines, b) != t])
             for page, shown, lines, wanted in work]
    count = sum(len(blocks) for *_, blocks in stale)
    if args.check:
        for _page, shown, _lines, blocks in stale:
            for block, _table in blocks:
                print(f"{shown}:{block.start + 1}: stale: {block.name}", file=sys.stderr)
        if count:
            extra = "".join(f" --page {page}" for page in args.pages or [])
            print(f"bench.report: {count} of {total} blocks stale; run `python -m bench.report{extra}`",
                  file=sys.stderr)
        return 1 if count else 0
    for page, _shown_name, lines, blocks in stale:
        for block, table in reversed(blocks):  # from the end, so earlier blocks' line numbers hold
            lines[block.start + 1:block.end] = table.splitlines()
        if blocks:
            page.write_text("\n".join(lines) + "\n")
    touched = sum(1 for *_, blocks in stale if blocks)
    print(f"bench.report: {count} of {total} blocks rewritten in {touched} of {len(work)} pages", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
