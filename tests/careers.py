"""Careers of the tests' own, loaded by `tenure run --career tests.careers:NAME` (the plug-in path)."""

from __future__ import annotations

from typing import Any

from tenure.career import CareerObserver
from tenure.career._counter import CounterCareer


class _FailingCounter(CounterCareer):
    """A counter that raises on every execute(): a crash-looping career."""

    def execute(self) -> bool:
        raise RuntimeError("injected failure: this career always raises")


def always_fails(config: Any, observer: CareerObserver) -> CounterCareer:
    """Every execute() raises, whatever the replica."""
    return _FailingCounter(config.data_root / "counter.log", interval_s=config.counter_interval_s,
                           observer=observer)
