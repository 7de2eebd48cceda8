"""The replica process (``tenure run``): config, the runner's control loop, metrics, health, logs, fault points.

Imports nothing from ``service.ops``, ``service.local`` or ``service.drill``: a production replica carries no
operator tool and no local infrastructure.
"""
