"""The configuration reference of the docs (docs/operating/configuration.md) is the reference operators read: it must
be what the declared settings generate, setting for setting."""

from __future__ import annotations

from tenure.service.replica import SETTINGS
from tenure.service.replica._reference import CLOSE, OPEN, PAGE, main, settings_reference


def test_configuration_reference_matches_the_declarations() -> None:
    """The committed block is the generated one (`python -m tenure.service.replica._reference` rewrites it), and it
    has one row per declared setting, with its flag, variable and hazard."""
    lines = PAGE.read_text().splitlines()
    block = lines[lines.index(OPEN) + 1:lines.index(CLOSE)]
    assert block == settings_reference(), (f"{PAGE.name}'s settings reference is stale: run "
                                           "python -m tenure.service.replica._reference")
    assert main(["--check"]) == 0
    rows = [line for line in block if line.startswith("| `--")]
    assert [row.split(" | ")[0] for row in rows] == [f"| `{d.flag}`" for d in SETTINGS]
    stall = next(row for row in rows if row.startswith("| `--stall-timeout-s`"))
    assert "`TENURE_STALL_TIMEOUT_S` | `120.0` | s |" in stall and "Hazard: Below the longest batch" in stall
