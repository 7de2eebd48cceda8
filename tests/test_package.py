"""The built wheel installs one top-level name, ``tenure``, and runs from it alone.

The wheel lands on every Spark executor that runs a row function, next to the user's own code, so it must not
claim generic names such as ``service``: the test builds the wheel from the repository, installs it into a clean
virtual environment and compares what the environment holds before and after.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of what it is built from (the build leaves ``build/`` behind, and a stale one
    in the repository would carry deleted modules into the next wheel)."""
    source, out = tmp_path_factory.mktemp("source") / "tenure", tmp_path_factory.mktemp("wheel")
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for room in ("election", "career", "service", "tenure"):  # tenure/'s links point at the rooms beside it
        shutil.copytree(REPO / room, source / room, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out),
                            str(source)], capture_output=True, text=True, timeout=240, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    (found,) = out.glob("tenure-*.whl")
    return found


def test_the_wheel_holds_one_top_level_name_with_every_module(wheel: Path) -> None:
    """The wheel holds ``tenure`` and its metadata alone, with every module of the three rooms, the package's
    ``__init__`` and ``__main__`` and the type marker."""
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"tenure", wheel.name.split("-py3")[0] + ".dist-info"}
    repo_modules = {str(p.relative_to(REPO)) for room in ("election", "career", "service")
                    for p in (REPO / room).rglob("*.py")}
    assert repo_modules and repo_modules <= {n.removeprefix("tenure/") for n in names}, "a module is missing"
    assert {"tenure/__init__.py", "tenure/__main__.py", "tenure/service/py.typed"} <= set(names)


def test_installed_into_a_clean_environment_it_adds_tenure_alone_and_runs(wheel: Path, tmp_path: Path) -> None:
    """Installed into a clean virtual environment the wheel adds ``tenure`` alone (and its command); from an empty
    folder it runs and imports its rooms from the installation, and the bare room names do not import."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # Nothing of this interpreter's paths: a PYTHONPATH naming the repository (with its tenure.egg-info) would
    # tell pip that tenure is installed already.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  env=clean, capture_output=True, text=True, check=True).stdout.strip())
    before = set(os.listdir(purelib))
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheel)],
                   env=clean, check=True, capture_output=True, timeout=120)
    added = set(os.listdir(purelib)) - before
    assert {a for a in added if not a.endswith(".dist-info")} == {"tenure"}, sorted(added)
    assert (env_dir / "bin" / "tenure").exists()

    # The dependencies come from this interpreter's environment (its own tenure is an editable install, which a
    # PYTHONPATH entry does not activate); run from an empty folder, so nothing of the repository is on the path.
    deps = os.pathsep.join([sysconfig.get_path("purelib"), *site.getsitepackages()])
    env = {**clean, "PYTHONPATH": deps}
    ran = subprocess.run([str(python), "-m", "tenure", "--help"], cwd=tmp_path, env=env, check=False,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "tenure" in ran.stdout and "verify" in ran.stdout
    imported = subprocess.run([str(python), "-c", "import tenure.career.spark, tenure.service.replica; "
                               "print(tenure.service.replica.__file__)"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert imported.stdout.startswith(str(purelib)), imported.stdout
    for bare in ("service", "career", "election"):
        missing = subprocess.run([str(python), "-c", f"import {bare}"], cwd=tmp_path, env=env, check=False,
                                 capture_output=True, text=True, timeout=60)
        assert missing.returncode != 0 and "ModuleNotFoundError" in missing.stderr, bare
