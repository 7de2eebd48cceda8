"""Failover drills and the chaos run (``tenure drill``): faults placed on a local topology, judged by criteria."""

from tenure.service.drill._chaos_run import run_chaos
from tenure.service.drill._monitor import read_events
from tenure.service.drill._run import run_drills
from tenure.service.drill._settings import DrillError, check_arguments

__all__ = [
    "DrillError",
    "check_arguments",
    "read_events",
    "run_chaos",
    "run_drills",
]
