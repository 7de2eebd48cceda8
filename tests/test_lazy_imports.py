"""The career's packages load their exported names on first use, so that Spark's Python processes, which import
the queue source's module alone to unpickle it, do not load the whole career first (``tenure.career._lazy``)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

# What importing the career eagerly brings along: its lifecycle, the Spark career and their libraries.
_HEAVY = ("tenure.career._counter", "tenure.career._protocol", "tenure.career.spark._career",
          "tenure.career.spark._batch", "structlog", "pandas", "deltalake", "kazoo")


@pytest.mark.parametrize("module", ["tenure.career.spark._intake", "tenure.career.spark._redis_source"])
def test_a_source_module_imports_without_the_rest_of_the_career(module: str) -> None:
    """Importing a source's module alone (the queue's, Redis's), as Spark's Python processes do to unpickle it, loads
    none of the career's heavy modules or libraries (the lifecycle, the Spark career, kazoo, pandas …)."""
    probe = (f"import json, sys, {module}; "
             "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout))
    assert module in loaded
    assert sorted(loaded & set(_HEAVY)) == []


@pytest.mark.parametrize("package", ["tenure.career", "tenure.career.spark"])
def test_every_exported_name_resolves_and_no_other(package: str) -> None:
    """Every name a career package exports resolves, on first use, to the object in the module its table names, ``import
    *`` gives them all, and a misspelt name fails as an attribute error naming it."""
    module = importlib.import_module(package)
    assert set(module._HOMES) == set(module.__all__)
    for name in module.__all__:
        value = getattr(module, name)
        assert getattr(importlib.import_module(f"{package}.{module._HOMES[name]}"), name) is value
    with pytest.raises(AttributeError, match="no attribute 'SparkCarrer'"):
        module.SparkCarrer  # noqa: B018 (the lookup is the test)
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    assert set(module.__all__) <= set(namespace)
