"""The fleet list in `tests/conftest.py` names tests that exist: a renamed test would silently leave it, and run
beside another fleet on the second xdist worker."""

from __future__ import annotations

import ast

from tests._replicas import REPO
from tests.conftest import FLEET


def test_every_fleet_entry_names_a_test_function() -> None:
    missing = []
    for nodeid in sorted(FLEET):
        path, name = nodeid.split("::")
        tree = ast.parse((REPO / path).read_text())
        if not any(isinstance(node, ast.FunctionDef) and node.name == name for node in tree.body):
            missing.append(nodeid)
    assert not missing, f"not a test function any more: {missing}; update FLEET in tests/conftest.py"
