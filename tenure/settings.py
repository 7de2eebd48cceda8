"""Settings declared once: each field of a part's settings carries its default, unit, help and hazard beside it.

A part (the election, the runner, the watchdog, a career …) declares its settings as a frozen dataclass whose
fields are :func:`setting` s; its own ``__post_init__`` validates them. A whole (the replica's configuration)
composes parts with :func:`part`. :func:`declarations` lists every setting of a class, its parts' included, under
one flat name each; flags, ``TENURE_*`` variables, TOML keys, the documentation's table and a launcher's command
line are all made from that list, so a setting's default is written in one place.

This module is the foundation floor: it imports nothing of tenure's, so every room can declare its settings here.

Example::

    @dataclass(frozen=True, kw_only=True)
    class PollSettings:
        poll_interval_s: float = setting(0.5, unit="s", help="How often to look for work.",
                                         hazard="Short polls cost a core when idle.")

    [d.name for d in declarations(PollSettings)]  # ['poll_interval_s']
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, get_args, get_origin

__all__ = [
    "REQUIRED",
    "Declaration",
    "declarations",
    "default_of",
    "parse_value",
    "part",
    "render_value",
    "setting",
    "values",
]

_SETTING: Final = "tenure.setting"
_PART: Final = "tenure.part"


class _Required:
    """The default of a setting that has none: it must be given."""

    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of a setting that must be given (``setting(help=…)`` without a default).
REQUIRED: Final = _Required()


@dataclass(frozen=True)
class _Meta:
    help: str
    unit: str | None
    hazard: str | None
    default_text: str | None


def setting(default: Any = REQUIRED, *, help: str, unit: str | None = None, hazard: str | None = None,
            factory: Callable[[], Any] | None = None, default_text: str | None = None) -> Any:
    """Declare one setting: a dataclass field carrying its default, unit, help and hazard.

    Args:
        default: the value when none is given; omitted (``REQUIRED``) when the setting must be given.
        help: what the setting does, one or two sentences (the flag's help and the table's meaning).
        unit: what the number counts (``s``, ``MiB``, ``share of handover_timeout_s`` …); None for a name or path.
        hazard: what goes wrong when it is set badly, if anything does.
        factory: makes the default when it is mutable or computed (``dict``, the host name); then no ``default``.
        default_text: how documentation names a computed default (``the host name``), or what None means
            (``never``).
    """
    metadata = {_SETTING: _Meta(help.strip(), unit, hazard.strip() if hazard else None, default_text)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    if default is REQUIRED:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def part(settings: type[Any]) -> Any:
    """Compose a part's settings into a whole: the field holds an instance of ``settings`` (or None, when the part
    applies only sometimes), and :func:`declarations` of the whole lists the part's settings as its own."""
    return dataclasses.field(metadata={_PART: settings})


@dataclass(frozen=True)
class Declaration:
    """One declared setting, under its flat name (unique across a whole's parts).

    Attributes:
        name: the field's name: the TOML key; ``--name-with-dashes`` is the flag, ``TENURE_NAME`` the variable.
        type: the field's type (``float``, ``Path | None``, ``Literal['warm', 'cold']`` …).
        default: the default value, or :data:`REQUIRED`; for a ``factory`` default, what it makes now.
        help: what the setting does.
        unit: what the number counts, if it is one.
        hazard: what goes wrong when it is set badly, if anything does.
        owner: the settings class that declares it.
        path: where the value lives in the whole, e.g. ``("runner", "handover_timeout_s")``.
        computed: whether the default is made by a factory (the host name), so it differs from host to host.
        default_text: how documentation names a computed default, or what an unset one (None) means.
    """

    name: str
    type: Any
    default: Any
    help: str
    unit: str | None
    hazard: str | None
    owner: type[Any]
    path: tuple[str, ...]
    computed: bool = False
    default_text: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def variable(self) -> str:
        return "TENURE_" + self.name.upper()

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        """The help, then the hazard (``Hazard: …``) when there is one."""
        return f"{self.help} Hazard: {self.hazard}" if self.hazard else self.help


def declarations(settings: type[Any]) -> tuple[Declaration, ...]:
    """Every setting ``settings`` (a dataclass) declares, its parts' settings in their places, in field order.

    Raises:
        TypeError: two settings share a flat name (a programming error: a flag, a variable and a TOML key must each
            say which setting they set).
    """
    found: dict[str, Declaration] = {}
    for declaration in _walk(settings, ()):
        other = found.get(declaration.name)
        if other is not None:
            raise TypeError(f"setting {declaration.name!r} is declared twice: by {other.owner.__name__} and by "
                            f"{declaration.owner.__name__}; rename one")
        found[declaration.name] = declaration
    return tuple(found.values())


