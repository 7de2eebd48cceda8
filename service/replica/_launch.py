"""A replica's command line from its settings: how ``tenure up``, the drills, the tests and the bench start one."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from tenure.errors import ConfigError
from tenure.service.replica._config import SETTINGS, setting_named
from tenure.settings import parse_value, render_value

__all__ = ["PER_PROCESS", "ReplicaSpec"]

#: The settings a launcher fills in for each replica process (where to reach ZooKeeper, who it is, where its metrics
#: listen, its fault file): never part of a spec.
PER_PROCESS: Final = frozenset({"zk", "replica_id", "metrics_host", "metrics_port", "fault_file"})


class ReplicaSpec(Mapping[str, Any]):
    """The settings a launcher gives its replicas, by flat name, minus what it fills in per process
    (:data:`PER_PROCESS`). Each name is a declared setting of ``tenure run`` and each value is read as its type when
    the spec is built, so a typo fails there, not in a replica's log; settings left out keep their defaults.

    Example::

        spec = ReplicaSpec(career="counter", session_timeout_s=4)
        spec |= ReplicaSpec(max_files_per_trigger=2)           # the right-hand side wins
        spec.command(zk="127.0.0.1:2181", replica_id="r1", metrics_port=9401)
        # [python, '-m', 'tenure', 'run', '--zk', '127.0.0.1:2181', '--replica-id', 'r1', …,
        #  '--career', 'counter', '--session-timeout-s', '4.0', '--max-files-per-trigger', '2']

    Raises:
        ConfigError: an unknown name, a per-process one, or a value not of its setting's type.
    """

    def __init__(self, **settings: Any) -> None:
        values: dict[str, Any] = {}
        for name, value in settings.items():
            declaration = setting_named(name)
            if name in PER_PROCESS:
                raise ConfigError(f"{name} is filled in by the launcher for each replica: leave it out of the spec")
            try:
                values[name] = parse_value(declaration, value)
            except ValueError as exc:
                raise ConfigError(f"{name}={value!r} {exc}") from None
            if values[name] is None and declaration.default is not None:
                raise ConfigError(f"{name}=None has no flag: leave it out of the spec for its default")
        self._values = values

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __or__(self, other: Mapping[str, Any]) -> ReplicaSpec:
        return ReplicaSpec(**{**self._values, **other})

    def __repr__(self) -> str:
        return "ReplicaSpec(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def value(self, name: str) -> Any:
        """The setting's value in this spec, or its declared default when the spec leaves it out."""
        return self._values[name] if name in self._values else setting_named(name).default

    def argv(self, *, zk: str | None = None, replica_id: str | None = None, metrics_host: str | None = None,
             metrics_port: int | None = None, fault_file: Path | None = None) -> list[str]:
        """The spec as ``tenure run`` flags, after the per-process settings given, in the declarations' order (a
        setting the spec leaves out, or None, has no flag: the replica takes its default)."""
        given = {**self._values, "zk": zk, "replica_id": replica_id, "metrics_host": metrics_host,
                 "metrics_port": metrics_port, "fault_file": fault_file}
        out: list[str] = []
        for declaration in sorted(SETTINGS, key=lambda d: d.name not in PER_PROCESS):
            value = given.get(declaration.name)
            if value is not None:
                out += [declaration.flag, render_value(declaration, value)]
        return out

    def command(self, *, zk: str, replica_id: str, metrics_port: int, metrics_host: str = "127.0.0.1",
                fault_file: Path | None = None, module: str = "tenure") -> list[str]:
        """The whole command line of one replica: ``python -m <module> run`` and :meth:`argv` with the per-process
        settings. ``module``: ``tenure``, or an earlier release's entry module (its flags have the same names)."""
        return [sys.executable, "-m", module, "run", *self.argv(zk=zk, replica_id=replica_id, metrics_host=metrics_host,
                                                                metrics_port=metrics_port, fault_file=fault_file)]
