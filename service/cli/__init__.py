"""The ``tenure`` command line: one entry point, flags also settable as ``TENURE_*`` environment variables.

One module per audience: ``_replica`` (``run``), ``_local`` (``zk``, ``redis``, ``spark``, ``up``, ``demo``), ``_ops``
(``status``, ``history``, ``verify``, ``produce``, ``replay``, ``handover``, ``drain``/``undrain``, ``groups``) and
``_drill`` (``drill``); ``_root`` holds the root group and what the commands share.
"""

from tenure.service.cli._drill import drill
from tenure.service.cli._local import demo, redis, spark, up, zk
from tenure.service.cli._ops import (
    drain_command,
    groups,
    handover,
    history,
    produce,
    replay,
    status,
    undrain_command,
    verify,
)
from tenure.service.cli._replica import run
from tenure.service.cli._root import main

for _command in (run, zk, redis, spark, up, demo, status, history, verify, produce, replay, handover, drain_command,
                 undrain_command, groups, drill):
    main.add_command(_command)

__all__ = ["main"]
