"""The election's timing settings, resolved from their defaults and validated together at construction."""

from __future__ import annotations

from dataclasses import dataclass

from tenure.election._errors import ConfigError

__all__ = ["ElectionSettings"]


@dataclass(frozen=True)
class ElectionSettings:
    """The timing of one ``Election`` (see its docstring for each setting's default and hazard).

    Example::

        settings = ElectionSettings.resolve(session_timeout_s=10.0, safe_fraction=0.5)
        settings.tick_s  # 1.0: a tenth of the session timeout
    """

    session_timeout_s: float
    safe_fraction: float
    tick_s: float
    op_timeout_s: float

    @classmethod
    def resolve(cls, *, session_timeout_s: float, safe_fraction: float = 0.5, tick_s: float | None = None,
                op_timeout_s: float | None = None) -> ElectionSettings:
        """Fill in the defaults (``tick_s``: a tenth of the session timeout; ``op_timeout_s``: all of it).

        Raises:
            ConfigError: a setting that cannot work, named with its value and the fix.
        """
        if not 0.0 < safe_fraction < 1.0:
            raise ConfigError(f"safe_fraction={safe_fraction} is out of range: it must lie strictly between 0 "
                              "and 1 (0.5 is a sound default: half the session timeout)")
        if session_timeout_s <= 0:
            raise ConfigError(f"session_timeout_s={session_timeout_s} must be positive: pass the session timeout "
                              "the servers negotiated, or leave it unset to use the client's")
        if tick_s is not None and not 0 < tick_s < safe_fraction * session_timeout_s:
            raise ConfigError(f"tick_s={tick_s} must be positive and below safe_fraction*session_timeout_s "
                              f"({safe_fraction * session_timeout_s:.3f} s), or the deadline cannot be kept fresh: "
                              "lower it, or leave it unset for a tenth of the session timeout")
        if op_timeout_s is not None and op_timeout_s <= 0:
            raise ConfigError(f"op_timeout_s={op_timeout_s} must be positive: leave it unset to bound each "
                              "ZooKeeper call by the session timeout")
        return cls(session_timeout_s=session_timeout_s, safe_fraction=safe_fraction,
                   tick_s=tick_s if tick_s is not None else session_timeout_s / 10.0,
                   op_timeout_s=op_timeout_s if op_timeout_s is not None else session_timeout_s)
