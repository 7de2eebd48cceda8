"""Polling in the tests, all of it on the product's one deadline helper: ``wait_for`` (``tenure.service.local``)
until something happens, ``stays_for`` while nothing may."""

from __future__ import annotations

import time
from collections.abc import Callable

from tenure.service.local import wait_for

__all__ = ["stays_for"]


def stays_for(holds: Callable[[], object], seconds: float, what: str, interval_s: float = 0.05) -> None:
    """Poll ``holds`` every ``interval_s`` for ``seconds`` (and once past them); fail at the first time it is false,
    naming ``what`` and when: "nothing happens for N seconds", without a bare sleep.

    Example::

        stays_for(lambda: jobs() == before, 1.0, "no keep-warm job after close")

    Raises:
        AssertionError: ``holds()`` returned something false; the message says after how many seconds.
    """
    started = time.monotonic()
    try:
        wait_for(lambda: not holds(), seconds, what, interval_s)
    except TimeoutError:
        return  # it held through the deadline
    raise AssertionError(f"{what}: broken after {time.monotonic() - started:.2f} s of {seconds:g} s")
