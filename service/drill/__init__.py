"""Failover drills and the chaos run (``tenure drill``): faults placed on a local topology, judged by criteria."""

from service.drill._chaos_run import run_chaos
from service.drill._monitor import read_events
from service.drill._run import run_drills
from service.drill._settings import DrillError

__all__ = [
    "DrillError",
    "read_events",
    "run_chaos",
    "run_drills",
]
