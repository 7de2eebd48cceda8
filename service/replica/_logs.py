"""structlog set-up: JSON lines when not a TTY, console rendering on a TTY; stdlib logs routed through it."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["configure_logging"]


def configure_logging(level: str = "info", *, json: bool | None = None) -> None:
    """Configure structlog and the stdlib root logger (kazoo, py4j) to render the same way on stderr.

    Args:
        level: the minimum level for tenure's own events.
        json: force JSON (True) or console (False) rendering; by default JSON unless stderr is a TTY.
    """
    as_json = (not sys.stderr.isatty()) if json is None else json
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=True)
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party chatter stays at WARNING unless asked for: kazoo logs every reconnect attempt at INFO.
    for noisy in ("kazoo", "py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
