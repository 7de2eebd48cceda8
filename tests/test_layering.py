"""The layering the package layout promises, read from the import statements of every module.

The foundation floor (``tenure/settings.py`` and any module beside it in ``tenure/``) imports no room;
``election`` knows nothing of careers, Spark or the service, and is the only room that imports kazoo; ``career``
knows nothing of the service; inside ``service`` the replica imports no operator tool, local infrastructure or
drill; and no two modules import each other, directly or round a longer circle. Lazy imports inside functions count
too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("election", "career", "service")
#: The foundation floor: the installed package's own modules, beneath the rooms (its ``__main__`` is the CLI's door).
FLOOR = sorted(p for p in (REPO / "tenure").glob("*.py") if p.name != "__main__.py")

#: importer package prefix → package prefixes it must never import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "tenure.election": ("tenure.career", "tenure.service", "pyspark"),
    "tenure.career": ("tenure.service",),
    "tenure.service.replica": ("tenure.service.ops", "tenure.service.local", "tenure.service.drill",
                               "tenure.service.cli"),
    "tenure.service.ops": ("tenure.service.local", "tenure.service.drill", "tenure.service.cli"),
    "tenure.service.local": ("tenure.service.drill", "tenure.service.cli"),
    "tenure.service.drill": ("tenure.service.cli",),
}


def _module_name(path: Path) -> str:
    """The installed name of a room's file: ``service/replica/_process.py`` is ``tenure.service.replica._process``;
    a floor's file, ``tenure/settings.py``, is ``tenure.settings``."""
    relative = path.relative_to(REPO).with_suffix("").parts
    parts = relative if relative[0] == "tenure" else ("tenure", *relative)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in [*FLOOR, *(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))]}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        # ``from a.b import c`` names module a.b.c when it exists, else the package a.b (an attribute of it).
        graph[name] = {target for target in _imports(path) if target in modules and target != name}
    return graph


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_graph_is_read() -> None:
    """The scan sees known edges (a scan that saw nothing would pass every check below)."""
    graph = _graph()
    assert "tenure.service.replica._lifecycle" in graph["tenure.service.replica._process"]
    assert "tenure.career.lifecycle._runner" in graph["tenure.career.lifecycle"]
    assert "tenure.errors" in graph["tenure.career.spark._hooks"]
    assert "tenure.settings" in graph["tenure.election._settings"]


def test_the_floor_imports_no_room() -> None:
    """``tenure/``'s own modules (``tenure.settings``; ``tenure/__init__.py`` too) import none of the three rooms,
    so the lowest room, the election, can build on them without a cycle."""
    assert any(p.name == "settings.py" for p in FLOOR)
    wrong = sorted(f"{p.relative_to(REPO)} imports {name}" for p in FLOOR for name in _imports(p)
                   for room in PACKAGES if _inside(name, f"tenure.{room}"))
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("importer", sorted(FORBIDDEN))
def test_no_import_against_the_layers(importer: str) -> None:
    """No module imports across the layers' rules (the replica no operator tool, ``career`` nothing of ``service``,
    ``election`` no career and no Spark, the floor no room …): every offending import is listed."""
    graph = _graph()
    wrong = sorted(f"{module} imports {target}" for module, targets in graph.items() if _inside(module, importer)
                   for target in targets for banned in FORBIDDEN[importer] if _inside(target, banned))
    if importer == "tenure.election":
        wrong += sorted(f"{p.relative_to(REPO)} imports pyspark" for p in (REPO / "election").rglob("*.py")
                        if any(_inside(t, "pyspark") for t in _imports(p)))
    assert not wrong, "\n".join(wrong)


def test_kazoo_is_imported_in_election_alone() -> None:
    """ZooKeeper's client stays behind the election's boundary: ``career`` and ``service`` reach ZooKeeper only
    through ``tenure.election``, whose calls raise the product's errors (tests and bench may use kazoo)."""
    sources = [p for pkg in ("career", "service") for p in (REPO / pkg).rglob("*.py")]
    assert len(sources) > 50
    wrong = sorted(f"{p.relative_to(REPO)} imports {name}" for p in sources for name in _imports(p)
                   if _inside(name, "kazoo"))
    assert not wrong, "\n".join(wrong)
    assert any(_inside(name, "kazoo") for name in _imports(REPO / "election" / "_election.py")), "the scan sees kazoo"


def test_no_module_cycle() -> None:
    """No two modules import each other, directly or round a longer cycle (a package's ``__init__`` re-exporting its
    modules does not count); a cycle is named in full."""
    graph = _graph()
    # Packages' __init__ re-export their modules; an edge into a package's own __init__ from inside it is not a
    # cycle of jobs, so only module-to-module edges between non-__init__ modules count.
    inits = {name for name in graph if (REPO / name.replace(".", "/") / "__init__.py").exists()}
    edges = {m: {t for t in ts if t not in inits} for m, ts in graph.items() if m not in inits}
    seen: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        seen[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if seen.get(nxt) == 1:
                cycle.extend([*stack[stack.index(nxt):], nxt])
                return True
            if nxt not in seen and visit(nxt, [*stack, nxt]):
                return True
        seen[node] = 2
        return False

    for start in sorted(edges):
        if start not in seen and visit(start, [start]):
            break
    assert not cycle, " -> ".join(cycle)


def test_every_import_goes_through_the_one_installed_name() -> None:
    """The wheel installs ``tenure`` alone: ``import service`` works in the repository, where the room folders
    sit on the path, and fails once installed, so no module, test or bench may import a room by its bare name."""
    sources = [p for top in (*PACKAGES, "tenure", "tests", "bench") for p in (REPO / top).rglob("*.py")]
    assert len(sources) > 150
    bare = sorted(f"{p.relative_to(REPO)} imports {name}" for p in sources for name in _imports(p)
                  if name.split(".")[0] in PACKAGES)
    assert not bare, "\n".join(bare)


def test_architecture_names_only_files_that_exist() -> None:
    """ARCHITECTURE.md is the map of the code: every path it names must be there (a moved file fails this)."""
    text = (REPO / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`((?:election|career|service|deploy|bench|tests)/[\w/.\-]*)`", text))
    assert len(named) > 20
    assert not sorted(p for p in named if not (REPO / p).exists())


def test_every_module_is_on_the_map() -> None:
    """Every module of the three packages has a line of ARCHITECTURE.md naming its folder and its file."""
    lines = (REPO / "ARCHITECTURE.md").read_text().splitlines()
    missing = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            folder = str(path.parent.relative_to(REPO)) + "/"
            if path.name != "__init__.py" and not any(folder in line and path.name in line for line in lines):
                missing.append(str(path.relative_to(REPO)))
    assert not missing, missing
