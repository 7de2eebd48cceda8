"""Failover drills and the chaos run (``tenure drill``): faults placed on a local topology, judged by criteria."""
