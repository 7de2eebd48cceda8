"""bench.report keeps the documentation's benchmark tables equal to the committed results, and the links of
README.md and of every docs page resolve (mkdocs build --strict checks the site's own links and anchors too)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest

from bench import report
from bench._common import Result, Target, markdown_table

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
ROWS = [{"recipe": "tenure-warm", "gap p50 s": 2.5}, {"recipe": "naive", "gap p50 s": 25.0}]
SPLIT = [{"recipe": "tenure-warm", "inaugurate": 0.02}]


def write_result(folder: Path) -> Path:
    result = Result(name="handover", title="Handover", command="python -m bench.run --only handover", table=ROWS,
                    targets=[Target("tenure warm gap p50 (s)", 2.5, "≤ 1 s", False)],
                    tables={"Where the time goes": SPLIT})
    path = folder / "bench" / "results" / "2026-11-22" / "handover.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(result.to_json()))
    return path


def write_readme(folder: Path, *blocks: tuple[str, str]) -> Path:
    """A README with one block per (marker argument, content)."""
    parts = ["# Title", "", "Prose."]
    for argument, content in blocks:
        parts += ["", f"<!-- bench:table {argument} -->", content, "<!-- /bench:table -->"]
    readme = folder / "README.md"
    readme.write_text("\n".join([*parts, "", "The end.", ""]))
    return readme


def test_rewrite_replaces_a_stale_block_and_leaves_the_rest(tmp_path: Path) -> None:
    """Without --check, each stale block gets its generated table; the text around it is untouched."""
    write_result(tmp_path)
    path = "bench/results/2026-11-22/handover.json"
    readme = write_readme(tmp_path, (path, "| old | table |"), (f"{path}#targets", "stale"),
                          (f"{path}#tables/Where the time goes", ""))
    assert report.main(["--page", str(readme)]) == 0
    text = readme.read_text()
    assert markdown_table(ROWS) in text
    assert markdown_table([Target("tenure warm gap p50 (s)", 2.5, "≤ 1 s", False).row()]) in text
    assert markdown_table(SPLIT) in text
    assert "| old | table |" not in text and "stale" not in text
    assert text.startswith("# Title\n\nProse.\n") and text.endswith("\nThe end.\n")
    assert report.main(["--page", str(readme), "--check"]) == 0  # now current


def test_check_names_a_stale_block_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--check exits 1 and names each stale block by line, leaving the file as it was; current blocks pass."""
    write_result(tmp_path)
    path = "bench/results/2026-11-22/handover.json"
    readme = write_readme(tmp_path, (path, markdown_table(ROWS)), (f"{path}#targets", "| measured | 9 |"))
    before = readme.read_text()
    assert report.main(["--page", str(readme), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"README.md:12: stale: bench:table {path}#targets" in err  # the second marker's line
    assert f"bench:table {path}\n" not in err  # the first block is current
    assert readme.read_text() == before


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        pytest.param("bench/results/2026-01-01/handover.json", "no such file", id="missing-file"),
        pytest.param("bench/results/2026-11-22/handover.json#tables/Nope", "unknown table '#tables/Nope'",
                     id="unknown-named-table"),
        pytest.param("bench/results/2026-11-22/handover.json#figures", "unknown table '#figures'",
                     id="unknown-selector"),
    ],
)
def test_block_that_cannot_be_generated_is_one_line_error_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argument: str, message: str) -> None:
    """A missing file or unknown table: exit 2, one line naming the block and what to do, nothing written."""
    write_result(tmp_path)
    readme = write_readme(tmp_path, (argument, "| x |"))
    before = readme.read_text()
    for check in ([], ["--check"]):
        assert report.main(["--page", str(readme), *check]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert f"README.md:5: bench:table {argument}" in err and message in err
    assert readme.read_text() == before


def test_unclosed_block_is_an_error_and_fenced_examples_are_not_blocks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A marker inside fenced code is an example, not a block; an opening marker without its close is exit 2."""
    write_result(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("```\n<!-- bench:table nowhere.json -->\n```\n")
    assert report.main(["--page", str(readme), "--check"]) == 0
    readme.write_text("<!-- bench:table bench/results/2026-11-22/handover.json -->\n| x |\n")
    assert report.main(["--page", str(readme), "--check"]) == 2
    assert "has no closing <!-- /bench:table -->" in capsys.readouterr().err


def test_a_page_in_a_subfolder_reads_paths_relative_to_its_own_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several pages at once: each block's path is relative to its own page's folder, and --check names the page."""
    write_result(tmp_path)
    readme = write_readme(tmp_path, ("bench/results/2026-11-22/handover.json", "| old |"))
    page = tmp_path / "docs" / "performance" / "handover.md"
    page.parent.mkdir(parents=True)
    page.write_text("# Handover\n\n<!-- bench:table ../../bench/results/2026-11-22/handover.json#targets -->\n"
                    "stale\n<!-- /bench:table -->\n")
    argv = ["--page", str(readme), "--page", str(page)]
    assert report.main([*argv, "--check"]) == 1
    err = capsys.readouterr().err
    assert "README.md:5: stale" in err and "handover.md:3: stale: bench:table ../../bench/results" in err
    assert "2 of 2 blocks stale" in err
    assert report.main(argv) == 0
    assert markdown_table([Target("tenure warm gap p50 (s)", 2.5, "≤ 1 s", False).row()]) in page.read_text()
    assert report.main([*argv, "--check"]) == 0


def test_pages_are_the_readme_and_every_docs_page_but_not_the_results_behind_the_symlink(tmp_path: Path) -> None:
    """The default pages: README.md, then docs/**/*.md in path order; a symlinked folder (docs/results) is not
    walked, so the benchmarks' own markdown is no page."""
    (tmp_path / "README.md").write_text("# x\n")
    (tmp_path / "docs" / "b").mkdir(parents=True)
    (tmp_path / "docs" / "index.md").write_text("# i\n")
    (tmp_path / "docs" / "b" / "page.md").write_text("# p\n")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "SUMMARY.md").write_text("# s\n")
    (tmp_path / "docs" / "results").symlink_to("../bench/results")
    assert report.pages(tmp_path) == [tmp_path / "README.md", tmp_path / "docs" / "b" / "page.md",
                                      tmp_path / "docs" / "index.md"]


