"""bench.report keeps the README's benchmark tables equal to the committed results, and README links resolve."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bench import report
from bench._common import Result, Target, markdown_table

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
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
    assert report.main(["--readme", str(readme)]) == 0
    text = readme.read_text()
    assert markdown_table(ROWS) in text
    assert markdown_table([Target("tenure warm gap p50 (s)", 2.5, "≤ 1 s", False).row()]) in text
    assert markdown_table(SPLIT) in text
    assert "| old | table |" not in text and "stale" not in text
    assert text.startswith("# Title\n\nProse.\n") and text.endswith("\nThe end.\n")
    assert report.main(["--readme", str(readme), "--check"]) == 0  # now current


def test_check_names_a_stale_block_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--check exits 1 and names each stale block by line, leaving the file as it was; current blocks pass."""
    write_result(tmp_path)
    path = "bench/results/2026-11-22/handover.json"
    readme = write_readme(tmp_path, (path, markdown_table(ROWS)), (f"{path}#targets", "| measured | 9 |"))
    before = readme.read_text()
    assert report.main(["--readme", str(readme), "--check"]) == 1
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
        assert report.main(["--readme", str(readme), *check]) == 2
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
    assert report.main(["--readme", str(readme), "--check"]) == 0
    readme.write_text("<!-- bench:table bench/results/2026-11-22/handover.json -->\n| x |\n")
    assert report.main(["--readme", str(readme), "--check"]) == 2
    assert "has no closing <!-- /bench:table -->" in capsys.readouterr().err


def test_readme_benchmark_tables_are_generated_from_committed_results() -> None:
    """The README has bench:table blocks, and every one equals what `python -m bench.report` generates."""
    lines = README.read_text().splitlines()
    assert report.parse_blocks(lines), "README.md has no <!-- bench:table … --> block; add the performance tables"
    assert report.main(["--check"]) == 0, "README.md's benchmark tables are stale: run `python -m bench.report`"


_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def test_readme_relative_links_and_images_point_at_files_in_the_repository() -> None:
    """Every relative link or image in README.md (not http, mailto or an anchor) names a file that exists."""
    missing, fenced = [], False
    for number, line in enumerate(README.read_text().splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if fenced:
            continue
        for target in _LINK.findall(line):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            if not (README.parent / target.split("#", 1)[0]).exists():
                missing.append(f"README.md:{number}: {target}")
    assert not missing, "README links to files that do not exist:\n" + "\n".join(missing)


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and the checkout")
def test_results_folders_are_not_git_ignored() -> None:
    """Dated result folders (JSON, markdown, plots) are committed: no ignore rule may hide them."""
    paths = [f"bench/results/2026-01-01/{name}" for name in ("handover.json", "handover.md", "handover.png",
                                                             "summary.json", "SUMMARY.md")]
    proc = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1, f"git ignores {proc.stdout.split()}"
