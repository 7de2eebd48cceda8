"""Logging for every command: structlog set-up, JSON lines when not a TTY, console rendering on a TTY; stdlib logs
routed through it.

A daemon (``tenure run``, ``zk``, ``spark``) logs at its level on stderr. A command for people shows only
warnings on stderr (its report is on stdout), and one that owns a folder also writes its events, at the
configured level, to a log file there (:func:`log_to_file`).
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

import structlog

__all__ = ["configure_logging", "log_to_file"]

_SHARED: list[structlog.types.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def _formatter(as_json: bool) -> logging.Formatter:
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=True)
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_SHARED,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )


def configure_logging(level: str = "info", *, json: bool | None = None, stderr_level: str | None = None) -> None:
    """Configure structlog and the stdlib root logger (kazoo, py4j) to render the same way on stderr.

    Args:
        level: the minimum level of tenure's own events (on stderr and in any :func:`log_to_file`).
        json: force JSON (True) or console (False) rendering on stderr; by default JSON unless stderr is a TTY.
        stderr_level: show only events at or above this level on stderr (default: ``level``).
    """
    as_json = (not sys.stderr.isatty()) if json is None else json
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_formatter(as_json))
    handler.setLevel((stderr_level or level).upper())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party chatter stays at WARNING unless asked for: kazoo logs every reconnect attempt at INFO.
    for noisy in ("kazoo", "py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


class _FolderFileHandler(logging.handlers.WatchedFileHandler):
    """A log file opened at its first event, and opened again (its folder made again) if it has gone: a command
    may wipe its folder as it starts."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8", delay=True)

    def _open(self):  # type: ignore[no-untyped-def]  # logging's own signature
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


def log_to_file(path: Path) -> Path:
    """Also write every event at the configured level to ``path``, as JSON lines (appended); returns ``path``."""
    handler = _FolderFileHandler(path)
    handler.setFormatter(_formatter(as_json=True))
    logging.getLogger().addHandler(handler)
    return path
