"""tenure-spark-python: Spark's Python processes import the installed PySpark, not Spark's archive of its sources."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark
import pytest

from tenure.career.spark._worker_python import LAUNCHER, worker_python, worker_pythonpath

_INSTALLED = Path(pyspark.__file__).parent  # <site>/pyspark
_ARCHIVES = sorted(str(p) for p in (_INSTALLED / "python" / "lib").glob("*.zip"))


def _site(tmp_path: Path, *packages: str) -> Path:
    """``<tmp>/site`` with a pip-style PySpark (its archives under ``pyspark/python/lib``) and ``packages``."""
    site = tmp_path / "site"
    for package in ("pyspark", *packages):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        (lib / name).write_bytes(b"")
    return site


def test_drops_the_archives_of_an_installed_pyspark_and_keeps_everything_else(tmp_path: Path) -> None:
    """Spark's archives of PySpark and py4j are dropped from the workers' path when both packages are installed in a
    site this interpreter imports from; every other entry stays, in order."""
    site = _site(tmp_path, "py4j")
    lib = site / "pyspark" / "python" / "lib"
    given = os.pathsep.join([f"{lib}/pyspark.zip", f"{lib}/py4j-0.10.9.9-src.zip", "/repo", "",
                             f"{site}/pyspark/jars/spark-core_2.13-4.3.0.jar", "/more"])
    assert worker_pythonpath(given, [str(site)]) == os.pathsep.join(
        ["/repo", f"{site}/pyspark/jars/spark-core_2.13-4.3.0.jar", "/more"])


def test_keeps_an_archive_whose_package_is_not_installed_beside_it(tmp_path: Path) -> None:
    """An archive whose package is not installed beside PySpark (py4j only in Spark's archive) stays on the path."""
    site = _site(tmp_path)  # no py4j package: only Spark's archive has it
    lib = site / "pyspark" / "python" / "lib"
    given = os.pathsep.join([f"{lib}/pyspark.zip", f"{lib}/py4j-0.10.9.9-src.zip"])
    assert worker_pythonpath(given, [str(site)]) == f"{lib}/py4j-0.10.9.9-src.zip"


def test_keeps_the_archives_of_a_site_this_interpreter_does_not_import_from(tmp_path: Path) -> None:
    """Archives of a PySpark installed in a site this interpreter does not import from stay on the path."""
    site = _site(tmp_path, "py4j")
    lib = site / "pyspark" / "python" / "lib"
    given = os.pathsep.join([f"{lib}/pyspark.zip", f"{lib}/py4j-0.10.9.9-src.zip"])
    assert worker_pythonpath(given, ["/elsewhere/site-packages"]) == given


def test_keeps_a_spark_distributions_archives(tmp_path: Path) -> None:
    """``$SPARK_HOME/python/lib/pyspark.zip`` of a Spark download is the only PySpark there is: it stays."""
    home = tmp_path / "spark-4.0.0-bin-hadoop3"
    (home / "python" / "lib").mkdir(parents=True)
    given = os.pathsep.join([f"{home}/python/lib/pyspark.zip", f"{home}/python/lib/py4j-0.10.9.9-src.zip"])
    assert worker_pythonpath(given, [str(tmp_path), str(home)]) == given


def test_the_launcher_is_installed_and_runs_this_interpreter_without_the_archives() -> None:
    """The real launcher, given the PYTHONPATH Spark gives its workers: PySpark and Py4J come from the installed
    packages, the other entries stay, and the exit status is the interpreter's."""
    assert _ARCHIVES, f"no archives under {_INSTALLED}/python/lib: not a pip-installed PySpark"
    launcher = worker_python()
    assert Path(launcher).name == LAUNCHER, f"{LAUNCHER} is not installed beside {sys.executable}: pip install -e ."
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*_ARCHIVES, "/repo"])}
    shown = subprocess.run([launcher, "-c", "import os, pyspark, py4j; "
                            "print(pyspark.__file__, py4j.__file__, os.environ['PYTHONPATH'], sep='\\n')"],
                           env=env, capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    assert shown[0] == pyspark.__file__
    assert ".zip" not in shown[1], shown
    assert shown[2] == "/repo"
    failed = subprocess.run([launcher, "-c", "raise SystemExit(3)"], check=False, env=env, timeout=60)
    assert failed.returncode == 3


@pytest.fixture()
def python_exec(spark: Any) -> Iterator[Any]:
    """The shared session's context, its worker interpreter restored after the test."""
    context = spark.sparkContext
    before = context.pythonExec
    yield context
    context.pythonExec = before


def _worker_pyspark(spark: Any) -> str:
    def where(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyspark as worker_pyspark

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"file": worker_pyspark.__file__}])

    return str(spark.range(1, numPartitions=1).mapInArrow(where, "file string").collect()[0].file)


def test_spark_python_workers_started_through_the_launcher_import_the_installed_pyspark(
        spark: Any, python_exec: Any) -> None:
    """Real Spark: a worker on the plain interpreter imports PySpark from Spark's archive (what the launcher
    exists for); one on the launcher imports the installed, compiled package."""
    python_exec.pythonExec = sys.executable
    assert ".zip" in _worker_pyspark(spark)
    python_exec.pythonExec = worker_python()
    assert _worker_pyspark(spark) == pyspark.__file__
