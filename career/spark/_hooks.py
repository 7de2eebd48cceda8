"""User code in the pipeline: a DataFrame ``transform`` and a per-record ``row_function``, loaded and checked early.

Both are named ``package.module:function`` and must be importable on the driver and on Spark's Python workers
(installed, or on ``PYTHONPATH``). A bad name or a transform that breaks the output schema is found at start-up,
before the replica joins the election, so a misconfigured replica never leads.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType

from tenure.career.spark._retry import RetryPolicy, RowFunction
from tenure.errors import TenureError

__all__ = ["HookError", "Hooks", "Transform", "check_transform", "load_hook", "load_hooks", "output_schema_problem"]

Transform = Callable[[DataFrame], DataFrame]
"""A transform takes the batch's validated, deduplicated, ordered records and returns the rows to write."""

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_REQUIRED = {"id": StringType(), "key": StringType(), "seq": LongType()}
_RECORDS_DDL = "id STRING, key STRING, seq BIGINT, ts BIGINT, payload STRING"


class HookError(TenureError):
    """A ``transform`` or ``row_function`` cannot be used as configured; the message names the fix."""


@dataclass(frozen=True)
class Hooks:
    """The user's code in the batch path, loaded once; ``row_function`` None means no retry store unless one
    is left over from a term that had one (then it drains through ``_retry.identity_row``)."""

    transform: Transform | None = None
    row_function: RowFunction | None = None
    policy: RetryPolicy = field(default_factory=RetryPolicy)


def load_hooks(transform: str | None, row_function: str | None, policy: RetryPolicy) -> Hooks:
    """The user's code the settings name (``package.module:function`` each, or None), loaded.

    Raises:
        HookError: one cannot be imported or is not callable.
    """
    return Hooks(transform=load_hook("transform", transform) if transform else None,
                 row_function=load_hook("row_function", row_function) if row_function else None,
                 policy=policy)


def load_hook(setting: str, spec: str) -> Callable[..., Any]:
    """Import ``package.module:function`` and return the callable.

    Args:
        setting: the setting's name, for the message (``transform`` or ``row_function``).
        spec: ``package.module:function``.

    Raises:
        HookError: the spec is malformed, the module does not import, or the attribute is missing or not callable.
    """
    if not _SPEC.match(spec):
        raise HookError(f"{setting}={spec!r} is not package.module:function: name a function, "
                        "e.g. tenure.career.examples:enrich")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of user code is the same configuration problem
        raise HookError(f"{setting}={spec!r}: module {module_name!r} cannot be imported "
                        f"({type(exc).__name__}: {exc}); install it or add its folder to PYTHONPATH") from exc
    hook = getattr(module, attr, None)
    if hook is None:
        raise HookError(f"{setting}={spec!r}: module {module_name!r} has no attribute {attr!r}; "
                        "check the function name")
    if not callable(hook):
        raise HookError(f"{setting}={spec!r}: {attr!r} is a {type(hook).__name__}, not a function")
    return hook  # type: ignore[no-any-return]


def output_schema_problem(df: DataFrame) -> str | None:
    """Why ``df`` cannot be written as the table (``id``/``key`` strings and ``seq`` a long), or None."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    for name, wanted in _REQUIRED.items():
        if name not in fields:
            return f"drops column {name!r}"
        if fields[name] != wanted:
            return f"changes {name!r} to {fields[name].simpleString()} (must stay {wanted.simpleString()})"
    return None


def check_transform(spark: SparkSession, spec: str, transform: Transform) -> None:
    """Apply ``transform`` to an empty DataFrame of records and check what it returns (no job runs).

    Raises:
        HookError: it raised, returned something other than a DataFrame, or broke the output schema.
    """
    sample = spark.createDataFrame([], _RECORDS_DDL)
    try:
        out = transform(sample)
    except Exception as exc:
        raise HookError(f"transform={spec!r} raised on an empty batch ({type(exc).__name__}: {exc}); "
                        "fix the function") from exc
    if not isinstance(out, DataFrame):
        raise HookError(f"transform={spec!r} returned {type(out).__name__}, not a DataFrame; return the "
                        "transformed DataFrame")
    problem = output_schema_problem(out)
    if problem is not None:
        raise HookError(f"transform={spec!r} {problem}: the output must keep id, key and seq "
                        "(tenure orders and audits by them)")
