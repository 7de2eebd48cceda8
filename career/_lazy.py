"""Package attributes imported on first use (PEP 562), so importing one module does not load its package.

Spark's Python processes (the queue source's runner, the data source planners' workers) unpickle the queue source
by importing its module alone; through eager package ``__init__`` files, each would first load the whole career
and its logging, about half a second of a new leader's path per process.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name in ``homes`` comes from the submodule named there, imported
    when the name is first read and then kept in the package."""

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's name)
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
