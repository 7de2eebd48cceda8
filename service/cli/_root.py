"""The root group ``tenure`` and what its commands share: the error convention, signals, the ZooKeeper target."""

from __future__ import annotations

import functools
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NoReturn

import click

from tenure import __version__
from tenure.election import DigestCredential, ZooKeeperClient, connected
from tenure.errors import TenureError
from tenure.service._logs import configure_logging
from tenure.service._signals import on_signals

__all__ = ["ZkTarget", "fail", "main", "spark_cluster_option", "stop_on_signals", "zk_target"]


def fail(exc: TenureError, code: int = 2) -> NoReturn:
    """One clear line on stderr and a non-zero exit: the convention for every fatal error."""
    click.echo(f"tenure: error: {exc}", err=True)
    sys.exit(code)


_DAEMONS = frozenset({"run", "zk", "spark"})
"""Commands whose log is their output (info on stderr); every other command is for people: its report is the
output, and its events go to a log file in the folder it owns, if any (``--log-level`` on stderr if given)."""


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="tenure")
@click.option("--log-level", default="info", envvar="TENURE_LOG_LEVEL", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="Minimum level of log events (on stderr for run, zk and spark; other commands show warnings "
                   "there unless this is given, and write their events to their folder's log, if they own one).")
@click.pass_context
def main(ctx: click.Context, log_level: str) -> None:
    """tenure: a leader-elected, single-writer Spark consumer with fenced exactly-once output."""
    chosen = ctx.get_parameter_source("log_level") is not click.core.ParameterSource.DEFAULT
    quiet = ctx.invoked_subcommand not in _DAEMONS and not chosen
    configure_logging(log_level, stderr_level="warning" if quiet else None)


def stop_on_signals() -> threading.Event:
    """An event that SIGTERM and SIGINT set: a foreground command's loop waits on it, then stops in order."""
    stop = threading.Event()
    on_signals(lambda _signum: stop.set(), signal.SIGTERM, signal.SIGINT)
    return stop


spark_cluster_option = click.option(
    "--spark-cluster", "spark_workers", type=click.IntRange(0, 8), default=0, envvar="TENURE_SPARK_CLUSTER",
    show_default=True, help="Run the leader on an embedded Spark standalone cluster of this many workers "
    "(0: local Spark in each replica).")


@dataclass(frozen=True)
class ZkTarget:
    """Where an operator command talks to ZooKeeper: the hosts, the group (None where the command takes none)
    and the digest credential, parsed once from ``--zk-auth user:password``.

    Example::

        with target.connected() as client:
            ops.drain(client, target.group, replica, credential=target.credential)
    """

    hosts: str
    group: str | None = None
    credential: DigestCredential | None = None

    def connected(self, *, read_only: bool = False) -> AbstractContextManager[ZooKeeperClient]:
        """A started client of ``hosts`` with the credential, stopped at exit (``tenure.election.connected``)."""
        return connected(self.hosts, credential=self.credential, read_only=read_only)

    @property
    def group_name(self) -> str:
        """The group, for a command that declares ``--group``."""
        if self.group is None:
            raise TenureError("this command names no --group")  # a wiring mistake, never an operator's
        return self.group


_READS_AUTH_HELP = "user:password, if reads need it."
_WRITES_AUTH_HELP = "user:password (the service's)."


_Decorator = Callable[[Callable[..., None]], Callable[..., None]]


def zk_target(*, required: bool = True, group: bool = True, writes: bool = False, zk_help: str | None = None,
              zk_envvar: str | None = "TENURE_ZK", after_zk: tuple[_Decorator, ...] = ()) -> _Decorator:
    """Declare ``--zk``, ``--group`` (unless ``group=False``) and ``--zk-auth``, and pass the command one
    ``target: ZkTarget`` instead (None when ``required=False`` and ``--zk`` is not given).

    Args:
        required: ``--zk`` must be given (flag or ``zk_envvar``).
        group: declare ``--group`` (default ``default``, ``TENURE_GROUP``).
        writes: the command writes znodes, so the credential is the service's (it only changes the help).
        zk_help: the help of ``--zk`` (default: "ZooKeeper connect string.").
        zk_envvar: the variable ``--zk`` is read from (None: only the flag).
        after_zk: the command's own options listed between ``--zk`` and the rest, as its help has them.
    """
    options: list[_Decorator] = [click.option("--zk", required=required, default=None, envvar=zk_envvar,
                            help=zk_help or "ZooKeeper connect string."), *after_zk]
    if group:
        options.append(click.option("--group", default="default", envvar="TENURE_GROUP", show_default=True))
    options.append(click.option("--zk-auth", default=None, envvar="TENURE_ZK_AUTH",
                                help=_WRITES_AUTH_HELP if writes else _READS_AUTH_HELP))

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def with_target(*args: Any, zk: str | None, zk_auth: str | None, **kwargs: Any) -> None:
            named = kwargs.pop("group") if group else None
            try:
                credential = DigestCredential.parse(zk_auth) if zk_auth else None
            except TenureError as exc:
                fail(TenureError(f"--zk-auth {exc}"))
            target = None if zk is None else ZkTarget(zk, named, credential)
            command(*args, target=target, **kwargs)

        decorated: Callable[..., None] = with_target
        for option in reversed(options):
            decorated = option(decorated)
        return decorated

    return decorate
