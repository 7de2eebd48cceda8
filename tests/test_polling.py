"""The tests' polling helpers: ``stays_for`` holds for its whole window and reports when its condition first broke."""

from __future__ import annotations

import time

import pytest

from tests._polling import stays_for


def test_stays_for_returns_once_the_condition_held_for_the_whole_window() -> None:
    """A condition that stays true: ``stays_for`` polls it for the whole window (and once past it), then returns."""
    calls: list[float] = []

    def holds() -> bool:
        calls.append(time.monotonic())
        return True

    started = time.monotonic()
    stays_for(holds, 0.3, "always true", interval_s=0.01)
    assert time.monotonic() - started >= 0.3
    assert calls[-1] - started > 0.3, "not checked past the window's end"
    assert len(calls) > 5


def test_stays_for_reports_the_first_time_the_condition_broke() -> None:
    """A condition that turns false after about 0.2 s of a 5 s window fails at once, naming what and when."""
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"^no job ran: broken after 0\.[2-4]\d s of 5 s$"):
        stays_for(lambda: time.monotonic() - started < 0.2, 5.0, "no job ran", interval_s=0.01)
    assert time.monotonic() - started < 1.0, "it waited out the window after the condition broke"