def test_benchmark_tables_are_generated_from_committed_results() -> None:
    """The docs have bench:table blocks, and every one equals what `python -m bench.report` generates."""
    blocks = [block for page in report.pages() for block in report.parse_blocks(page.read_text().splitlines())]
    assert blocks, "no page has a <!-- bench:table … --> block; add the performance tables"
    assert report.main(["--check"]) == 0, "the benchmark tables are stale: run `python -m bench.report`"


_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _anchors(page: Path) -> set[str]:
    """The heading ids of a markdown page as Python-Markdown's toc makes them, plus ``{: #id }`` attributes."""
    ids, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if fenced:
            continue
        if re.match(r"^#{1,6} ", line):
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line.lstrip("#").strip()).replace("`", "")
            text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
            ids.add(re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower()))
        ids.update(re.findall(r"\{:\s*#([\w-]+)\s*\}", line))
    return ids


def test_relative_links_and_images_point_at_files_in_the_repository() -> None:
    """Every relative link or image in README.md and the docs pages (not http, mailto) names a file that exists,
    relative to its page; an anchor into a markdown page names one of its headings."""
    missing = []
    for page in report.pages():
        fenced = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
            if fenced:
                continue
            for target in _LINK.findall(line):
                if target.startswith(("http://", "https://", "mailto:")):
                    continue
                path, _, anchor = target.partition("#")
                file = page.parent / path if path else page
                where = f"{page.relative_to(REPO)}:{number}: {target}"
                if not file.exists():
                    missing.append(f"{where} (no such file)")
                elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                    missing.append(f"{where} (no such heading)")
    assert not missing, "links to files or headings that do not exist:\n" + "\n".join(missing)


def test_docs_results_is_a_link_to_the_committed_results() -> None:
    """The performance pages show bench/results/ through docs/results, a symlink mkdocs follows."""
    assert (DOCS / "results").is_symlink() and (DOCS / "results").resolve() == REPO / "bench" / "results"


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and the checkout")
def test_results_folders_are_not_git_ignored() -> None:
    """Dated result folders (JSON, markdown, plots) are committed: no ignore rule may hide them."""
    paths = [f"bench/results/2026-01-01/{name}" for name in ("handover.json", "handover.md", "handover.png",
                                                             "summary.json", "SUMMARY.md")]
    proc = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1, f"git ignores {proc.stdout.split()}"
