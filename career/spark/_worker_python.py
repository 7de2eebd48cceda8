"""``tenure-spark-python``: the interpreter Spark starts its Python processes with (tenure gives it on a local
master; the local topology and the compose file give it to a cluster's executors as ``PYSPARK_PYTHON``).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and Py4J's archive) first on every Python process's
``PYTHONPATH``. With a pip-installed PySpark, ``SPARK_HOME`` is the installed package, and those archives are a
second copy of it, without bytecode: every new interpreter compiles PySpark's modules from source. That is 0.55 s
of the 0.83 s a new leader's streaming source runner takes to start (0.28 s from the installed package), and it
sits in every term's first trigger (``docs/performance/first-batch.md``).

This launcher drops exactly those archives from ``PYTHONPATH`` and runs the same interpreter with the same
arguments: the worker then imports the files the driver imported. An archive stays when its package is not
installed beside it (a Spark distribution's ``SPARK_HOME``), or not on this interpreter's path.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import NoReturn

__all__ = ["LAUNCHER", "main", "worker_python", "worker_pythonpath"]

LAUNCHER = "tenure-spark-python"
"""The launcher's name: a console script of the ``tenure`` distribution (``pyproject.toml``)."""


def _installed_copy(entry: str, search_path: list[str]) -> bool:
    """Whether ``entry`` is an archive inside an installed PySpark (``<site>/pyspark/python/lib/<name>.zip``)
    whose package (``pyspark``, ``py4j``) is installed in ``<site>``, a folder this interpreter imports from."""
    archive = Path(entry)
    if archive.suffix != ".zip" or len(archive.parents) < 4 or archive.parent.name != "lib" \
            or archive.parents[1].name != "python" or archive.parents[2].name != "pyspark":
        return False
    site = archive.parents[3]
    package = archive.stem.split("-", 1)[0]  # pyspark.zip, py4j-0.10.9.9-src.zip
    return str(site) in search_path and (site / package / "__init__.py").is_file()


def worker_pythonpath(pythonpath: str, search_path: list[str]) -> str:
    """``pythonpath`` without the archives that copy an installed PySpark (see the module docstring).

    Args:
        pythonpath: the ``PYTHONPATH`` Spark gave the process.
        search_path: the folders this interpreter imports from (``sys.path``).
    """
    return os.pathsep.join(entry for entry in pythonpath.split(os.pathsep)
                           if entry and not _installed_copy(entry, search_path))


def worker_python() -> str:
    """The interpreter for Spark's Python processes: the launcher installed with this interpreter's scripts, or
    this interpreter itself when there is none (tenure run from a source tree without installing it)."""
    launcher = Path(sysconfig.get_path("scripts")) / LAUNCHER
    return str(launcher) if os.access(launcher, os.X_OK) else sys.executable


def main() -> NoReturn:
    """Run ``sys.executable`` with this process's arguments and the archives left out of ``PYTHONPATH``."""
    pythonpath = os.environ.get("PYTHONPATH")
    if pythonpath is not None:
        os.environ["PYTHONPATH"] = worker_pythonpath(pythonpath, sys.path)
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