def _walk(settings: type[Any], path: tuple[str, ...]) -> list[Declaration]:
    hints = typing.get_type_hints(settings)
    out: list[Declaration] = []
    for f in dataclasses.fields(settings):
        meta = f.metadata.get(_SETTING)
        if meta is not None:
            factory = f.default_factory
            computed = callable(factory)
            default = factory() if callable(factory) else f.default
            out.append(Declaration(
                name=f.name, type=hints[f.name], default=REQUIRED if default is dataclasses.MISSING else default,
                help=meta.help, unit=meta.unit, hazard=meta.hazard, owner=settings, path=(*path, f.name),
                computed=computed, default_text=meta.default_text))
        elif _PART in f.metadata:
            out.extend(_walk(f.metadata[_PART], (*path, f.name)))
    return out


def default_of(settings: type[Any], name: str) -> Any:
    """The declared default of ``settings``'s setting ``name``: for a library default that must agree with it.

    Raises:
        KeyError: no such setting, or one without a default.
    """
    for declaration in declarations(settings):
        if declaration.name == name and not declaration.required:
            return declaration.default
    raise KeyError(f"{settings.__name__} declares no setting {name!r} with a default")


def values(whole: object) -> dict[str, Any]:
    """Every declared setting's value in ``whole`` by flat name; a part that is None (does not apply) adds none."""
    out: dict[str, Any] = {}
    for declaration in declarations(type(whole)):
        holder: Any = whole
        for step in declaration.path[:-1]:
            holder = getattr(holder, step)
            if holder is None:
                break
        else:
            out[declaration.name] = getattr(holder, declaration.path[-1])
    return out


def _optional(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` → (X, True); anything else → (itself, False)."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def _is_mapping(annotation: Any) -> bool:
    return get_origin(annotation) in (dict, Mapping) or annotation in (dict, Mapping)


def parse_value(declaration: Declaration, value: Any) -> Any:
    """``value`` (from a flag, a variable, a TOML file or a launcher) as ``declaration``'s type.

    Numbers may come as text (``"10"``), paths as text, a mapping as ``key=value[,key=value…]`` text or a table.

    Raises:
        ValueError: the value is not of the type; the message says what it must be (the caller names the setting).
    """
    kind, optional = _optional(declaration.type)
    if value is None:
        if optional:
            return None
        raise ValueError("must be given: it has no empty value")
    if get_origin(kind) is Literal:
        choices = get_args(kind)
        if value not in choices:
            raise ValueError("is not one of " + ", ".join(str(c) for c in choices))
        return value
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ValueError("is not true or false")
    if kind is int:
        return _whole_number(value)
    if kind is float:
        return _number(value)
    if kind is Path:
        if isinstance(value, str | Path) and str(value):
            return Path(value)
        raise ValueError("is not a path")
    if kind is str:
        if isinstance(value, str):
            return value
        raise ValueError("is not text")
    if _is_mapping(kind):
        return _pairs(value)
    raise TypeError(f"setting {declaration.name!r} has a type settings cannot read: {declaration.type!r}")


def _whole_number(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("is not a whole number")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValueError("is not a whole number")


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("is not a number")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ValueError("is not a number")


def _pairs(value: Any) -> dict[str, str]:
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",") if item.strip()]
        bad = next((item for item in items if "=" not in item), None)
        if bad is not None:
            raise ValueError(f"has {bad!r} without '=': use key=value[,key=value…]")
        value = dict(item.split("=", 1) for item in items)
    if isinstance(value, Mapping):
        return {str(k).strip(): str(v).strip() for k, v in value.items()}
    raise ValueError("is not key=value[,key=value…] or a table")


def render_value(declaration: Declaration, value: Any) -> str:
    """``value`` as the text of ``declaration``'s flag, which :func:`parse_value` reads back to the same value.

    Raises:
        ValueError: the value has no text that reads back (None, or a mapping whose keys or values hold ``,`` or
            ``=``).
    """
    if value is None:
        raise ValueError(f"{declaration.name}=None has no flag: leave it out for its default")
    if isinstance(value, Mapping):
        pairs = [(str(k), str(v)) for k, v in value.items()]
        if any("," in k or "=" in k or "," in v for k, v in pairs):
            raise ValueError(f"{declaration.name}={dict(value)!r} has a ',' or '=' a flag cannot carry")
        return ",".join(f"{k}={v}" for k, v in pairs)
    if isinstance(value, float):
        return repr(value)  # reads back exactly, unlike :g
    return str(value)
