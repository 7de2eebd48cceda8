"""``tenure run``: one replica in the foreground, one flag per ``ReplicaConfig`` field."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import click
from pydantic_core import PydanticUndefined

from tenure.election import TenureError
from tenure.service.cli._root import fail
from tenure.service.replica import ReplicaConfig, load_config, run_replica

__all__ = ["run"]


def _replica_options(command: Callable[..., None]) -> Callable[..., None]:
    """One ``--flag`` (and ``TENURE_FLAG`` variable) per ``ReplicaConfig`` field, help from its description.

    Defaults stay in the model: a flag left out is None here, so the TOML file and the model fill it.
    """
    for name, field in reversed(list(ReplicaConfig.model_fields.items())):
        annotation = field.annotation
        choices = get_args(annotation) if get_origin(annotation) is Literal else None
        base = next((t for t in (int, float, Path) if annotation is t or t in get_args(annotation)), str)
        click_type: Any = click.Choice(choices) if choices else base
        default = field.get_default(call_default_factory=False) if field.default_factory is None else None
        help_text = field.description or ""
        if default not in (None, PydanticUndefined):
            help_text += f" [default: {default}]"
        command = click.option(f"--{name.replace('_', '-')}", name, type=click_type, default=None,
                               envvar=f"TENURE_{name.upper()}", help=help_text)(command)
    return command


@click.command()
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              envvar="TENURE_CONFIG", help="A TOML file of settings (field names as keys); flags and "
              "TENURE_* variables override it.")
@_replica_options
def run(config_file: Path | None, **overrides: Any) -> None:
    """Run one replica in the foreground; SIGTERM hands over gracefully, then exits 0."""
    try:
        config = load_config(overrides, config_file)
        code = run_replica(config)
    except TenureError as exc:
        fail(exc)
    sys.exit(code)
