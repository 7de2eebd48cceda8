"""Failover drills and the chaos run (``tenure drill``): faults placed on a local topology, judged by criteria."""

from service.drill._chaos import run_chaos
from service.drill._drill import DrillError, read_events, run_drills

__all__ = [
    "DrillError",
    "read_events",
    "run_chaos",
    "run_drills",
]
