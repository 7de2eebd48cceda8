"""The configuration table of the docs (docs/operating/configuration.md) is the reference operators read: it must
match ReplicaConfig exactly."""

from __future__ import annotations

from pathlib import Path

from pydantic_core import PydanticUndefined

from tenure.service.replica import ReplicaConfig

PAGE = Path(__file__).resolve().parent.parent / "docs" / "operating" / "configuration.md"


def expected_table() -> list[str]:
    rows = ["| flag | variable | default | meaning |", "|---|---|---|---|"]
    for name, info in ReplicaConfig.model_fields.items():
        if info.default_factory is not None:
            default = "the host name" if name == "replica_id" else "—"
        elif info.default is PydanticUndefined:
            default = "required"
        elif info.default is None:
            default = "—"
        else:
            default = f"`{info.default}`"
        rows.append(f"| `--{name.replace('_', '-')}` | `TENURE_{name.upper()}` | {default} | {info.description} |")
    return rows


def test_configuration_table_matches_replica_config() -> None:
    lines = PAGE.read_text().splitlines()
    start = lines.index("| flag | variable | default | meaning |")
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    expected = expected_table()
    assert lines[start:end] == expected, (f"{PAGE.relative_to(PAGE.parents[2])}'s configuration table is stale; "
                                          "replace it with:\n" + "\n".join(expected))
