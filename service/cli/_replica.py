"""``tenure run``: one replica in the foreground, one flag per declared setting (``SETTINGS``)."""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import click

from tenure.errors import TenureError
from tenure.service.cli._root import fail
from tenure.service.replica import SETTINGS, load_config, run_replica, setting_named
from tenure.settings import Declaration

__all__ = ["run", "setting_option", "shown_default"]


def _click_type(declaration: Declaration) -> Any:
    """The flag's type: a choice for a ``Literal``, the number or path type (alone or optional), else text."""
    annotation = declaration.type
    if get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) is Literal:
        return click.Choice(get_args(annotation))
    return annotation if annotation in (int, float, Path) else str


def shown_default(declaration: Declaration) -> str | None:
    """How the flag's help shows its default; None when it has none to show (required, or unset or computed with
    no words for it)."""
    if declaration.required:
        return None
    if declaration.computed or declaration.default is None:
        return declaration.default_text
    return str(declaration.default)


def _replica_options(command: Callable[..., None]) -> Callable[..., None]:
    """One ``--flag`` (and ``TENURE_FLAG`` variable) per declared setting, its help from the declaration.

    Defaults stay in the declarations: a flag left out is None here, so the TOML file and the declaration fill it.
    """
    for declaration in reversed(SETTINGS):
        default = shown_default(declaration)
        help_text = declaration.describe() + (f" [default: {default}]" if default is not None else "")
        command = click.option(declaration.flag, declaration.name, type=_click_type(declaration), default=None,
                               envvar=declaration.variable, help=help_text)(command)
    return command


def setting_option(name: str, *, default: Any = None, envvar: bool = False) -> Callable[[Any], Any]:
    """The flag of another command (``tenure up``) for the replica's setting ``name``: its type and help from the
    declaration, its default ``default`` or else the declared one; with ``envvar``, the setting's variable too."""
    declaration = setting_named(name)
    return click.option(declaration.flag, name, type=_click_type(declaration), show_default=True,
                        default=declaration.default if default is None else default, help=declaration.help,
                        envvar=declaration.variable if envvar else None)


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
