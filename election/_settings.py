"""The election's settings, each declared once with its default, unit and hazard, and validated together."""

from __future__ import annotations

from dataclasses import dataclass

from tenure.errors import ConfigError
from tenure.settings import setting

__all__ = ["ElectionSettings", "ElectionTiming"]


def _check(session_timeout_s: float, safe_fraction: float) -> None:
    if not 0.0 < safe_fraction < 1.0:
        raise ConfigError(f"safe_fraction={safe_fraction} is out of range: it must lie strictly between 0 "
                          "and 1 (0.5 is a sound default: half the session timeout)")
    if session_timeout_s <= 0:
        raise ConfigError(f"session_timeout_s={session_timeout_s:g} must be positive: pass the session timeout the "
                          "servers negotiated, or leave it unset to use the client's")


@dataclass(frozen=True)
class ElectionTiming:
    """The timing of one ``Election``: what :meth:`ElectionSettings.resolve` fills in from its defaults."""

    session_timeout_s: float
    safe_fraction: float
    tick_s: float
    op_timeout_s: float


@dataclass(frozen=True, kw_only=True)
class ElectionSettings:
    """The election's settings, as an operator sets them (``tenure run``'s flags of the same names).

    Example::

        settings = ElectionSettings(session_timeout_s=10.0)
        settings.op_timeout_s  # 5.0: the safe-until window, half the session timeout

    Raises:
        ConfigError: a setting that cannot work, named with its value and the fix.
    """

    session_timeout_s: float = setting(
        10.0, unit="s", help="ZooKeeper session timeout: a crashed leader is noticed when its session expires.",
        hazard="It bounds crash failover, but too short a value turns GC or network pauses into leadership "
        "changes. The ensemble only grants sessions within its bounds (embedded: 2–60 s); a value outside is "
        "refused at start-up.")
    safe_fraction: float = setting(
        0.5, unit="share of session_timeout_s", help="Stop committing this fraction of the session timeout after "
        "the last server response.",
        hazard="Near 1 a paused leader may still send a commit after its session expired on the server (the fence "
        "refuses it); too small suspends the leader on ordinary latency.")
    op_timeout_share: float | None = setting(
        None, unit="share of session_timeout_s", default_text="safe_fraction",
        help="Bound on each ZooKeeper call of the election (a commit, the handover record, the line's steps), as a "
        "share of the session timeout; by default the safe-until window, so a commit stuck on a dead link cannot "
        "hold the control thread past the point where the leader stops committing.",
        hazard="Above safe_fraction a stuck call holds the control thread after the leader has stopped committing "
        "anyway; too small fails calls on ordinary latency.")

    def __post_init__(self) -> None:
        _check(self.session_timeout_s, self.safe_fraction)
        share = self.op_timeout_share
        if share is not None and not 0.0 < share <= 1.0:
            raise ConfigError(f"op_timeout_share={share:g} is out of range: it must lie above 0 and at most 1 "
                              "(leave it unset for safe_fraction)")

    @property
    def op_timeout_s(self) -> float:
        """Each ZooKeeper call's bound, in seconds."""
        share = self.safe_fraction if self.op_timeout_share is None else self.op_timeout_share
        return share * self.session_timeout_s

    @classmethod
    def resolve(cls, *, session_timeout_s: float, safe_fraction: float = 0.5, tick_s: float | None = None,
                op_timeout_s: float | None = None) -> ElectionTiming:
        """One ``Election``'s timing from its keyword arguments (``tick_s``: a tenth of the session timeout;
        ``op_timeout_s``: all of it).

        Raises:
            ConfigError: a setting that cannot work, named with its value and the fix.
        """
        _check(session_timeout_s, safe_fraction)
        if tick_s is not None and not 0 < tick_s < safe_fraction * session_timeout_s:
            raise ConfigError(f"tick_s={tick_s} must be positive and below safe_fraction*session_timeout_s "
                              f"({safe_fraction * session_timeout_s:.3f} s), or the deadline cannot be kept fresh: "
                              "lower it, or leave it unset for a tenth of the session timeout")
        if op_timeout_s is not None and op_timeout_s <= 0:
            raise ConfigError(f"op_timeout_s={op_timeout_s} must be positive: leave it unset to bound each "
                              "ZooKeeper call by the session timeout")
        return ElectionTiming(session_timeout_s=session_timeout_s, safe_fraction=safe_fraction,
                              tick_s=tick_s if tick_s is not None else session_timeout_s / 10.0,
                              op_timeout_s=op_timeout_s if op_timeout_s is not None else session_timeout_s)
